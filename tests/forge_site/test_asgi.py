"""The ASGI application outside the MCP transports: the console's static files are served by the
application itself, so the console is styled on a plain `runmcp` with no web server in front, and a view
runs with its middleware in one hop into the views' pool."""

from __future__ import annotations

import threading

import pytest
from channels.testing import ApplicationCommunicator
from django.contrib.sessions.middleware import SessionMiddleware

from forge_core.workers import VIEWS
from forge_site.asgi import application

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def get(path: str) -> dict:
    """One GET read to its last body chunk. Not HttpCommunicator: a file response ends with a chunk
    that has no `body` key, which ASGI allows and that helper does not."""
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "scheme": "http",
    }
    communicator = ApplicationCommunicator(application, scope)
    await communicator.send_input({"type": "http.request", "body": b""})
    response = await communicator.receive_output(5.0)
    response["body"] = b""
    while True:
        chunk = await communicator.receive_output(5.0)
        response["body"] += chunk.get("body", b"")
        if not chunk.get("more_body"):
            break
    await communicator.wait(5.0)
    return response


async def test_the_admin_stylesheet_is_served_from_static():
    response = await get("/static/admin/css/base.css")

    assert response["status"] == 200
    assert dict(response["headers"])[b"Content-Type"].startswith(b"text/css")
    assert b"#header" in response["body"]


async def test_a_missing_static_file_is_404():
    response = await get("/static/admin/css/no-such-file.css")

    assert response["status"] == 404


@pytest.mark.django_db(transaction=True)
async def test_a_view_and_every_middleware_run_in_one_hop_into_the_views_pool(monkeypatch):
    """Django's own handler ran each middleware's halves and the view in hops of their own, in a thread made
    for the request; here the whole chain runs on one thread of the views' pool (forge_site.django_views)."""
    threads: list[tuple[str, str]] = []
    session_request = SessionMiddleware.process_request
    session_response = SessionMiddleware.process_response

    def seen_request(self, request):
        threads.append(("session in", threading.current_thread().name))
        return session_request(self, request)

    def seen_response(self, request, response):
        threads.append(("session out", threading.current_thread().name))
        return session_response(self, request, response)

    monkeypatch.setattr(SessionMiddleware, "process_request", seen_request)
    monkeypatch.setattr(SessionMiddleware, "process_response", seen_response)

    response = await get("/console/login/")

    assert response["status"] == 200
    assert b"<form" in response["body"]
    assert [step for step, _ in threads] == ["session in", "session out"]
    assert len({name for _, name in threads}) == 1
    assert threads[0][1].startswith(f"{VIEWS}_")
