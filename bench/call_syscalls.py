"""System calls and thread switches a server makes per JSON `tools/call server_info`: the kernel's share of a call,
which instruction counts (`call_instructions.py`) leave out, counted rather than timed.

Each server of run_all is started as run_all starts it and makes `--warmup` calls on one session. Then, for `--n`
sequential calls, `strace -c -f` is attached to every thread of the server (a count per system call; strace slows
the server, not the count), and for another `--n` calls, without strace, each thread's voluntary and involuntary
context switches are read from `/proc/<pid>/task/*/status` (switches are what strace would change). With
`--cas N`, N CA certificates are put in a Forge server's trust store first (`server_info` reads it on every call),
and the calls wait until the store has settled (`caretaker.trust.SETTLED_NS`).

```sh
.venv/bin/python bench/call_syscalls.py                                  # forge, forge-uvicorn, sdk-daphne
.venv/bin/python bench/call_syscalls.py --servers forge-uvicorn --cas 2 --n 1000
```
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import mcp_load as ml
import run_all

sys.path.insert(0, str(run_all.ROOT))

from caretaker import ca  # the project's root is on the path now

SETTLE_S = 2.5  # caretaker.trust.SETTLED_NS (2 s), and a little
STRACE_ATTACH_S = 1.5  # strace attaches to the threads one by one; calls made before it has would be missed


def switches(pid: int) -> dict[str, tuple[int, int]]:
    """Each thread's voluntary and involuntary context switches so far, by thread id."""
    found: dict[str, tuple[int, int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        found[tid] = (int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"]))
    return found


def strace_counts(summary: str) -> dict[str, int]:
    """System call -> calls, from `strace -c`'s table."""
    counts: dict[str, int] = {}
    for line in summary.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            counts[parts[-1]] = int(parts[3])
    return counts


async def calls(session: ml.Session, n: int) -> None:
    for _ in range(n):
        await session.call("server_info")


async def measure(spec: run_all.ServerSpec, args: argparse.Namespace) -> None:
    async with run_all.running(spec) as server:
        if spec.forge and args.cas:
            store = server.log.parent / "data" / "trust"
            store.mkdir(exist_ok=True)
            for number in range(args.cas):
                _, certificate = ca.create_ca("ed25519", common_name=f"Bench CA {number}")
                (store / f"bench-{number}.pem").write_bytes(certificate)
            await asyncio.sleep(SETTLE_S)
        session = await ml.streamable_session(server.url, server.headers)
        await calls(session, args.warmup)
        with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
            threads = [arg for tid in os.listdir(f"/proc/{server.pid}/task") for arg in ("-p", tid)]
            tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out.name, *threads], stderr=subprocess.DEVNULL)
            await asyncio.sleep(STRACE_ATTACH_S)
            await calls(session, args.n)
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
            counted = strace_counts(Path(out.name).read_text())
        before = switches(server.pid)
        await calls(session, args.n)
        after = switches(server.pid)
        await session.close()
    print(f"{spec.name}: {sum(counted.values()) / args.n:.1f} system calls per call")
    for name, number in sorted(counted.items(), key=lambda item: -item[1]):
        if number / args.n >= 0.05:
            print(f"  {name:<16} {number / args.n:6.2f}")
    voluntary = involuntary = 0
    for tid, (v, i) in after.items():
        v0, i0 = before.get(tid, (0, 0))
        voluntary, involuntary = voluntary + v - v0, involuntary + i - i0
        if (v - v0 + i - i0) / args.n >= 0.05:
            print(f"  thread {tid}: {(v - v0) / args.n:.2f} voluntary, {(i - i0) / args.n:.2f} involuntary switches")
    print(f"  switches per call: {voluntary / args.n:.2f} voluntary, {involuntary / args.n:.2f} involuntary")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="forge,forge-uvicorn,sdk-daphne", help="run_all's server names")
    parser.add_argument("--n", type=int, default=300, help="sequential calls counted, each way (300)")
    parser.add_argument("--warmup", type=int, default=30, help="uncounted calls first (30)")
    parser.add_argument("--cas", type=int, default=0, help="CA certificates in a Forge server's trust store (0)")
    args = parser.parse_args()
    for name in args.servers.split(","):
        asyncio.run(measure(run_all.SERVERS[name], args))


if __name__ == "__main__":
    main()
