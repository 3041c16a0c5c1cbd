"""The machine contract through the Python package, on sim, local and docker."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from conftest import BUSYBOX_IMAGE, skip, factory_for, spec_for
from shellbox.errors import BackendError, DownloadLimitExceeded, MachineClosed, TransferError
from shellbox.machine import (
    Command,
    HostImage,
    ExitReason,
    Exit,
    Machine,
    MachineFactory,
    MachineSpec,
    Result,
    Stderr,
    Stdout,
    UnsupportedMachineSpec,
)
from shellbox.transfer import download_files


async def new_machine(factory: MachineFactory, backend: str, **fields: Any) -> Machine:
    try:
        return await factory.create(spec_for(backend, **fields))
    except BackendError as error:
        if backend == "docker" and "no such image" in str(error).lower():
            skip(f"the docker test image {BUSYBOX_IMAGE} is missing (the shellbox-docker tests import it): {error}")
        raise


def sh(script: str, **fields: Any) -> Command:
    return Command(("sh", "-c", script), **fields)


def hang(backend: str) -> str:
    """A command that writes `started` and then runs until killed."""
    return "echo started; while :; do :; done" if backend == "sim" else "echo started; sleep 30"


def test_exit_codes_and_missing_programs(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> list[Result]:
        async with await new_machine(factory, backend) as machine:
            return [
                await machine.run(Command(("true",))),
                await machine.run(sh("echo out; echo err >&2; exit 3")),
                await machine.run(Command(("no-such-program-xyz",))),
            ]

    ok, three, missing = asyncio.run(scenario())
    assert (ok.exit_code, ok.reason) == (0, ExitReason.EXITED)
    assert (three.exit_code, three.stdout, three.stderr) == (3, b"out\n", b"err\n")
    assert three.reason is ExitReason.EXITED
    assert missing.exit_code == 127 and missing.reason is ExitReason.EXITED


def test_stdin_is_written_then_closed(backend: str) -> None:
    factory = factory_for(backend)
    data = bytes(range(256)) * 64

    async def scenario() -> tuple[Result, Result]:
        async with await new_machine(factory, backend) as machine:
            return (
                await machine.run(Command(("cat",), stdin=data)),
                await machine.run(sh("exit 0", stdin=b"never read")),
            )

    echoed, unread = asyncio.run(scenario())
    assert echoed.stdout == data and echoed.exit_code == 0
    assert unread.exit_code == 0


def test_cwd_and_env_precedence(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> tuple[Result, Result]:
        async with await new_machine(
            factory, backend, workdir="/app", env={"A": "spec", "B": "spec"}
        ) as machine:
            default = await machine.run(sh('pwd; echo "$A $B"'))
            own = await machine.run(sh('pwd; echo "$A $B"', cwd="/tmp", env={"B": "command"}))
            return default, own

    default, own = asyncio.run(scenario())
    assert default.stdout == b"/app\nspec spec\n", default
    assert own.stdout == b"/tmp\nspec command\n", own


def test_output_limits_and_truncation_flags(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> list[Result]:
        async with await new_machine(factory, backend) as machine:
            return [
                await machine.run(sh("printf 123456; printf abcdef >&2", output_limit_bytes=4)),
                await machine.run(sh("printf 1234", output_limit_bytes=4)),
                await machine.run(sh("printf x", output_limit_bytes=0)),
                await machine.run(sh("true", output_limit_bytes=0)),
            ]

    cut, exact, zero, nothing = asyncio.run(scenario())
    assert (cut.stdout, cut.stdout_truncated, cut.stderr, cut.stderr_truncated) == (b"1234", True, b"abcd", True)
    assert (exact.stdout, exact.stdout_truncated) == (b"1234", False)
    assert (zero.stdout, zero.stdout_truncated) == (b"", True)
    assert (nothing.stdout, nothing.stdout_truncated, nothing.stderr_truncated) == (b"", False, False)


def test_a_timeout_keeps_partial_output_and_the_machine(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> tuple[Result, Result]:
        async with await new_machine(factory, backend) as machine:
            timed_out = await machine.run(sh("echo kept > file; " + hang(backend), timeout=1.0))
            after = await machine.run(sh("cat file"))
            return timed_out, after

    timed_out, after = asyncio.run(scenario())
    assert timed_out.reason is ExitReason.TIMED_OUT
    assert timed_out.exit_code is None
    assert timed_out.stdout == b"started\n"
    assert after.stdout == b"kept\n"


def test_run_stream_yields_output_then_exit(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> list[Any]:
        async with await new_machine(factory, backend) as machine:
            return [event async for event in machine.run_stream(sh("echo a; echo b >&2; echo c; exit 4"))]

    events = asyncio.run(scenario())
    stdout = b"".join(e.data for e in events if isinstance(e, Stdout))
    stderr = b"".join(e.data for e in events if isinstance(e, Stderr))
    assert (stdout, stderr) == (b"a\nc\n", b"b\n")
    assert events[-1] == Exit(4, ExitReason.EXITED, False, False)
    assert sum(isinstance(e, Exit) for e in events) == 1


def test_upload_and_download_round_trip(backend: str, tmp_path: Path) -> None:
    factory = factory_for(backend)
    source = tmp_path / "source"
    (source / "nested").mkdir(parents=True)
    (source / "top.txt").write_bytes(b"top\x00\xff")
    (source / "nested" / "inner.sh").write_text("echo inner\n")
    (source / "nested" / "inner.sh").chmod(0o755)
    source.chmod(0o750)
    single = tmp_path / "single.txt"
    single.write_text("single")
    back = tmp_path / "back"
    back.mkdir()

    async def scenario() -> Result:
        async with await new_machine(factory, backend) as machine:
            await machine.upload(source, "/workspace/project")
            await machine.upload(single, "/workspace/deep/er/single.txt")
            listing = await machine.run(sh("cat /workspace/deep/er/single.txt; sh project/nested/inner.sh"))
            await machine.download("/workspace/project", back)
            await machine.download("/workspace/deep/er/single.txt", tmp_path / "out" / "single.txt")
            with pytest.raises(RuntimeError, match="No such file"):
                await machine.download("/workspace/missing", tmp_path / "missing")
            with pytest.raises(RuntimeError):
                await machine.upload(tmp_path / "absent", "/workspace/absent")
            return listing

    listing = asyncio.run(scenario())
    assert listing.stdout == b"singleinner\n", listing
    assert (back / "top.txt").read_bytes() == b"top\x00\xff"
    assert (back / "nested" / "inner.sh").read_text() == "echo inner\n"
    assert stat.S_IMODE((back / "nested" / "inner.sh").stat().st_mode) == 0o755
    assert (tmp_path / "out" / "single.txt").read_text() == "single"


def test_a_closed_machine_refuses_everything(backend: str, tmp_path: Path) -> None:
    factory = factory_for(backend)

    async def scenario() -> None:
        machine = await new_machine(factory, backend)
        await machine.close()
        await machine.close()  # idempotent
        for call in (
            machine.run(Command(("true",))),
            machine.upload(tmp_path, "/workspace/x"),
            machine.download("/workspace", tmp_path / "x"),
        ):
            with pytest.raises(RuntimeError, match="closed") as caught:
                await call
            assert isinstance(caught.value, MachineClosed)

    asyncio.run(scenario())


def test_download_files_budgets(backend: str, tmp_path: Path) -> None:
    factory = factory_for(backend)

    async def scenario() -> None:
        async with await new_machine(factory, backend) as machine:
            await machine.run(sh("mkdir -p /workspace/d/sub; printf abc > /workspace/d/a; printf 12345 > /workspace/d/sub/b"))
            files = await download_files(machine, ("/workspace/d", "/workspace/missing"))
            assert files == {"/workspace/d/a": b"abc", "/workspace/d/sub/b": b"12345"}
            one = await download_files(machine, ("/workspace/d/a",), max_files=1)
            assert one == {"/workspace/d/a": b"abc"}
            with pytest.raises(DownloadLimitExceeded):
                await download_files(machine, ("/workspace/d",), max_bytes=7)
            with pytest.raises(RuntimeError):
                await download_files(machine, ("/workspace/d",), max_files=1)
            with pytest.raises(RuntimeError):
                await download_files(machine, ("/workspace/d",), max_file_bytes=4)
            with pytest.raises(ValueError):
                await download_files(machine, ("relative",))
            with pytest.raises(ValueError):
                await download_files(machine, ("/workspace/d",), max_bytes=-1)

    asyncio.run(scenario())


def test_typed_errors(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> None:
        async with await new_machine(factory, backend) as machine:
            with pytest.raises(ValueError):
                await machine.run(Command(()))
            with pytest.raises(ValueError):
                await machine.run(Command(("true",), output_limit_bytes=-1))
            with pytest.raises(ValueError):
                await machine.run(Command(("true",), cwd="relative"))
            with pytest.raises(ValueError):
                await machine.run(Command(("true",), env={"1BAD": "x"}))
            with pytest.raises(ValueError):
                await machine.run(Command(("true",), timeout=-1))
            with pytest.raises(UnsupportedMachineSpec):
                await machine.run(Command(("true",), user="no-such-user-xyz"))
            # The machine is still fine.
            assert (await machine.run(Command(("true",)))).exit_code == 0

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        spec_for(backend, cpus=0)
    with pytest.raises(ValueError):
        spec_for(backend, storage_mb=-1)


def test_unsupported_specs_name_what_is_missing() -> None:
    from shellbox.machine import DockerImage, HostImage, PackageSpec

    sim = factory_for("sim")

    async def scenario() -> None:
        with pytest.raises(UnsupportedMachineSpec):
            await sim.create(MachineSpec(HostImage()))
        with pytest.raises(UnsupportedMachineSpec):
            await sim.create(MachineSpec(DockerImage("busybox")))
        with pytest.raises(UnsupportedMachineSpec, match="no program git"):
            await sim.create(MachineSpec(PackageSpec(tools=("git",))))
        with pytest.raises(UnsupportedMachineSpec, match="pypi_packages"):
            await sim.create(MachineSpec(PackageSpec(pypi_packages=())))
        with pytest.raises(UnsupportedMachineSpec):
            await sim.create(MachineSpec(PackageSpec(), cpus=2))

    asyncio.run(scenario())


def test_check_environment() -> None:
    from shellbox.machine import CommandSemantics, ExecutionRequirements, NetworkPolicy, check_execution_requirements

    sim = factory_for("sim")
    spec = spec_for("sim")

    async def scenario() -> None:
        await sim.check_environment(ExecutionRequirements(CommandSemantics.SHELL_SIMULATOR, ("shell",)), spec)
        with pytest.raises(UnsupportedMachineSpec, match="git_repository, process"):
            await sim.check_environment(ExecutionRequirements(None, ("shell", "process", "git_repository")), spec)
        with pytest.raises(UnsupportedMachineSpec):
            await sim.check_environment(ExecutionRequirements(CommandSemantics.LINUX_PROCESS), spec)

    asyncio.run(scenario())
    linux = CommandSemantics.LINUX_PROCESS
    caps = ("shell", "filesystem", "python", "process", "network", "git_repository")
    check_execution_requirements(ExecutionRequirements(linux, ("shell",)), spec, linux, caps)
    with pytest.raises(UnsupportedMachineSpec, match="network"):
        check_execution_requirements(ExecutionRequirements(None, ("network",)), spec, linux, caps)
    allow = MachineSpec(spec.source, network=NetworkPolicy.ALLOW)
    check_execution_requirements(ExecutionRequirements(None, ("network",)), allow, linux, caps)
    with pytest.raises(UnsupportedMachineSpec, match="docker image"):
        check_execution_requirements(ExecutionRequirements(docker_image="img"), spec, linux, caps, "other")
    # An unknown name is malformed input (ValueError, not UnsupportedMachineSpec), before any rule.
    with pytest.raises(ValueError, match="names: bogus, zeta") as refused:
        check_execution_requirements(ExecutionRequirements(linux, ("zeta", "shell", "bogus")), spec, linux, caps)
    assert not isinstance(refused.value, UnsupportedMachineSpec)


def test_cancelling_the_awaiting_task_kills_the_command(backend: str, tmp_path: Path) -> None:
    factory = factory_for(backend)
    needle = "sleep 741.5"

    async def scenario() -> Result:
        async with await new_machine(factory, backend) as machine:
            script = "echo up > marker; " + ("while :; do :; done" if backend == "sim" else needle)
            task = asyncio.create_task(machine.run(sh(script)))
            if backend == "sim":
                # The simulator runs one command of a machine at a time: nothing to probe with.
                await asyncio.sleep(0.5)
            else:
                deadline = asyncio.get_running_loop().time() + 10
                while (await machine.run(sh("cat marker 2>/dev/null"))).stdout != b"up\n":
                    assert asyncio.get_running_loop().time() < deadline, "the command did not start"
                    await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            if backend == "local":
                await wait_until_gone(needle)
            if backend == "docker":
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    probe = await machine.run(sh("ps -o args | grep -c '^sleep 741'"))
                    if probe.stdout.strip() == b"0":
                        break
                    assert asyncio.get_running_loop().time() < deadline, "the command survived its cancellation"
                    await asyncio.sleep(0.1)
            if backend != "sim":
                # A run_stream left early is cancelled too. (The simulator yields a command's
                # output when it ends, so there is no early event to leave at.)
                stream = machine.run_stream(sh("echo first; " + needle))
                async for event in stream:
                    assert event == Stdout(b"first\n")
                    break
                await stream.aclose()  # type: ignore[attr-defined]
                if backend == "local":
                    await wait_until_gone(needle)
            return await machine.run(sh("echo still here"))

    assert asyncio.run(scenario()).stdout == b"still here\n"


def test_fifty_concurrent_commands_across_ten_machines(backend: str) -> None:
    factory = factory_for(backend)

    async def scenario() -> list[Result]:
        machines = await asyncio.gather(*(new_machine(factory, backend) for _ in range(10)))
        try:
            commands = [
                machines[i % 10].run(sh(f"echo {i}; echo {i} > /tmp/n{i}; cat /tmp/n{i} >&2"))
                for i in range(50)
            ]
            return await asyncio.gather(*commands)
        finally:
            await asyncio.gather(*(m.close() for m in machines))

    results = asyncio.run(scenario())
    for i, result in enumerate(results):
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"{i}\n".encode(), f"{i}\n".encode())


def test_machines_work_from_several_event_loops() -> None:
    factory = factory_for("sim")
    machine = asyncio.run(factory.create(spec_for("sim")))
    first = asyncio.run(machine.run(sh("echo one > f; cat f")))
    second = asyncio.run(machine.run(sh("cat f")))
    asyncio.run(machine.close())
    assert first.stdout == second.stdout == b"one\n"


async def wait_until_gone(needle: str) -> None:
    """Waits (up to 10 s) until no host process mentions `needle`."""
    deadline = asyncio.get_running_loop().time() + 10
    while host_processes(needle):
        assert asyncio.get_running_loop().time() < deadline, host_processes(needle)
        await asyncio.sleep(0.05)


def host_processes(needle: str) -> list[str]:
    """Host processes whose command line contains `needle`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def test_shell_sessions(backend: str) -> None:
    """A backend with sessions keeps shell state across calls, takes input and interrupts;
    one without raises UnsupportedMachineSpec naming them."""
    from shellbox.machine import ShellStatus

    factory = factory_for(backend)

    async def scenario() -> None:
        async with await new_machine(factory, backend) as machine:
            try:
                shell = await machine.open_shell()
            except UnsupportedMachineSpec as error:
                assert "shell" in str(error)
                return
            assert await machine.open_shell() is shell
            first = await shell.execute("cd /tmp; export ANSWER=hello; answer() { echo \"$ANSWER\"; }")
            assert (first.status, first.exit_code) == (ShellStatus.COMPLETED, 0), first
            second = await shell.execute("pwd; answer")
            assert second.output.replace(b"\r", b"") == b"/tmp\nhello\n", second
            # run never sees the session's state.
            assert (await machine.run(sh("pwd"))).stdout == b"/workspace\n"
            if shell.interactive:
                running = await shell.execute("read -r value; printf 'read=%s' \"$value\"", wait=0.3)
                assert running.status is ShellStatus.RUNNING
                await shell.write(b"input\n")
                done = await shell.read(wait=10)
                assert b"read=input" in done.output and done.exit_code == 0, done
                sleeping = await shell.execute("sleep 30", wait=0.3)
                assert sleeping.status is ShellStatus.RUNNING
                await shell.interrupt()
                stopped = await shell.read(wait=10)
                assert (stopped.status, stopped.exit_code) == (ShellStatus.COMPLETED, 130), stopped
                with pytest.raises(RuntimeError):
                    await shell.read()
            await shell.close()

    asyncio.run(scenario())


