"""The Docker backend: one container per machine, through the Docker Engine API."""

from __future__ import annotations

from typing import Any, ClassVar

from ...machine import Backend, Machine, MachineFactory

__all__ = ["DockerMachine", "DockerMachineFactory"]


class DockerMachine(Machine):
    """One container, removed by ``close``."""

    backend: ClassVar[Backend] = Backend.DOCKER


class DockerMachineFactory(MachineFactory):
    """Creates containers from ``DockerImage`` (never pulled), ``RegistryImage`` (pulled) or
    ``DockerfileSource`` (built) specs. ``runtime`` picks an OCI runtime (``runsc`` for
    gVisor); ``host`` the engine (default ``DOCKER_HOST``, else the local socket)."""

    backend: ClassVar[Backend] = Backend.DOCKER
    machine_class: ClassVar[type[Machine]] = DockerMachine

    def __init__(self, *, runtime: str | None = None, host: str | None = None, executable: str | None = None) -> None:
        options: dict[str, Any] = {"backend": "docker"}
        if runtime is not None:
            options["runtime"] = runtime
        if host is not None:
            options["host"] = host
        super().__init__(options, executable)
