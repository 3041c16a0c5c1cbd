"""The machine contract: specs, commands, results, machines and factories.

The names, constructors, defaults and exception bases are the reference library's
(``marin-shellbox``'s ``shellbox.machine``); the work is done by the Rust backends behind
``shellbox serve`` (PROTOCOL.md). Where shellbox differs from the reference, the item says
so: a timed-out command keeps the output it wrote before the kill, and ``run_stream`` gives
the output as it is written.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Union

from ._server import Server
from .errors import MachineClosed, UnsupportedMachineSpec

if TYPE_CHECKING:
    from .image import DockerfileSource, RegistryImage

__all__ = [
    "DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES",
    "Backend",
    "Command",
    "CommandSemantics",
    "DockerImage",
    "ExecutionRequirements",
    "Exit",
    "ExitReason",
    "HostImage",
    "Machine",
    "MachineFactory",
    "MachineSpec",
    "Mount",
    "NetworkPolicy",
    "PackageSpec",
    "Result",
    "ShellSimBuiltins",
    "ShellSession",
    "ShellStatus",
    "ShellUpdate",
    "Stderr",
    "Stdout",
    "StreamEvent",
    "UnsupportedMachineSpec",
    "CAPABILITY_NAMES",
    "check_execution_requirements",
]

#: Default per-stream output limit of a command: 1 MiB.
DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES = 1024 * 1024


class NetworkPolicy(str, enum.Enum):
    """Whether commands may reach the network."""

    DENY = "deny"
    ALLOW = "allow"


class ExitReason(str, enum.Enum):
    """Why a command ended."""

    EXITED = "exited"
    TIMED_OUT = "timed_out"


class ShellStatus(str, enum.Enum):
    """State of a persistent shell after a call."""

    RUNNING = "running"
    COMPLETED = "completed"
    RESET = "reset"


class Backend(str, enum.Enum):
    """The reference's backend names; shellbox provides ``LOCAL``, ``DOCKER`` and ``SHELLSIM``."""

    DOCKER = "docker"
    GVISOR = "gvisor"
    QEMU = "qemu"
    SHELLSIM = "shellsim"
    DAYTONA = "daytona"
    LOCAL = "local"


class CommandSemantics(str, enum.Enum):
    """How a backend runs commands."""

    LINUX_PROCESS = "linux_process"
    SHELL_SIMULATOR = "shell_simulator"


@dataclass(frozen=True)
class ShellUpdate:
    """What a persistent shell call produced."""

    output: bytes
    status: ShellStatus
    exit_code: int | None = None
    truncated: bool = False


@dataclass(frozen=True)
class DockerImage:
    """An image already present in the Docker Engine (never pulled)."""

    reference: str


@dataclass(frozen=True)
class PackageSpec:
    """Software by name: ``pypi_packages=None`` is a shell only, ``()`` CPython only.

    ``tools`` must be executable on the machine's ``PATH``, else ``create`` raises
    :class:`UnsupportedMachineSpec` naming the missing ones. The local backend locks
    ``pypi_packages`` with hashes and installs them from wheels into a cached Python
    environment (the factory's ``package_cache``, ``python_version`` and
    ``python_interpreter``); the simulator takes tools it has and no Python; docker raises
    :class:`UnsupportedMachineSpec` pointing at ``DockerfileSource``.
    """

    pypi_packages: tuple[str, ...] | None = None
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShellSimBuiltins:
    """The simulator's own commands (the older reference's simulator source)."""


@dataclass(frozen=True)
class Mount:
    """A host file or directory shown read-only at the absolute guest path ``guest``."""

    host: Path
    guest: str


@dataclass(frozen=True)
class HostImage:
    """Host programs (local backend): read-only dirs, ``PATH`` dirs and mounts."""

    read_only: tuple[Path, ...] = ()
    bin_dirs: tuple[Path, ...] = ()
    mounts: tuple[Mount, ...] = ()