def test_a_lone_surrogate_is_refused_before_it_is_sent(backend: str) -> None:
    """A string the protocol cannot carry (a lone surrogate, e.g. from `os.fsdecode` of a
    non-UTF-8 name) is a ValueError at once, never a request left without an answer."""
    factory = factory_for(backend)

    async def scenario() -> bytes:
        async with await new_machine(factory, backend) as machine:
            for command in (Command(("echo", "\udcff")), Command(("true",), env={"A": "\udcff"})):
                with pytest.raises(ValueError, match="not valid UTF-8"):
                    await asyncio.wait_for(machine.run(command), 10)
            return (await machine.run(Command(("echo", "still", "works")))).stdout

    assert asyncio.run(scenario()) == b"still works\n"


def test_bounded_single_file_download(backend: str, tmp_path: Path) -> None:
    factory = factory_for(backend)
    target = tmp_path / "out.bin"

    async def scenario() -> None:
        async with await new_machine(factory, backend) as machine:
            await machine.run(sh("mkdir -p /workspace/dir; printf 0123456789 > /workspace/ten"))
            await machine.download("/workspace/ten", target, max_bytes=10)
            assert target.read_bytes() == b"0123456789"
            target.write_bytes(b"old")
            with pytest.raises(DownloadLimitExceeded):
                await machine.download("/workspace/ten", target, max_bytes=9)
            with pytest.raises(UnsupportedMachineSpec, match="regular file"):
                await machine.download("/workspace/dir", target, max_bytes=100)
            with pytest.raises(ValueError):
                await machine.download("/workspace/ten", target, max_bytes=-1)
            assert target.read_bytes() == b"old"
            assert [p.name for p in tmp_path.iterdir()] == ["out.bin"], "no staging directory is left"

    asyncio.run(scenario())


