"""The overhead of the Python path over the Rust API for `run(true)`, on sim and local, in one run.

For each backend: the Rust API's median per `run(Command::new("true"))` comes from
`shellbox bench --backend B --case run_true --json` (in-process, no protocol); the Python
path's median is measured here, `await machine.run(Command(("true",)))` through the
installed package and its `shellbox serve`. Both use the same binary (`SHELLBOX_BIN` or the
one the package finds). Prints one JSON object per backend; with `--check`, exits 1 when the
sim overhead is over 150 µs (the target of issue 13).

    python python/benchmarks/overhead.py [--runs 2000] [--backends sim,local] [--check]

Numbers are only meaningful with a release binary (SHELLBOX_WHEEL_PROFILE=release).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

from shellbox._server import find_executable
from shellbox.backends.local.machine import LocalMachineFactory
from shellbox.backends.shellsim.machine import ShellSimMachineFactory
from shellbox.machine import Command, HostImage, MachineFactory, MachineSpec, PackageSpec

SIM_TARGET_US = 150.0


def rust_median_us(backend: str) -> float:
    completed = subprocess.run(
        [find_executable(), "bench", "--backend", backend, "--case", "run_true", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    for line in completed.stdout.splitlines():
        value = json.loads(line)
        if value.get("case") == "run_true":
            return float(value["median_us"])
    raise RuntimeError(f"shellbox bench printed no run_true case: {completed.stdout}")


async def python_median_us(factory: MachineFactory, spec: MachineSpec, runs: int) -> float:
    machine = await factory.create(spec)
    try:
        command = Command(("true",))
        for _ in range(min(50, runs)):
            await machine.run(command)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            await machine.run(command)
            samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1e6
    finally:
        await machine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="Python runs per backend (local: a tenth)")
    parser.add_argument("--backends", default="sim,local")
    parser.add_argument("--check", action="store_true", help="exit 1 when the sim overhead is over 150 µs")
    args = parser.parse_args()
    over = False
    for backend in args.backends.split(","):
        if backend == "sim":
            factory: MachineFactory = ShellSimMachineFactory()
            spec = MachineSpec(PackageSpec())
            runs = args.runs
        elif backend == "local":
            factory = LocalMachineFactory()
            spec = MachineSpec(HostImage())
            runs = max(1, args.runs // 10)
        else:
            raise SystemExit(f"unknown backend {backend!r} (sim or local)")
        python_us = asyncio.run(python_median_us(factory, spec, runs))
        factory.shutdown()
        rust_us = rust_median_us(backend)
        overhead = python_us - rust_us
        print(json.dumps({
            "backend": backend,
            "case": "run_true",
            "python_runs": runs,
            "rust_median_us": round(rust_us, 1),
            "python_median_us": round(python_us, 1),
            "overhead_us": round(overhead, 1),
        }), flush=True)
        if backend == "sim" and overhead > SIM_TARGET_US:
            over = True
    if args.check and over:
        print(f"the sim overhead is over {SIM_TARGET_US} µs", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
