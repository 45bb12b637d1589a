"""The read processes (projects.read_pool, projects.read_process): every read answers exactly as in process,
refusals come back as the same errors, the server no longer parses what a read process reads for it, a read
process that dies is replaced and the read answered, two losses are a refusal, and stopping ends them."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from audit.models import AuditEvent, EventKind
from forge_core.errors import Refusal
from mcp_api.tools.common import read
from projects import read_pool, reads, services
from projects.document_reads import READS
from projects.models import Project
from projects.plcopen import documents
from projects.read_process import NICENESS
from projects.services import ProjectUnavailable, do_import_project
from tests.projects.conftest import FIXTURES, MAIN, fixture_bytes

pytestmark = pytest.mark.django_db

Request = tuple[str, tuple[Any, ...], dict[str, Any]]
PLACEMENT_TOPICS = ("dosing pump speed", "alarm horn", "line state", "xy")
PAGE = 3  # small pages, so that every cursor and offset is followed


def outcome(run: Any, request: Request) -> tuple[str, Any]:
    name, args, kwargs = request
    try:
        return ("ok", run(name, *args, **kwargs))
    except (LookupError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


def every_read(
    document: documents.ProjectDocument,
    *,
    elements: int | None = None,
    page: int = PAGE,
    chunk: int = 5_000,
    pages: int | None = None,
) -> list[Request]:
    """Every read of the document as a client would make it, cursors and offsets followed to the end, the
    refusals among them (an unknown element, a bad cursor, a topic without a word). `elements` bounds how many
    element ids are read and `pages` how many pages of each paged read (bench/read_process_bench.py reads a
    large project so)."""

    def in_process(name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return READS[name](document, *args, **kwargs)

    requests: list[Request] = [("overview", (), {})]

    def followed(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], cursor_of: Any) -> None:
        for _page in itertools.islice(itertools.count(), pages):
            requests.append((name, args, kwargs))
            answered, content = outcome(in_process, requests[-1])
            cursor = cursor_of(content) if answered == "ok" else None
            if cursor is None:
                return
            kwargs = {**kwargs, **cursor}

    def next_cursor(content: dict[str, Any]) -> dict[str, Any] | None:
        return {"cursor": content["next_cursor"]} if content.get("next_cursor") else None

    def body_cursor(content: dict[str, Any]) -> dict[str, Any] | None:
        body = content.get("body") or {}
        return {"cursor": body["next_cursor"]} if body.get("next_cursor") else None

    def next_offset(content: dict[str, Any]) -> dict[str, Any] | None:
        return {"offset": content["next_offset"]} if "next_offset" in content else None

    for kind in (None, "pou", "variable", "type", "config", "resource", "task", "instance"):
        followed("find", (), {"kind": kind, "limit": page}, next_cursor)
    followed("find", (), {"text": "a", "limit": page}, next_cursor)
    followed("find", (), {"type": "INT", "limit": page}, next_cursor)
    followed("list_variables", (), {"limit": page}, next_cursor)
    ids = [entry.id for entry in document.index.entries][:elements]
    for element_id in ids:
        followed("get_element", (element_id,), {"body_limit": 200}, body_cursor)
    for scope in [i for i in ids if i.count("/") == 1][:20]:
        followed("list_variables", (), {"scope": scope, "limit": page}, next_cursor)
    followed("check", (), {"limit": page, "offset": 0}, next_offset)
    followed("export", (), {"offset": 0, "limit": chunk}, next_offset)
    requests += [("suggest_placement", (topic, page), {}) for topic in PLACEMENT_TOPICS]
    requests += [
        ("get_element", ("pou/NoSuchPou",), {}),
        ("find", (), {"cursor": "not-a-cursor"}),
        ("find", (), {"kind": "gizmo"}),
        ("list_variables", (), {"section": "nowhereVars"}),
        ("check", (), {"limit": 0, "offset": 0}),
    ]
    return requests


@pytest.fixture
def pool() -> Iterator[read_pool.ReadPool]:
    read_pool.start(2)
    running = read_pool.running()
    assert running is not None
    yield running
    read_pool.stop()


@pytest.fixture
def steps(root) -> Project:
    return do_import_project(fixture_bytes(MAIN), slug="steps", acting_user="tests")


def processes_of(pool: read_pool.ReadPool) -> list[read_pool.ReadProcess]:
    return [process for process in pool._idle if process is not None]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_read_answers_the_same_in_a_read_process_as_in_process(pool, fixture):
    data = fixture_bytes(fixture)
    fingerprint = documents.fingerprint(data)
    document = documents.load(data)
    requests = every_read(document)

    def in_process(name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return READS[name](document, *args, **kwargs)

    def in_pool(name: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return pool.run(fingerprint, lambda: data, name, *args, **kwargs)

    assert len(requests) > 50
    assert [outcome(in_pool, r) for r in requests] == [outcome(in_process, r) for r in requests]


def test_a_read_through_the_pool_answers_the_frame_and_content_it_answers_in_process(steps, pool):
    answered = [reads.get_element(steps, "pou/LineMain"), reads.check(steps, limit=5, offset=0), reads.overview(steps)]
    read_pool.stop()

    assert answered == [
        reads.get_element(steps, "pou/LineMain"),
        reads.check(steps, limit=5, offset=0),
        reads.overview(steps),
    ]


def test_the_server_does_not_parse_a_document_a_read_process_reads_for_it(steps, pool):
    services.clear_cache()

    reads.check(steps, limit=5, offset=0)
    reads.get_element(steps, "pou/LineMain")

    assert services._cache.get(steps.fingerprint) is None


def test_a_file_sent_once_is_not_sent_again_to_the_process_that_holds_it(steps, pool):
    reads.overview(steps)
    [holder] = [process for process in processes_of(pool) if steps.fingerprint in process.held]

    reads.get_element(steps, "pou/LineMain")

    assert [p for p in processes_of(pool) if steps.fingerprint in p.held] == [holder]


def test_an_unknown_element_read_in_a_process_is_the_same_refusal(steps, pool):
    with pytest.raises(Refusal) as refused:
        read(reads.get_element, steps, "pou/NoSuchPou")

    assert refused.value.code == "FORGE_ERR_NOT_FOUND"
    assert "pou/NoSuchPou" in refused.value.message


def test_an_external_change_read_in_a_process_is_recorded_once_as_the_next_revision(steps, root, pool):
    path = root / "steps.xml"
    path.write_bytes(path.read_bytes().replace(b'name="Dosing Line"', b'name="Dosing Line, edited"', 1))

    first = reads.overview(steps)
    second = reads.overview(steps)

    assert (first["accepted_revision"], first["name"], second["accepted_revision"]) == (2, "Dosing Line, edited", 2)
    assert AuditEvent.objects.filter(kind=EventKind.EXTERNAL_CHANGE).count() == 1


def test_a_file_broken_by_another_tool_is_refused_in_a_process_and_not_recorded(steps, root, pool):
    (root / "steps.xml").write_bytes(b"<project>half a file")

    with pytest.raises(ProjectUnavailable, match="no longer a PLCopen project"):
        reads.overview(steps)

    steps.refresh_from_db()
    assert steps.accepted_revision == 1
    assert not AuditEvent.objects.filter(kind=EventKind.EXTERNAL_CHANGE).exists()


def test_an_unexpected_error_in_a_read_process_is_a_failed_read_and_the_process_stays(steps, pool):
    data = fixture_bytes(MAIN)
    fingerprint = documents.fingerprint(data)
    pids = {process.popen.pid for process in processes_of(pool)}

    with pytest.raises(read_pool.ReadFailed):
        pool.run(fingerprint, lambda: data, "get_element", None)  # not an id: AttributeError in the query

    assert pool.run(fingerprint, lambda: data, "get_element", "pou/LineMain")["id"].lower() == "pou/linemain"
    assert {process.popen.pid for process in processes_of(pool)} == pids


def test_a_killed_read_process_is_replaced_and_the_read_answered(steps):
    read_pool.start(1)
    pool = read_pool.running()
    assert pool is not None
    try:
        [process] = processes_of(pool)
        process.popen.kill()
        process.popen.wait()

        answer = reads.overview(steps)

        [replacement] = processes_of(pool)
        assert answer["project"] == "steps"
        assert replacement.popen.pid != process.popen.pid
        assert replacement.popen.poll() is None
    finally:
        read_pool.stop()


# The first read process started dies on the first request it receives; the next is a real one.
DIES_MID_READ_ONCE = """
import os, sys
from multiprocessing.connection import Connection
marker, fd = sys.argv[1], sys.argv[2]
if os.path.exists(marker):
    os.execv(sys.executable, [sys.executable, "-m", "projects.read_process", fd])