def test_package_specs_reach_the_backend(backend: str) -> None:
    """``PackageSpec`` tools are checked by the backend (``create`` and ``check_environment``
    alike): present ones run, missing ones are named; docker points at DockerfileSource."""
    from shellbox.machine import ExecutionRequirements, PackageSpec

    factory = factory_for(backend)
    present = MachineSpec(PackageSpec(tools=("sh",)))
    missing = MachineSpec(PackageSpec(tools=("sh", "shellbox-no-such-tool")))

    async def scenario() -> None:
        if backend == "docker":
            for spec in (present, MachineSpec(PackageSpec())):
                with pytest.raises(UnsupportedMachineSpec, match="Dockerfile"):
                    await factory.check_environment(ExecutionRequirements(), spec)
                with pytest.raises(UnsupportedMachineSpec, match="Dockerfile"):
                    await factory.create(spec)
            return
        await factory.check_environment(ExecutionRequirements(), present)
        async with await factory.create(present) as machine:
            assert (await machine.run(sh("echo ok"))).stdout == b"ok\n"
        with pytest.raises(UnsupportedMachineSpec, match="shellbox-no-such-tool"):
            await factory.check_environment(ExecutionRequirements(), missing)
        with pytest.raises(UnsupportedMachineSpec, match="shellbox-no-such-tool"):
            await factory.create(missing)
        with pytest.raises(TypeError):
            await factory.create(MachineSpec(PackageSpec(tools="sh")))  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_local_package_options_reach_the_factory(tmp_path: Path) -> None:
    """The local factory's ``package_cache``, ``python_version`` and ``python_interpreter``
    are the Rust factory's: a partial version and an interpreter that cannot run are refused
    (``ValueError``) for a ``pypi_packages`` spec before anything is resolved."""
    from shellbox.backends.local.machine import LocalMachineFactory, SandboxUnavailable
    from shellbox.machine import ExecutionRequirements, PackageSpec

    factory_for("local")  # skips where bwrap cannot sandbox
    spec = MachineSpec(PackageSpec(pypi_packages=("six==1.17.0",)))
    cache = tmp_path / "cache"
    for options, needle in (
        ({"python_version": "3.12"}, "3.12"),
        ({"python_interpreter": tmp_path / "no-such-python"}, "no-such-python"),
    ):
        try:
            factory = LocalMachineFactory(package_cache=cache, **options)  # type: ignore[arg-type]
        except SandboxUnavailable as error:
            skip(f"no bubblewrap sandbox here: {error}")
            return

        async def scenario(factory: LocalMachineFactory = factory, needle: str = needle) -> None:
            with pytest.raises(ValueError, match=needle):
                await factory.check_environment(ExecutionRequirements(), spec)
            with pytest.raises(ValueError, match=needle):
                await factory.create(spec)

        asyncio.run(scenario())
        factory.shutdown()
    assert not cache.exists() or not any(cache.iterdir()), "nothing was resolved"


