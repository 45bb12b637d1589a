"""Instructions a server executes per JSON `tools/call server_info`, counted by callgrind: a figure that other
processes on the machine do not move, where CPU time on a busy machine moves by tens of percent.

Each server of run_all (`forge`, `forge-uvicorn`, `sdk-daphne`, `sdk-json`) is started as run_all starts it, under
`valgrind --tool=callgrind --instr-atstart=no`: nothing is counted while it starts. Once it answers, every session
makes `--warmup` calls, then counting is switched on (`callgrind_control -i on`) for `--n` calls (one session, or
`--clients` sessions side by side), switched off and dumped; the dump's total divided by the calls is the figure.
Instruction counts leave out what the kernel does for the process (system calls, fsync, thread switches) and what
cache misses cost, so they rank the servers' own work, not their whole CPU time (docs/PERFORMANCE.md, section 14).
A server runs 20-50 times slower under valgrind: a run of the four servers takes a few minutes.

```sh
.venv/bin/python bench/call_instructions.py                          # 300 calls, 1 session, then 20
.venv/bin/python bench/call_instructions.py --servers forge-uvicorn,sdk-daphne --clients 1
```
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import mcp_load as ml
import run_all

VALGRIND_START_TIMEOUT_S = 900.0
REFERENCE = "sdk-daphne"


def callgrind_prefix(out_dir: Path) -> list[str]:
    """The command that runs a server under callgrind with counting off, its counts written into `out_dir`."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_dir}/callgrind.%p"]


def under_callgrind(spec: run_all.ServerSpec, out_dir: Path) -> run_all.ServerSpec:
    """`spec` started under callgrind with counting off, its counts written into `out_dir`."""
    prefix = callgrind_prefix(out_dir)
    return run_all.ServerSpec(spec.name, spec.description, lambda port: [*prefix, *spec.argv(port)], forge=spec.forge)


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def dumped_total(out_dir: Path, pid: int, dump: int = 1) -> int:
    """The instruction total of the `dump`th dump taken of `pid` (callgrind's `totals:` line)."""
    for line in (out_dir / f"callgrind.{pid}.{dump}").read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in callgrind.{pid}.{dump}")


async def count(spec: run_all.ServerSpec, n: int, clients: int, warmup: int) -> float:
    """Instructions per call of `spec` over `n` calls from `clients` sessions."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"callgrind-{spec.name}-"))
    try:
        async with run_all.running(under_callgrind(spec, out_dir)) as server:
            sessions = [await ml.streamable_session(server.url, server.headers) for _ in range(clients)]
            for session in sessions:
                for _ in range(warmup):
                    await session.call("server_info")
            calls = n // clients * clients
            callgrind_control("-z", str(server.pid))
            callgrind_control("-i", "on", str(server.pid))

            async def call_in_turn(session: ml.Session) -> None:
                for _ in range(calls // clients):
                    await session.call("server_info")

            await asyncio.gather(*(call_in_turn(session) for session in sessions))
            callgrind_control("-i", "off", str(server.pid))
            callgrind_control("-d", str(server.pid))
            for session in sessions:
                await session.close()
            return dumped_total(out_dir, server.pid) / calls
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


async def run(args: argparse.Namespace) -> None:
    run_all.START_TIMEOUT_S = VALGRIND_START_TIMEOUT_S
    names = args.servers.split(",")
    unknown = [name for name in names if name not in run_all.SERVERS]
    if unknown:
        raise SystemExit(f"unknown server(s): {', '.join(unknown)}; use any of {', '.join(run_all.SERVERS)}")
    client_counts = [int(c) for c in str(args.clients).split(",")]
    figures: dict[tuple[str, int], float] = {}
    for clients in client_counts:
        for name in names:
            figures[name, clients] = await count(run_all.SERVERS[name], args.n, clients, args.warmup)
            print(
                f"{name:14s} {clients:3d} sessions  {figures[name, clients] / 1e6:7.3f} M instructions/call", flush=True
            )
    print()
    print(f"{'server':14s} {'sessions':>8s} {'M instr/call':>13s} {'/ ' + REFERENCE:>15s}")
    for (name, clients), value in figures.items():
        reference = figures.get((REFERENCE, clients))
        ratio = f"{value / reference:.2f}x" if reference else "-"
        print(f"{name:14s} {clients:8d} {value / 1e6:13.3f} {ratio:>15s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="forge,forge-uvicorn,sdk-daphne,sdk-json", help="run_all's server names")
    parser.add_argument("--n", type=int, default=300, help="counted calls per server (300)")
    parser.add_argument("--clients", default="1,20", help="sessions calling side by side, one or more counts (1,20)")
    parser.add_argument("--warmup", type=int, default=30, help="uncounted calls per session first (30)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
