"""shellbox: fresh, isolated machines for agent harnesses, graders and RL rollouts.

The reference library's API (``shellbox.machine``, ``shellbox.image``, ``shellbox.transfer``,
``shellbox.backends.{local,docker,shellsim}.machine``) over the Rust ``shellbox`` binary,
which this package drives through ``shellbox serve --stdio`` (PROTOCOL.md).
"""

from .machine import (
    Backend,
    Command,
    DockerImage,
    ExitReason,
    HostImage,
    MachineSpec,
    Mount,
    NetworkPolicy,
    PackageSpec,
    Result,
    UnsupportedMachineSpec,
)

__all__ = [
    "Backend",
    "Command",
    "DockerImage",
    "ExitReason",
    "HostImage",
    "MachineSpec",
    "Mount",
    "NetworkPolicy",
    "PackageSpec",
    "Result",
    "UnsupportedMachineSpec",
]
