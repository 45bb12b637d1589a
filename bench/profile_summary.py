"""Summarise a py-spy profile of the Forge server (``--format raw``: collapsed stacks) by cost centre.

Record one under load, for instance with ``bench/run_all.py --servers forge --profile /tmp/forge.txt``
or by hand::

    py-spy record --pid PID --duration 10 --rate 250 --gil --nonblocking --format raw -o /tmp/forge.txt

then run ``python bench/profile_summary.py /tmp/forge.txt``.

Each sample is put in one bucket.  The request's semantic steps (token lookup, session lookup,
audit row, transaction, pydantic, tool, JSON-RPC encoding) are found from the root of the stack
down, so the ORM and sqlite work below ``authenticate_token`` counts as the token lookup.  What is
left is classified by its innermost frame: the Twisted/daphne HTTP layer, Channels routing, the
consumer, the thread hop (asgiref, the executor, the event-loop wake-up), the asyncio loop, and
the time the event loop sits in ``epoll`` (idle, or the kernel side of socket readiness).

Samples are split between the event-loop thread and the executor threads that run the
``database_sync_to_async`` work (a stack through ``concurrent/futures/thread.py``); when py-spy
could not read a whole stack, the thread is guessed from frames only one of them runs.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME_RE = re.compile(r"^(?P<func>.*) \((?P<file>.*?):(?P<line>\d+)\)$")

# (file substring, function substring or "", bucket): matched from the root of the stack down.
SEMANTIC = [
    ("audit/", "", "audit row: sanitize + INSERT"),
    ("django/db/transaction.py", "", "transaction BEGIN/COMMIT"),
    ("access/services.py", "authenticate_token", "token lookup (ORM SELECT)"),
    ("access/services.py", "find_session", "session lookup (ORM SELECT)"),
    ("mcp_api/transports/sessions.py", "client_notification", "initialized notification (UPDATE)"),
    ("django/db/__init__.py", "close_old_connections", "thread hop: close_old_connections"),
    ("mcp_api/tools/__init__.py", "", "pydantic: arguments parse/dump"),
    ("pydantic", "", "pydantic: arguments parse/dump"),
    ("mcp_api/tools/server.py", "", "tool handler (server_info)"),
    ("mcp_api/jsonrpc.py", "", "JSON-RPC decode/encode"),
    ("mcp_api/protocol.py", "tool_result", "JSON-RPC decode/encode"),
]

# (file substring, function substring or "", bucket): matched from the innermost frame up.
GENERIC = [
    ("selectors.py", "", "epoll wait"),
    ("asyncio/selector_events.py", "_write_to_self", "thread hop: wake-ups and futures"),
    ("asyncio/selector_events.py", "_read_from_self", "thread hop: wake-ups and futures"),
    ("asyncio/futures.py", "", "thread hop: wake-ups and futures"),
    ("concurrent/futures/", "", "thread hop: wake-ups and futures"),
    ("threading.py", "", "thread hop: wake-ups and futures"),
    ("queue.py", "", "thread hop: wake-ups and futures"),
    ("asgiref/", "", "thread hop: asgiref sync_to_async"),
    ("channels/db.py", "", "thread hop: asgiref sync_to_async"),
    ("json/", "", "JSON-RPC decode/encode"),
    ("django/db/", "", "ORM (other)"),
    ("email/", "", "twisted HTTP parsing"),  # twisted parses Content-Type with the email package
    ("twisted/web/", "", "twisted HTTP parsing"),
    ("twisted/", "", "twisted reactor + TCP"),
    ("daphne/", "", "daphne HTTP <-> ASGI"),
    ("channels/", "", "channels routing + consumer base"),
    ("django/urls/", "", "channels routing + consumer base"),
    ("mcp_api/consumers.py", "", "consumer (body, headers, reply)"),
    ("mcp_api/transports/", "", "MCP logic (exchange, protocol)"),
    ("mcp_api/protocol.py", "", "MCP logic (exchange, protocol)"),
    ("mcp_api/", "", "MCP logic (exchange, protocol)"),
    ("asyncio/", "", "asyncio loop"),
    ("django/", "", "django (other)"),
]


WORKER_ONLY = ("django/db/", "audit/", "access/services.py", "mcp_api/protocol.py", "mcp_api/tools/", "pydantic")
LOOP_ONLY = (
    "twisted/",
    "daphne/",
    "email/",
    "channels/routing.py",
    "mcp_api/consumers.py",
    "forge_core/streams.py",
    "asyncio/",
)


def parse(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    """Stacks (root first) of (function, file) with their sample counts."""
    stacks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        text, _, count = line.rpartition(" ")
        frames = []
        for raw in text.split(";"):
            match = FRAME_RE.match(raw)
            frames.append((match["func"], match["file"]) if match else (raw, ""))
        stacks.append((frames, int(count)))
    return stacks


def _matches(frame: tuple[str, str], rule: tuple[str, str, str]) -> bool:
    func, file = frame
    return rule[0] in file and rule[1] in func


def bucket(frames: list[tuple[str, str]]) -> str:
    for frame in frames:
        for rule in SEMANTIC:
            if _matches(frame, rule):
                return rule[2]
    for frame in reversed(frames):
        for rule in GENERIC:
            if _matches(frame, rule):
                return rule[2]
    return "other: " + (frames[-1][0] if frames else "?")


def thread_of(frames: list[tuple[str, str]]) -> str:
    """``worker`` (executor thread), ``loop`` (event-loop thread) or ``?`` (a truncated stack)."""
    files = [file for _func, file in frames]
    if any("concurrent/futures/thread.py" in file for file in files):
        return "worker"
    if any(file.endswith("manage.py") or "asyncio/base_events.py" in file for file in files):
        return "loop"
    # py-spy could not read the whole stack: guess the thread from what only one of them runs.
    if any(mark in file for file in files for mark in WORKER_ONLY):
        return "worker"
    if any(mark in file for file in files for mark in LOOP_ONLY):
        return "loop"
    return "?"


def summarise(path: Path, top: int, exclude_epoll: bool) -> None:
    stacks = parse(path)
    by_bucket: Counter[tuple[str, str]] = Counter()
    for frames, count in stacks:
        name = bucket(frames)
        if exclude_epoll and name == "epoll wait":
            continue
        by_bucket[(name, thread_of(frames))] += count
    total = sum(by_bucket.values()) or 1
    totals: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for (name, thread), count in by_bucket.items():
        totals[name] += count
        threads[thread] += count
    print(f"{path}: {total} samples{' (epoll wait left out)' if exclude_epoll else ''}")
    print(
        f"event-loop thread {100 * threads['loop'] / total:.1f}%,"
        f" executor threads (database_sync_to_async) {100 * threads['worker'] / total:.1f}%,"
        f" truncated stacks {100 * threads['?'] / total:.1f}%"
    )
    print(f"{'bucket':<40} {'all %':>6} {'loop %':>7} {'worker %':>9} {'? %':>6}")
    for name, count in totals.most_common(top):
        shares = [100 * by_bucket[(name, thread)] / total for thread in ("loop", "worker", "?")]
        print(f"{name:<40} {100 * count / total:>6.1f} {shares[0]:>7.1f} {shares[1]:>9.1f} {shares[2]:>6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", type=Path, nargs="+", help="py-spy --format raw output files")
    parser.add_argument("--top", type=int, default=40, help="buckets to show")
    parser.add_argument("--exclude-epoll", action="store_true", help="leave samples in epoll wait out")
    args = parser.parse_args()
    for path in args.profiles:
        summarise(path, args.top, args.exclude_epoll)
        print()


if __name__ == "__main__":
    main()
