"""Bounded reads of many files out of a machine (the reference's ``shellbox.transfer``)."""

from __future__ import annotations

import base64

from .machine import Machine

__all__ = ["download_files"]


async def download_files(
    machine: Machine,
    paths: tuple[str, ...] | list[str],
    timeout: float = 60.0,
    max_files: int = 1000,
    max_bytes: int = 64 * 1024 * 1024,
    max_file_bytes: int = 16 * 1024 * 1024,
) -> dict[str, bytes]:
    """Reads the regular files at ``paths`` (absolute, normalised; directories are read
    recursively) into a map from absolute guest path to bytes, under a file budget, a byte
    budget, a per-file cap and a per-guest-command ``timeout`` in seconds.

    A missing path is skipped; a path that is or lies below a symlink is refused (links
    inside a directory are ignored, never followed); a hard link is its own key. Any failure
    fails the whole call: ``ValueError`` for a bad path or member name, ``RuntimeError`` for
    links, non-regular members, an over-sized file or archive
    (:class:`~shellbox.errors.DownloadLimitExceeded` over ``max_files`` or ``max_bytes``).
    """
    if not isinstance(machine, Machine):
        raise TypeError(f"download_files needs a shellbox Machine, not {type(machine).__name__}")
    for name, value in (("max_files", max_files), ("max_bytes", max_bytes), ("max_file_bytes", max_file_bytes)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
    if timeout < 0:
        raise ValueError(f"timeout must be >= 0, not {timeout}")
    if isinstance(paths, str):
        raise ValueError("paths must be a sequence of paths, not a single string")
    machine._check_open()
    answer = await machine._server.call(
        "download_files",
        {
            "machine": machine._handle,
            "paths": list(paths),
            "limits": {
                "max_files": max_files,
                "max_bytes": max_bytes,
                "max_file_bytes": max_file_bytes,
                "timeout": float(timeout),
            },
        },
    )
    return {path: base64.b64decode(data) for path, data in answer["files"].items()}
