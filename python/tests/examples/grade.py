"""A grader in the reference library's style (its README's local example and REFERENCE.md 3.1),
unchanged but for the program it runs: it imports only reference module paths.

Usage: python grade.py local|shellsim|docker [image]
"""

import asyncio
import sys
import tempfile
from pathlib import Path

from shellbox.backends.docker.machine import DockerMachineFactory
from shellbox.backends.local.machine import LocalMachineFactory
from shellbox.backends.shellsim.machine import ShellSimMachineFactory
from shellbox.machine import Command, DockerImage, ExitReason, HostImage, MachineSpec, PackageSpec
from shellbox.transfer import download_files


async def grade(backend: str, image: str) -> None:
    if backend == "local":
        factory = LocalMachineFactory(bin_dirs=(Path("/opt/grader-venv/bin"),))
        spec = MachineSpec(HostImage(), workdir="/app")
    elif backend == "shellsim":
        factory = ShellSimMachineFactory()
        spec = MachineSpec(PackageSpec(), workdir="/app")
    else:
        factory = DockerMachineFactory()
        spec = MachineSpec(DockerImage(image), workdir="/app")
    machine = await factory.create(spec)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            tests = Path(scratch) / "tests"
            tests.mkdir()
            (tests / "grade.sh").write_text('test "$(cat /app/submission/answer.txt)" = 42 && echo PASS\n')
            await machine.upload(tests, "/tests")
        await machine.run(Command(("sh", "-c", "mkdir -p submission && echo 42 > submission/answer.txt")))
        result = await machine.run(Command(("sh", "/tests/grade.sh"), timeout=60))
        assert result.reason is ExitReason.EXITED
        print(result.exit_code, result.stdout.decode().strip())
        files = await download_files(machine, ("/missing", "/app/submission"), max_files=2)
        print(sorted(files))
    finally:
        await machine.close()


if __name__ == "__main__":
    asyncio.run(grade(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "busybox"))
