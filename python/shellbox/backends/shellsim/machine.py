"""The simulator backend: an in-memory, deterministic Bash-like shell (shellbox's ``sim``)."""

from __future__ import annotations

from typing import Any, ClassVar

from ...machine import Backend, Machine, MachineFactory

__all__ = ["ShellSimMachine", "ShellSimMachineFactory"]


class ShellSimMachine(Machine):
    """A simulated machine: a virtual filesystem and shell, no host process or file."""

    backend: ClassVar[Backend] = Backend.SHELLSIM


class ShellSimMachineFactory(MachineFactory):
    """Creates simulated machines. Budgets default to the simulator's own (CPU fuel
    10,000,000,000 units, disk 512 MiB, output 128 MiB, memory from ``memory_mb`` or 2 GiB);
    exhausting one terminates the machine (``RuntimeError``). Specs take ``PackageSpec()`` or
    ``ShellSimBuiltins()``; ``cpus``, ``gpus`` and network ``allow`` raise
    ``UnsupportedMachineSpec``."""

    backend: ClassVar[Backend] = Backend.SHELLSIM
    machine_class: ClassVar[type[Machine]] = ShellSimMachine

    def __init__(
        self,
        *,
        cpu_fuel: int | None = None,
        disk_bytes: int | None = None,
        output_bytes: int | None = None,
        memory_bytes: int | None = None,
        executable: str | None = None,
    ) -> None:
        options: dict[str, Any] = {"backend": "sim"}
        for name, value in (
            ("cpu_fuel", cpu_fuel),
            ("disk_bytes", disk_bytes),
            ("output_bytes", output_bytes),
            ("memory_bytes", memory_bytes),
        ):
            if value is not None:
                if value < 0:
                    raise ValueError(f"{name} must be >= 0, not {value}")
                options[name] = value
        super().__init__(options, executable)
