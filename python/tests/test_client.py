"""The package as a user installs it: the bundled binary, reference-style programs running
unchanged, REFERENCE.md 3.1's example, and a killed client leaving nothing behind."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

import shellbox
from conftest import BUSYBOX_IMAGE, skip, DOCKER_SOCKET, factory_for, source_tree, spec_for
from shellbox.machine import Command
from shellbox.transfer import download_files

HERE = Path(__file__).resolve().parent


def test_the_package_is_the_installed_one_and_finds_its_binary() -> None:
    from shellbox._server import find_executable

    if os.environ.get("SHELLBOX_TEST_INSTALLED") != "1":
        skip("SHELLBOX_TEST_INSTALLED is not 1 (scripts/test-python sets it for the installed wheel)")
    package = Path(shellbox.__file__).resolve()
    assert source_tree() not in package.parents, f"tests import the source tree, not the wheel: {package}"
    executable = Path(find_executable())
    assert executable.parent == Path(sys.executable).parent, executable
    version = subprocess.run([str(executable), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("shellbox "), version.stdout
    assert (package.parent / "py.typed").exists()


@pytest.mark.parametrize("backend", ["shellsim", "local", "docker"])
def test_a_reference_style_grader_runs_unchanged(backend: str) -> None:
    factory_for({"shellsim": "sim"}.get(backend, backend))  # skips when the backend is absent
    completed = subprocess.run(
        [sys.executable, str(HERE / "examples" / "grade.py"), backend, BUSYBOX_IMAGE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if backend == "docker" and "no such image" in completed.stderr.lower():
        skip(f"the docker test image {BUSYBOX_IMAGE} is missing (the shellbox-docker tests import it)")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "0 PASS\n['/app/submission/answer.txt']\n"


def test_reference_download_files_example() -> None:
    """REFERENCE.md 3.1's example (local): a file named with `:`, a newline, `λ` and a
    backslash holding `answer\\0`, a hard link to it and a symlink to /etc/passwd; max_files=2
    returns exactly the two regular entries; selecting the symlink itself is refused
    mentioning links. (The name's backslash needs GNU tar, which unescapes it: busybox's and
    the simulator's tar do not.)"""
    backend = "local"
    factory = factory_for(backend)
    name = "a:b\nλ\\c"
    script = 'mkdir -p /app/submission && cd /app/submission && printf "answer\\000" > "$NAME" && ln "$NAME" alias && ln -s /etc/passwd private'

    async def scenario() -> dict[str, bytes]:
        machine = await factory.create(spec_for(backend, workdir="/app"))
        try:
            made = await machine.run(Command(("sh", "-c", script), env={"NAME": name}))
            assert made.exit_code == 0, made
            files = await download_files(
                machine, ("/missing", "/app/submission", f"/app/submission/{name}"), max_files=2
            )
            with pytest.raises(RuntimeError, match="links"):
                await download_files(machine, ("/app/submission/private",))
            return files
        finally:
            await machine.close()

    files = asyncio.run(scenario())
    assert files == {f"/app/submission/{name}": b"answer\0", "/app/submission/alias": b"answer\0"}


CLIENT = r"""
import asyncio, sys
from shellbox.backends.local.machine import LocalMachineFactory
from shellbox.backends.docker.machine import DockerMachineFactory
from shellbox.machine import Command, DockerImage, HostImage, MachineSpec

async def main():
    backend = sys.argv[1]
    if backend == "local":
        factory, spec = LocalMachineFactory(), MachineSpec(HostImage())
    else:
        factory, spec = DockerMachineFactory(), MachineSpec(DockerImage(sys.argv[2]))
    machines = [await factory.create(spec) for _ in range(3)]
    await machines[0].run(Command(("sh", "-c", "echo data > file")))
    tasks = [asyncio.create_task(m.run(Command(("sh", "-c", "sleep 743.5")))) for m in machines]
    await asyncio.sleep(1.0)
    print(factory.server_pid, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def docker_containers_of(pid: int) -> list[str]:
    """Names of the containers whose owner label is `pid`, from the Engine API over its socket."""

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(DOCKER_SOCKET)

    filters = json.dumps({"label": [f"dev.shellbox.owner-pid={pid}"]})
    connection = UnixConnection("localhost")
    connection.request("GET", "/containers/json?all=1&filters=" + urllib.parse.quote(filters))
    containers: list[dict[str, Any]] = json.loads(connection.getresponse().read())
    return [c["Names"][0] for c in containers]


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_killed_client_leaves_nothing_behind(backend: str, tmp_path: Path) -> None:
    factory_for(backend)  # skips when the backend is absent
    if backend == "docker" and not os.path.exists(DOCKER_SOCKET):
        skip(f"{DOCKER_SOCKET} is absent (DOCKER_HOST engines are not inspected here)")
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, backend, BUSYBOX_IMAGE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    assert client.stdout is not None
    line = client.stdout.readline()
    if not line:
        stderr = client.stderr.read() if client.stderr else ""
        client.wait()
        if backend == "docker" and "no such image" in stderr.lower():
            skip(f"the docker test image {BUSYBOX_IMAGE} is missing")
        pytest.fail(f"the client failed: {stderr}")
    server = int(line)
    if backend == "local":
        assert len([p for p in tmp_path.iterdir() if p.name.startswith("shellbox-local-")]) == 3
        assert host_processes("sleep 743.5")
    else:
        assert len(docker_containers_of(server)) == 3
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 60
    while Path(f"/proc/{server}").exists() and "zombie" not in _state(server):
        assert time.monotonic() < deadline, "the server did not exit after its client died"
        time.sleep(0.05)
    # Machine roots (shellbox-local-*) and the factory's shared /etc (shellbox-etc-*).
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("shellbox-")] == []
    deadline = time.monotonic() + 10
    while host_processes("sleep 743.5"):
        assert time.monotonic() < deadline, host_processes("sleep 743.5")
        time.sleep(0.05)
    if backend == "docker":
        assert docker_containers_of(server) == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def host_processes(needle: str) -> list[str]:
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


def test_the_readme_python_example_runs_as_written() -> None:
    readme = (source_tree() / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    examples = [b for b in blocks if "from shellbox" in b]
    assert examples, "README.md has no Python example importing shellbox"
    completed = subprocess.run([sys.executable, "-c", examples[0]], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "3 b'hi\\n'\n"


def test_the_server_has_its_own_session() -> None:
    """A Ctrl-C for the program (SIGINT to its process group) does not reach the server."""
    factory = factory_for("sim")
    assert os.getsid(factory.server_pid) == factory.server_pid != os.getsid(0)


def test_a_dropped_factory_ends_its_server() -> None:
    """A factory nobody holds any more (with its machines) ends its server process, so a
    worker that makes a factory per task does not pile up servers."""
    import gc

    from shellbox.backends.shellsim.machine import ShellSimMachineFactory
    from shellbox.machine import MachineSpec, PackageSpec

    pids = []
    for _ in range(3):
        factory = ShellSimMachineFactory()

        async def use(factory: ShellSimMachineFactory = factory) -> None:
            machine = await factory.create(MachineSpec(PackageSpec()))
            assert (await machine.run(Command(("echo", "hi")))).stdout == b"hi\n"

        asyncio.run(use())
        pids.append(factory.server_pid)
        del factory, use
    gc.collect()
    deadline = time.monotonic() + 15
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid)]
        time.sleep(0.05)
    assert alive == [], f"servers still running: {alive}"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_snapshots_and_forks_on_sim() -> None:
    """Machine.snapshot, MachineFactory.create_from and fork over the serve protocol: a fork
    sees the files at snapshot time, not the source's later writes; a deleted snapshot is
    refused as closed while its machines keep working."""
    from shellbox.errors import MachineClosed
    from shellbox.machine import MachineSpec, PackageSpec

    factory = factory_for("sim")

    async def use() -> None:
        spec = MachineSpec(PackageSpec())
        source = await factory.create(spec)
        await source.run(Command(("sh", "-c", "echo before > /tmp/f")))
        snapshot = await source.snapshot()
        await source.run(Command(("sh", "-c", "echo after > /tmp/f")))
        early = await factory.create_from(snapshot, spec)
        assert (await early.run(Command(("cat", "/tmp/f")))).stdout == b"before\n"
        late = await factory.fork(source, spec)
        assert (await late.run(Command(("cat", "/tmp/f")))).stdout == b"after\n"
        await snapshot.delete()
        await snapshot.delete()
        with pytest.raises(MachineClosed):
            await factory.create_from(snapshot, spec)
        assert (await early.run(Command(("cat", "/tmp/f")))).stdout == b"before\n"
        for m in (source, early, late):
            await m.close()

    asyncio.run(use())
