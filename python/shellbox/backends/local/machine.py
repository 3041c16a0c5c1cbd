"""The local backend: commands on this host in bubblewrap (``bwrap``) sandboxes."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, ClassVar

from ...errors import SandboxUnavailable
from ...machine import Backend, Machine, MachineFactory

__all__ = ["LocalMachine", "LocalMachineFactory", "SandboxUnavailable", "SystemDirectories"]


class SystemDirectories(str, enum.Enum):
    """How a machine sees the host's system directories."""

    READ_ONLY = "read_only"
    COPY_ON_WRITE = "copy_on_write"


class LocalMachine(Machine):
    """A private root directory on this host, removed by ``close``."""

    backend: ClassVar[Backend] = Backend.LOCAL


class LocalMachineFactory(MachineFactory):
    """Runs trusted commands on this host in bubblewrap sandboxes, any number of machines at a
    time. Each machine has a private root; the host's system directories and each directory in
    ``read_only`` are mounted read-only; ``bin_dirs`` go first on ``PATH`` (not mounted);
    ``hash_seed`` sets ``PYTHONHASHSEED``. Commands never inherit the host environment.

    ``system_directories=COPY_ON_WRITE`` gives each machine writable ``/usr``, ``/bin``,
    ``/lib*``, ``/sbin`` and ``/etc`` through a copy-on-write layer of its own (an
    ``apt-get install`` or a tool written to ``/usr/local/bin`` stays in that machine and goes
    with it); it needs a root host process and overlayfs.

    ``PackageSpec`` sources with ``pypi_packages`` are locked and built under
    ``package_cache`` (default ``$HOME/.cache/shellbox/python``) for CPython
    ``python_version`` (default: ``python_interpreter``'s own version, else ``3.12.12``);
    ``python_interpreter`` names a local CPython to build from where uv cannot download one.

    The constructor checks that bwrap can sandbox here (``bwrap``, else each on ``PATH``) and
    raises :class:`SandboxUnavailable` with every candidate's error when none can (or, for
    copy-on-write, naming what the host lacks), and ``ValueError`` for a ``read_only`` path
    that is not an existing directory.
    """

    backend: ClassVar[Backend] = Backend.LOCAL
    machine_class: ClassVar[type[Machine]] = LocalMachine

    def __init__(
        self,
        *,
        read_only: tuple[Path, ...] = (),
        bin_dirs: tuple[Path, ...] = (),
        bwrap: Path | None = None,
        hash_seed: str | None = None,
        package_cache: Path | None = None,
        python_version: str | None = None,
        python_interpreter: Path | None = None,
        system_directories: SystemDirectories = SystemDirectories.READ_ONLY,
        executable: str | None = None,
    ) -> None:
        self.system_directories = SystemDirectories(system_directories)
        self.read_only = tuple(Path(p).absolute() for p in read_only)
        missing = [str(p) for p in self.read_only if not p.is_dir()]
        if missing:
            raise ValueError(f"Read-only directories do not exist: {', '.join(missing)}")
        self.bin_dirs = tuple(Path(p).absolute() for p in bin_dirs)
        self.hash_seed = hash_seed
        self.package_cache = None if package_cache is None else Path(package_cache).absolute()
        self.python_version = python_version
        self.python_interpreter = None if python_interpreter is None else Path(python_interpreter).absolute()
        options: dict[str, Any] = {
            "backend": "local",
            "read_only": [str(p) for p in self.read_only],
            "bin_dirs": [str(p) for p in self.bin_dirs],
            "system_directories": self.system_directories.value,
        }
        if bwrap is not None:
            options["bwrap"] = str(bwrap)
        if hash_seed is not None:
            options["hash_seed"] = hash_seed
        if self.package_cache is not None:
            options["package_cache"] = str(self.package_cache)
        if python_version is not None:
            options["python_version"] = python_version
        if self.python_interpreter is not None:
            options["python_interpreter"] = str(self.python_interpreter)
        super().__init__(options, executable)
