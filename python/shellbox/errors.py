"""Exceptions raised by shellbox, with the reference library's bases.

Every error the ``shellbox serve`` protocol reports (PROTOCOL.md) becomes one of these; each
carries the server's ``kind`` and ``details``. Malformed input is a :class:`ValueError`,
what a backend cannot provide an :class:`UnsupportedMachineSpec` (also a ``ValueError``),
and operational failures are :class:`RuntimeError` subclasses, as in the reference.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "DownloadLimitExceeded",
    "InfrastructureTimeout",
    "MachineClosed",
    "MachineTerminated",
    "SandboxUnavailable",
    "LimitReached",
    "ServerError",
    "ShellStateError",
    "TransferError",
    "UnsupportedMachineSpec",
]


class UnsupportedMachineSpec(ValueError):
    """The backend cannot provide what the spec, command or transfer asks for."""


class MachineClosed(RuntimeError):
    """The machine was closed; its message contains "closed", as the reference's."""


class TransferError(RuntimeError):
    """A transfer was refused or failed, or its source does not exist."""


class DownloadLimitExceeded(RuntimeError):
    """A bounded download went over its file or byte budget; nothing was returned."""


class MachineTerminated(RuntimeError):
    """The machine died or exhausted a budget (e.g. the simulator's CPU fuel); it is closed."""


class SandboxUnavailable(RuntimeError):
    """The local backend found no bubblewrap that can sandbox on this host."""


class InfrastructureTimeout(RuntimeError):
    """An infrastructure step (not a command: those time out in their Result) took too long."""


class BackendError(RuntimeError):
    """The engine, runtime or host failed (Docker Engine, bwrap, host I/O)."""


class ShellStateError(RuntimeError):
    """A shell session call that does not fit its state ("still running", nothing running)."""


class LimitReached(RuntimeError):
    """A factory's limit (e.g. of live machines) refused the request."""


class ServerError(RuntimeError):
    """The ``shellbox serve`` process failed or broke the protocol."""


_BY_KIND: dict[str, type[Exception]] = {
    "unsupported": UnsupportedMachineSpec,
    "invalid_input": ValueError,
    "closed": MachineClosed,
    "shell_state": ShellStateError,
    "limit_reached": LimitReached,
    "not_found": TransferError,
    "transfer": TransferError,
    "download_limit_exceeded": DownloadLimitExceeded,
    "terminated": MachineTerminated,
    "sandbox_unavailable": SandboxUnavailable,
    "timed_out": InfrastructureTimeout,
    "backend": BackendError,
    "io": BackendError,
}


def from_wire(error: dict[str, Any]) -> Exception:
    """The exception for a protocol error object ``{"kind", "message", "details"}``."""
    kind = str(error.get("kind", ""))
    cls = _BY_KIND.get(kind, ServerError)
    exception = cls(str(error.get("message", kind)))
    exception.kind = kind  # type: ignore[attr-defined]
    exception.details = error.get("details", {})  # type: ignore[attr-defined]
    return exception
