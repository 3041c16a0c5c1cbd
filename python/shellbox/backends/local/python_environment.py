"""Self-contained Python environments for local machines to mount read-only.

``build_python_environment`` runs ``shellbox pyenv build`` (the Rust ``shellbox-pyenv``
crate): a uv-managed CPython under ``root/python`` and a venv at ``root/venv``, synced from a
hash lock, every file and link inside ``root``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..._server import find_executable
from ...errors import UnsupportedMachineSpec

__all__ = ["PythonEnvironment", "UvError", "build_python_environment"]


class UvError(RuntimeError):
    """A uv command failed; the message holds the command and uv's error output."""


@dataclass(frozen=True)
class PythonEnvironment:
    """A venv at ``root/venv`` whose interpreter is installed under ``root``; the root must
    stay where it was built."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "venv" / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python3"


def build_python_environment(
    root: Path, lock: Path, python_version: str, only_binary: bool = False
) -> PythonEnvironment:
    """Builds (once; concurrent builders wait on a lock beside ``root``) a venv under ``root``
    with CPython ``python_version`` and the packages of the hash lock ``lock``.

    Raises :class:`UvError` when uv fails, ``ValueError`` when ``root`` holds an environment
    built from other inputs."""
    if only_binary:
        raise UnsupportedMachineSpec("build_python_environment(only_binary=True) is not supported by shellbox yet")
    root = Path(root).absolute()
    completed = subprocess.run(
        [find_executable(), "pyenv", "build", "--root", str(root), "--lock", str(Path(lock).absolute()),
         "--python", python_version],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        message = completed.stderr.strip().removeprefix("shellbox: ")
        if "marker" in message or "other inputs" in message:
            raise ValueError(message)
        raise UvError(message)
    return PythonEnvironment(root)
