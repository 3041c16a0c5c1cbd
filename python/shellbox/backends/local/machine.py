"""The local backend: commands on this host in bubblewrap (``bwrap``) sandboxes."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, ClassVar

from ...errors import SandboxUnavailable, UnsupportedMachineSpec
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

    The constructor checks that bwrap can sandbox here (``bwrap``, else each on ``PATH``) and
    raises :class:`SandboxUnavailable` with every candidate's error when none can, and
    ``ValueError`` for a ``read_only`` path that is not an existing directory.
    ``system_directories=COPY_ON_WRITE`` raises :class:`UnsupportedMachineSpec` (not in
    shellbox yet); ``package_cache`` and ``python_version`` are kept for ``PackageSpec``
    sources with packages, which shellbox does not run yet.
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
        python_version: str = "3.12.12",
        system_directories: SystemDirectories = SystemDirectories.READ_ONLY,
        executable: str | None = None,
    ) -> None:
        if SystemDirectories(system_directories) != SystemDirectories.READ_ONLY:
            raise UnsupportedMachineSpec(
                "system_directories=copy_on_write is not supported by shellbox yet (only read_only)"
            )
        self.read_only = tuple(Path(p).absolute() for p in read_only)
        missing = [str(p) for p in self.read_only if not p.is_dir()]
        if missing:
            raise ValueError(f"Read-only directories do not exist: {', '.join(missing)}")
        self.bin_dirs = tuple(Path(p).absolute() for p in bin_dirs)
        self.hash_seed = hash_seed
        self.package_cache = package_cache
        self.python_version = python_version
        options: dict[str, Any] = {
            "backend": "local",
            "read_only": [str(p) for p in self.read_only],
            "bin_dirs": [str(p) for p in self.bin_dirs],
        }
        if bwrap is not None:
            options["bwrap"] = str(bwrap)
        if hash_seed is not None:
            options["hash_seed"] = hash_seed
        super().__init__(options, executable)
