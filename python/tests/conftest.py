"""Fixtures of the Python suite: one factory per backend (sim, local, docker), each test run
on every backend it applies to. A backend whose prerequisite is missing skips its tests, and
every skip is reported as one `SKIP <test>: <reason>` line on stderr (the repo's format)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shellbox.backends.docker.machine import DockerMachineFactory
from shellbox.backends.local.machine import LocalMachineFactory, SandboxUnavailable
from shellbox.backends.shellsim.machine import ShellSimMachineFactory
from shellbox.machine import DockerImage, HostImage, MachineFactory, MachineSpec, PackageSpec

#: The image the shellbox-docker tests import from Debian's busybox-static.
BUSYBOX_IMAGE = "shellbox-test/busybox:1"
DOCKER_SOCKET = "/var/run/docker.sock"
BACKENDS = ("sim", "local", "docker")


def docker_engine_reason() -> str | None:
    """Why the docker backend cannot be tested here, or None."""
    if not os.path.exists(DOCKER_SOCKET) and not os.environ.get("DOCKER_HOST"):
        return f"{DOCKER_SOCKET} is unreachable and DOCKER_HOST is unset"
    return None


_factories: dict[str, MachineFactory | str] = {}


def factory_for(backend: str) -> MachineFactory:
    """One factory (and so one server) per backend for the whole session; skips when the
    backend cannot run here."""
    if backend not in _factories:
        try:
            if backend == "sim":
                _factories[backend] = ShellSimMachineFactory()
            elif backend == "local":
                _factories[backend] = LocalMachineFactory()
            else:
                reason = docker_engine_reason()
                _factories[backend] = reason if reason else DockerMachineFactory()
        except SandboxUnavailable as error:
            _factories[backend] = f"no bubblewrap sandbox here: {error}"
        except RuntimeError as error:
            _factories[backend] = f"the docker engine is unreachable: {error}"
    value = _factories[backend]
    if isinstance(value, str):
        skip(value)
    return value


def skip(reason: str) -> None:
    """Skips the test; under CI=true a missing prerequisite fails it instead (the repo's rule:
    CI installs every prerequisite)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"prerequisite missing under CI=true: {reason}")
    pytest.skip(reason)


def spec_for(backend: str, **fields: Any) -> MachineSpec:
    source: Any = {"sim": PackageSpec(), "local": HostImage(), "docker": DockerImage(BUSYBOX_IMAGE)}[backend]
    return MachineSpec(source, **fields)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def factory(backend: str) -> MachineFactory:
    return factory_for(backend)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.when in ("setup", "call"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        sys.__stderr__.write(f"SKIP {report.nodeid}: {reason}\n")


@pytest.fixture
def run() -> Iterator[Any]:
    """Runs a coroutine to completion on a fresh event loop (each test its own loop: the
    factories must work across loops)."""
    yield asyncio.run


def source_tree() -> Path:
    return Path(__file__).resolve().parents[2]
