"""Image sources the Docker backend builds or pulls (the reference's ``shellbox.image``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["DockerfileSource", "RegistryImage"]


@dataclass(frozen=True)
class RegistryImage:
    """An image the engine pulls, e.g. ``ghcr.io/org/img:tag`` (no scheme; blank or ``://``
    is a ``ValueError`` when the machine is created)."""

    reference: str


@dataclass(frozen=True)
class DockerfileSource:
    """An image the engine builds from ``dockerfile`` with the build context ``context``."""

    context: Path
    dockerfile: Path
