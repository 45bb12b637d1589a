"""A read process: runs the server's project reads (`projects.document_reads`) on documents it is sent, so the
server's own interpreter stays free for every other request while a large project is checked.

`projects.read_pool` starts it as `python -m projects.read_process FD`, FD being its end of a socket pair, and
is the only thing that talks to it. Each request names a document by its content fingerprint; the process
keeps the documents it parsed by fingerprint (as the server does, `projects.services`) and answers "missing"
for one it does not hold, and the server sends it again with the file's bytes. It opens no file, binds nothing
and imports nothing of Django: all it reads is what arrives on its socket, and it ends when the server
closes its end (or dies).

Request and reply are pickles (the server's own code on both ends):
request `(fingerprint, data or None, read name, args, kwargs)`; reply `(outcome, detail)` with outcome
`ok` (detail: the content), `missing`, `not_a_project` (the parser's reason), `not_found` (the id asked for),
`invalid` (the client's mistake, as a ValueError says it) or `failed` (an unexpected error's type: a bug).
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from projects.document_reads import READS
from projects.plcopen import documents
from projects.plcopen.elements import ElementNotFound
from projects.recent import RecentValues

# As many parsed documents as the server keeps (projects.services.CACHE_SIZE).
CACHE_SIZE = 8
NICENESS = 10

Reply = tuple[str, Any]


def answer(held: RecentValues[str, documents.ProjectDocument], request: tuple[Any, ...]) -> Reply:
    """The reply to one request, from the documents held (parsing the one sent if it is new)."""
    fingerprint, data, name, args, kwargs = request
    document = held.get(fingerprint)
    if document is None:
        if data is None:
            return ("missing", None)
        try:
            document = documents.load(data)
        except documents.ProjectFormatError as exc:
            return ("not_a_project", str(exc))
        held.put(fingerprint, document)
    try:
        return ("ok", READS[name](document, *args, **kwargs))
    except ElementNotFound as exc:
        return ("not_found", exc.element_id)
    except ValueError as exc:
        return ("invalid", str(exc))


def serve(connection: Connection) -> None:
    """Answer requests until the server closes its end."""
    held: RecentValues[str, documents.ProjectDocument] = RecentValues(CACHE_SIZE)
    while True:
        try:
            request = pickle.loads(connection.recv_bytes())
        except EOFError:
            return
        try:
            reply = answer(held, request)
        except Exception as exc:  # the process's one boundary: a bug in a read is told, not a dead process
            traceback.print_exc(file=sys.stderr)
            reply = ("failed", type(exc).__name__)
        connection.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


def main(argv: list[str]) -> None:
    # Ctrl-C at a terminal reaches the whole process group; the server ends this process when it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A read is throughput work; the server's event loop and request threads are latency work. On a busy machine
    # a read process at the server's priority took the core a probe's thread woke up to (ping p50 under a
    # looping check 1.07-1.49x alone at 0, 0.91-0.99x at 10: docs/PERFORMANCE.md, section 14).
    os.nice(NICENESS)
    connection = Connection(int(argv[1]))
    gc.collect()
    gc.freeze()  # the imports live as long as the process: keep the collector's passes off them
    serve(connection)


if __name__ == "__main__":
    main(sys.argv)