def test_local_copy_on_write_system_directories() -> None:
    """``system_directories=COPY_ON_WRITE``: each machine writes /usr and /etc in a layer of
    its own, which the host and the other machines never see (a root host process with
    overlayfs; elsewhere the constructor raises SandboxUnavailable naming what is missing)."""
    from shellbox.backends.local.machine import LocalMachineFactory, SandboxUnavailable, SystemDirectories

    factory_for("local")  # skips where bwrap cannot sandbox
    try:
        factory = LocalMachineFactory(system_directories=SystemDirectories.COPY_ON_WRITE)
    except SandboxUnavailable as error:
        assert os.geteuid() != 0 or "copy-on-write" in str(error), error
        skip(f"no copy-on-write machines here: {error}")
        return
    name = f"shellbox-python-cow-{os.getpid()}"

    async def scenario() -> None:
        async with await factory.create(MachineSpec(HostImage())) as a, await factory.create(MachineSpec(HostImage())) as b:
            r = await a.run(sh(f"echo a > /usr/local/bin/{name} && echo a > /etc/{name} && cat /usr/local/bin/{name}"))
            assert r.stdout == b"a\n", r
            r = await b.run(sh(f"cat /usr/local/bin/{name}"))
            assert r.exit_code != 0, r
        assert not Path(f"/usr/local/bin/{name}").exists()
        assert not Path(f"/etc/{name}").exists()

    asyncio.run(scenario())
    factory.shutdown()