ImageSource = Union[
    HostImage, DockerImage, PackageSpec, ShellSimBuiltins, "RegistryImage", "DockerfileSource"
]


def _positive(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be > 0 when set, not {value}")


@dataclass(frozen=True)
class MachineSpec:
    """What machine to create. Immutable; ``cpus`` and ``storage_mb`` are checked here."""

    source: ImageSource
    workdir: str = "/workspace"
    env: Mapping[str, str] = field(default_factory=dict)
    network: NetworkPolicy = NetworkPolicy.DENY
    memory_mb: int | None = None
    cpus: int | None = None
    storage_mb: int | None = None
    gpus: int = 0
    startup_timeout: float | None = None

    def __post_init__(self) -> None:
        _positive("cpus", self.cpus)
        _positive("storage_mb", self.storage_mb)
        if self.gpus < 0:
            raise ValueError(f"gpus must be >= 0, not {self.gpus}")
        object.__setattr__(self, "env", dict(self.env))


@dataclass(frozen=True)
class Command:
    """One command: ``argv`` runs in ``cwd`` (default the spec's workdir) with ``env`` over the
    spec's, ``stdin`` written then closed, an optional ``timeout`` in seconds, and at most
    ``output_limit_bytes`` kept per stream."""

    argv: Sequence[str]
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    timeout: float | None = None
    output_limit_bytes: int = DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES
    user: str | None = None


@dataclass(frozen=True)
class Result:
    """The outcome of ``run``. Each stream holds at most the command's limit; its flag says
    whether more was written. A timed-out command has ``exit_code=None`` and keeps the output
    it wrote before the kill (the reference drops it)."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    reason: ExitReason


@dataclass(frozen=True)
class Stdout:
    """Bytes the command wrote to stdout (``run_stream``), within its output limit."""

    data: bytes


@dataclass(frozen=True)
class Stderr:
    """Bytes the command wrote to stderr (``run_stream``), within its output limit."""

    data: bytes


@dataclass(frozen=True)
class Exit:
    """The last event of ``run_stream``: how the command ended."""

    exit_code: int | None
    reason: ExitReason
    stdout_truncated: bool
    stderr_truncated: bool


StreamEvent = Union[Stdout, Stderr, Exit]


@dataclass(frozen=True)
class ExecutionRequirements:
    """What a task needs from a backend (``check_environment``)."""

    command_semantics: CommandSemantics | None = None
    capabilities: tuple[str, ...] = ()
    docker_image: str | None = None


#: The task capability names of the reference library, in its order.
CAPABILITY_NAMES = ("shell", "filesystem", "python", "process", "network", "git_repository")


def check_execution_requirements(
    requirements: ExecutionRequirements,
    spec: MachineSpec,
    semantics: CommandSemantics,
    capabilities: Iterable[str],
    docker_image: str | None = None,
) -> None:
    """The reference's rules, in its order, for a backend with these ``semantics``,
    ``capabilities`` and the image reference it would run (``docker_image``): the semantics
    must match; every requested capability must be offered (the missing ones are named,
    sorted, comma-separated); ``network`` needs ``NetworkPolicy.ALLOW``; a requested
    ``docker_image`` must be the one the backend runs. Raises :class:`UnsupportedMachineSpec`,
    or :class:`ValueError` first for a capability name no backend has (the server's
    ``invalid_input``)."""
    unknown = sorted({c for c in requirements.capabilities if c not in CAPABILITY_NAMES})
    if unknown:
        raise ValueError(
            f"unknown capability names: {', '.join(unknown)} (the names are {', '.join(CAPABILITY_NAMES)})"
        )
    wanted = requirements.command_semantics
    if wanted is not None and CommandSemantics(wanted) != semantics:
        raise UnsupportedMachineSpec(
            f"the task needs {CommandSemantics(wanted).value} command semantics; "
            f"this backend has {semantics.value}"
        )
    offered = set(capabilities)
    missing = sorted({c for c in requirements.capabilities if c not in offered})
    if missing:
        raise UnsupportedMachineSpec(f"unsupported capabilities: {', '.join(missing)}")
    if "network" in requirements.capabilities and NetworkPolicy(spec.network) == NetworkPolicy.DENY:
        raise UnsupportedMachineSpec("the task needs network but the spec's network policy is deny")
    if requirements.docker_image is not None and requirements.docker_image != docker_image:
        raise UnsupportedMachineSpec(
            f"the task needs docker image {requirements.docker_image}; "
            f"this backend would run {docker_image or 'no docker image'}"
        )


# ---- wire forms (PROTOCOL.md) ----


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _seconds(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a finite, non-negative number of seconds, not {value!r}")
    return seconds


def _absolute(path: Path | str) -> str:
    return str(Path(path).absolute())


def _source_to_wire(source: object, backend: Backend) -> dict[str, Any]:
    from .image import DockerfileSource, RegistryImage

    if isinstance(source, HostImage):
        return {
            "kind": "host",
            "read_only": [_absolute(p) for p in source.read_only],
            "bin_dirs": [_absolute(p) for p in source.bin_dirs],
            "mounts": [{"host": _absolute(m.host), "guest": m.guest} for m in source.mounts],
        }
    if isinstance(source, DockerImage):
        return {"kind": "docker", "reference": source.reference}
    if isinstance(source, RegistryImage):
        if not source.reference.strip() or "://" in source.reference:
            raise ValueError(f"invalid registry image reference {source.reference!r}")
        return {"kind": "registry", "reference": source.reference}
    if isinstance(source, DockerfileSource):
        return {
            "kind": "dockerfile",
            "context": _absolute(source.context),
            "dockerfile": _absolute(source.dockerfile),
        }
    if isinstance(source, ShellSimBuiltins):
        return {"kind": "sim"}
    if isinstance(source, PackageSpec):
        for name, values in (("pypi_packages", source.pypi_packages or ()), ("tools", source.tools)):
            if isinstance(values, str) or not all(isinstance(v, str) for v in values):
                raise TypeError(f"PackageSpec.{name} must be a sequence of strings, not {values!r}")
        return {
            "kind": "packages",
            "pypi_packages": None if source.pypi_packages is None else list(source.pypi_packages),
            "tools": list(source.tools),
        }
    raise UnsupportedMachineSpec(f"shellbox cannot run image source {type(source).__name__}")


def _spec_to_wire(spec: MachineSpec, backend: Backend) -> dict[str, Any]:
    if not isinstance(spec, MachineSpec):
        raise TypeError(f"expected a MachineSpec, not {type(spec).__name__}")
    return {
        "source": _source_to_wire(spec.source, backend),
        "workdir": spec.workdir,
        "env": dict(spec.env),
        "network": NetworkPolicy(spec.network).value,
        "memory_mb": spec.memory_mb,
        "cpus": spec.cpus,
        "storage_mb": spec.storage_mb,
        "gpus": spec.gpus,
        "startup_timeout": _seconds("startup_timeout", spec.startup_timeout),
    }


def _command_to_wire(command: Command) -> dict[str, Any]:
    if not isinstance(command, Command):
        raise TypeError(f"expected a Command, not {type(command).__name__}")
    if isinstance(command.argv, (str, bytes)):
        raise ValueError("argv must be a sequence of strings, not a single string")
    argv = list(command.argv)
    if not argv:
        raise ValueError("argv must not be empty")
    if command.output_limit_bytes < 0:
        raise ValueError(f"output_limit_bytes must be >= 0, not {command.output_limit_bytes}")
    wire: dict[str, Any] = {"argv": argv}
    if command.cwd is not None:
        wire["cwd"] = command.cwd
    if command.env:
        wire["env"] = dict(command.env)
    if command.stdin:
        wire["stdin"] = _b64(bytes(command.stdin))
    if command.timeout is not None:
        wire["timeout"] = _seconds("timeout", command.timeout)
    if command.output_limit_bytes != DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES:
        wire["output_limit_bytes"] = command.output_limit_bytes
    if command.user is not None:
        wire["user"] = command.user
    return wire


def _result_from_wire(wire: dict[str, Any]) -> Result:
    return Result(
        wire["exit_code"],
        _unb64(wire["stdout"]),
        _unb64(wire["stderr"]),
        wire["stdout_truncated"],
        wire["stderr_truncated"],
        ExitReason(wire["reason"]),
    )


# ---- machines and factories ----


class Machine:
    """A fresh, isolated, writable place to run commands; files persist until ``close``.

    Methods are coroutines and may run concurrently (many commands on one machine at once).
    ``async with`` closes the machine on exit. Cancelling a task that awaits ``run`` kills
    the command and every process it started, then re-raises the cancellation.
    """

    backend: ClassVar[Backend]

    def __init__(self, server: Server, handle: int, spec: MachineSpec) -> None:
        self._server = server
        self._handle = handle
        self._closed = False
        self._shell: ShellSession | None = None
        self.spec = spec

    def _check_open(self) -> None:
        if self._closed:
            raise MachineClosed("Machine is closed")

    async def run(self, command: Command) -> Result:
        """Runs ``command`` to completion; a failure, kill or timeout is a ``Result``.

        Raises ``ValueError`` for malformed commands, :class:`UnsupportedMachineSpec` for what
        the backend cannot do (e.g. an unknown user), ``RuntimeError`` when closed."""
        wire = _command_to_wire(command)
        self._check_open()
        result = await self._server.call("run", {"machine": self._handle, "command": wire})
        return _result_from_wire(result)

    async def run_stream(self, command: Command) -> AsyncIterator[StreamEvent]:
        """Runs ``command`` and yields :class:`Stdout` and :class:`Stderr` chunks as it writes
        them (within its output limit), then one :class:`Exit`. Leaving the loop early kills
        the command."""
        wire = _command_to_wire(command)
        self._check_open()
        request_id, queue = self._server.stream(
            "run_stream", {"machine": self._handle, "command": wire}
        )
        finished = False
        try:
            while True:
                message = await queue.get()
                event = message.get("event")
                if event is not None:
                    if "stdout" in event:
                        yield Stdout(_unb64(event["stdout"]))
                    else:
                        yield Stderr(_unb64(event["stderr"]))
                    continue
                finished = True
                from ._server import _result

                status = _result(message)
                yield Exit(
                    status["exit_code"],
                    ExitReason(status["reason"]),
                    status["stdout_truncated"],
                    status["stderr_truncated"],
                )
                return
        finally:
            if not finished:
                self._server.cancel(request_id)

    async def upload(self, source: Path, target: str) -> None:
        """Copies the host file or directory ``source`` into the machine at ``target``
        (a directory's contents are merged into ``target``)."""
        self._check_open()
        await self._server.call(
            "upload", {"machine": self._handle, "source": _absolute(source), "target": target}
        )

    async def download(self, source: str, target: Path, max_bytes: int | None = None) -> None:
        """Copies the machine path ``source`` to the host path ``target``. A missing source
        raises ``RuntimeError`` ("No such file or directory").

        With ``max_bytes`` (the reference's bounded single-file download), ``source`` must be
        one regular file of at most ``max_bytes`` bytes: it streams in chunks into a staging
        directory ``.shellbox-download-*`` beside ``target`` and is renamed over it, so
        memory stays bounded and, on any failure or cancellation, ``target`` keeps its old
        content and no staging directory is left. Raises ``ValueError`` for a negative
        ``max_bytes``; :class:`~shellbox.errors.UnsupportedMachineSpec` (its message says
        "regular file") for a directory, fifo or device;
        :class:`~shellbox.errors.DownloadLimitExceeded` for a larger file."""
        self._check_open()
        if max_bytes is None:
            await self._server.call(
                "download", {"machine": self._handle, "source": source, "target": _absolute(target)}
            )
            return
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
            raise TypeError(f"max_bytes must be an int, not {type(max_bytes).__name__}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
        await self._server.call(
            "download_file",
            {
                "machine": self._handle,
                "source": source,
                "target": _absolute(target),
                "max_bytes": max_bytes,
            },
        )

    async def open_shell(self) -> ShellSession:
        """The machine's persistent shell (one per machine: every call returns the same
        session). Raises :class:`UnsupportedMachineSpec` when the backend offers none."""
        self._check_open()
        if self._shell is None:
            answer = await self._server.call("open_shell", {"machine": self._handle})
            if self._shell is None:
                self._shell = ShellSession(self, bool(answer["interactive"]))
        return self._shell

    async def snapshot(self) -> Snapshot:
        """The machine's files at this moment (contents, modes, links, mtimes; processes and
        shells are not part of it), for :meth:`MachineFactory.create_from`. Raises
        :class:`UnsupportedMachineSpec` where the backend takes no snapshots."""
        self._check_open()
        answer = await self._server.call("snapshot", {"machine": self._handle})
        return Snapshot(self._server, answer["snapshot"], self.backend)

    async def close(self) -> None:
        """Releases everything the machine holds. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._server.call("close", {"machine": self._handle})

    async def __aenter__(self) -> Machine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.close())


class Snapshot:
    """A machine's files at one moment (:meth:`Machine.snapshot`). It outlives its machine;
    :meth:`delete` releases it now (machines made from it keep working), and it is released
    when its factory's server ends."""

    def __init__(self, server: Server, handle: int, backend: Backend) -> None:
        self._server = server
        self._handle = handle
        self.backend = backend

    async def delete(self) -> None:
        """Releases the snapshot. Idempotent; :meth:`MachineFactory.create_from` with it then
        raises :class:`MachineClosed`."""
        await self._server.call("delete_snapshot", {"snapshot": self._handle})


class ShellSession:
    """One persistent shell of a machine: its cwd, variables, functions and (interactive)
    background jobs outlive each call. ``interactive`` sessions (a shell on a terminal) may
    answer ``RUNNING`` and are followed with :meth:`read`, fed with :meth:`write` and stopped
    with :meth:`interrupt`; the others run each command to completion."""

    def __init__(self, machine: Machine, interactive: bool) -> None:
        self._machine = machine
        self.interactive = interactive

    async def _update(self, method: str, params: dict[str, Any]) -> ShellUpdate:
        self._machine._check_open()
        answer = await self._machine._server.call(method, {"machine": self._machine._handle, **params})
        return ShellUpdate(
            _unb64(answer["output"]), ShellStatus(answer["status"]), answer["exit_code"], answer["truncated"]
        )

    async def execute(
        self, command: str, *, wait: float = 120, output_limit_bytes: int = DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES
    ) -> ShellUpdate:
        """Starts ``command`` and gathers its output for up to ``wait`` seconds. Raises
        ``RuntimeError`` ("still running") while a previous command runs."""
        return await self._update(
            "execute",
            {"command": command, "wait": _seconds("wait", wait), "output_limit_bytes": output_limit_bytes},
        )

    async def read(
        self, *, wait: float = 0, output_limit_bytes: int = DEFAULT_MACHINE_OUTPUT_LIMIT_BYTES
    ) -> ShellUpdate:
        """Gathers the running command's output until it completes, the shell exits, or
        ``wait`` seconds pass."""
        return await self._update(
            "read", {"wait": _seconds("wait", wait), "output_limit_bytes": output_limit_bytes}
        )

    async def write(self, data: bytes) -> None:
        """Sends raw bytes to the running command's terminal input."""
        self._machine._check_open()
        await self._machine._server.call("write", {"machine": self._machine._handle, "data": _b64(bytes(data))})

    async def interrupt(self) -> None:
        """Delivers SIGINT to the running command (a following read reports exit code 130)."""
        self._machine._check_open()
        await self._machine._server.call("interrupt", {"machine": self._machine._handle})

    async def close(self) -> None:
        """Ends the shell and everything it started. Idempotent."""
        if self._machine._closed:
            return
        await self._machine._server.call("close_shell", {"machine": self._machine._handle})


class MachineFactory:
    """Creates machines of one backend through one ``shellbox serve`` process, which all its
    machines and their commands share. The server starts with the factory (so start-up
    problems, such as :class:`SandboxUnavailable`, are raised by the constructor) and ends
    when the factory and its machines are gone, or on :meth:`shutdown`."""

    backend: ClassVar[Backend]
    machine_class: ClassVar[type[Machine]] = Machine

    def __init__(self, options: dict[str, Any], executable: str | None = None) -> None:
        self._server = Server(executable)
        try:
            answer = self._server.call_sync("factory", options)
        except BaseException:
            self._server.close()
            raise
        self._handle: int = answer["factory"]

    @property
    def server_pid(self) -> int:
        """The process id of this factory's ``shellbox serve``."""
        return self._server.pid

    async def create(self, spec: MachineSpec) -> Machine:
        """A fresh machine with an empty private writable filesystem and its workdir."""
        wire = _spec_to_wire(spec, self.backend)
        answer = await self._server.call("create", {"factory": self._handle, "spec": wire})
        return self.machine_class(self._server, answer["machine"], spec)

    async def create_from(self, snapshot: Snapshot, spec: MachineSpec) -> Machine:
        """A new machine whose files start as ``snapshot``'s; the spec's env, network and
        limits apply as for :meth:`create`. A snapshot of another factory's server or backend
        raises :class:`UnsupportedMachineSpec`."""
        if snapshot._server is not self._server:
            raise UnsupportedMachineSpec("the snapshot belongs to another factory's server")
        wire = _spec_to_wire(spec, self.backend)
        answer = await self._server.call(
            "create_from", {"factory": self._handle, "snapshot": snapshot._handle, "spec": wire}
        )
        return self.machine_class(self._server, answer["machine"], spec)

    async def fork(self, machine: Machine, spec: MachineSpec) -> Machine:
        """:meth:`Machine.snapshot` then :meth:`create_from`, the snapshot released at once."""
        if machine._server is not self._server:
            raise UnsupportedMachineSpec("the machine belongs to another factory's server")
        machine._check_open()
        wire = _spec_to_wire(spec, self.backend)
        answer = await self._server.call(
            "fork", {"factory": self._handle, "machine": machine._handle, "spec": wire}
        )
        return self.machine_class(self._server, answer["machine"], spec)

    async def check_environment(self, requirements: ExecutionRequirements, spec: MachineSpec) -> None:
        """Checks, without acquiring anything, whether this backend could run a task with these
        requirements in a machine of this spec; raises :class:`UnsupportedMachineSpec` naming
        the rule that failed, or what ``create`` would raise for the spec before acquiring
        anything. Promises nothing about what only acquiring tells (a pull, a build, PyPI
        packages, capacity)."""
        wire = _spec_to_wire(spec, self.backend)
        semantics = requirements.command_semantics
        await self._server.call(
            "check_environment",
            {
                "factory": self._handle,
                "spec": wire,
                "requirements": {
                    "command_semantics": None if semantics is None else CommandSemantics(semantics).value,
                    "capabilities": list(requirements.capabilities),
                    "docker_image": requirements.docker_image,
                },
            },
        )

    def shutdown(self) -> None:
        """Ends this factory's server now: every machine it created is closed."""
        self._server.close()