open(marker, "w").close()
Connection(int(fd)).recv_bytes()
os._exit(1)
"""


def test_a_read_process_that_dies_mid_read_is_replaced_and_the_read_answered_by_the_next(steps, tmp_path, monkeypatch):
    marker = tmp_path / "died-once"
    monkeypatch.setattr(read_pool, "COMMAND", [sys.executable, "-c", DIES_MID_READ_ONCE, str(marker)])
    read_pool.start(1)
    try:
        answer = reads.check(steps, limit=5, offset=0)
    finally:
        read_pool.stop()

    assert marker.exists()
    assert answer == reads.check(steps, limit=5, offset=0)


def test_a_read_whose_processes_die_twice_is_a_refusal_and_nothing_is_recorded(steps, root, monkeypatch):
    # A process that exits as soon as it starts: each attempt finds its socket closed.
    monkeypatch.setattr(read_pool, "COMMAND", [sys.executable, "-c", "pass"])
    path = root / "steps.xml"
    path.write_bytes(path.read_bytes().replace(b'name="Dosing Line"', b'name="Dosing Line, edited"', 1))
    read_pool.start(1)
    try:
        with pytest.raises(Refusal) as refused:
            read(reads.overview, steps)
    finally:
        read_pool.stop()

    assert refused.value.code == "FORGE_ERR_NOT_FOUND"
    assert "read process" in refused.value.message
    steps.refresh_from_db()
    assert steps.accepted_revision == 1


def test_stopping_the_pool_ends_its_processes_and_reads_run_in_process_again(steps, pool):
    reads.overview(steps)
    started = processes_of(pool)

    read_pool.stop()

    assert [process.popen.poll() is not None for process in started] == [True, True]
    assert read_pool.running() is None
    assert reads.overview(steps)["project"] == "steps"


def test_the_working_draft_view_reads_in_process_while_the_pool_runs(steps, pool):
    answer = reads.overview(steps, view=reads.WORKING_DRAFT)

    assert answer["view"] == reads.WORKING_DRAFT
    assert all(steps.fingerprint not in process.held for process in processes_of(pool))


def test_a_read_process_holds_no_file_and_no_socket_but_its_own_and_runs_below_the_server(pool):
    [process, _] = processes_of(pool)
    data = fixture_bytes(MAIN)
    process.ask(documents.fingerprint(data), lambda: data, "overview", (), {})  # past its start-up

    opened = {
        fd: os.readlink(f"/proc/{process.popen.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.popen.pid}/fd")
    }

    beyond_standard = [target for fd, target in opened.items() if int(fd) > 2]
    assert [target.startswith("socket:") for target in beyond_standard] == [True]
    assert (opened["0"], opened["1"]) == (os.devnull, os.devnull)
    assert os.getpriority(os.PRIO_PROCESS, process.popen.pid) == os.getpriority(os.PRIO_PROCESS, 0) + NICENESS
