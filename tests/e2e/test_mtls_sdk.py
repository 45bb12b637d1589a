"""Team members over mTLS end to end: a live server serving HTTPS beside HTTP, certificates issued by its
caretaker, the official SDK client presenting one, and every way a certificate is refused, each with its reason
on the wire. A peer's open stream ends as soon as its revocation is approved, in the process that holds it, and
with PostgreSQL + Redis also when another process approved it.

The revocation is approved the way a caretaker does from elsewhere: a client asks (`team.revoke_peer`) and the
caretaker approves over the operator REST API, typing the key's memorable ID; the approval answers once the
roster is signed, and from then the stream's end is waited for with a one-second bound.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest

from caretaker import ca, store
from tests.live import (
    ACCEPT_BOTH,
    INITIALIZE,
    LiveServer,
    bearer,
    run_server,
    scaleout_configured,
    streamable_client,
)
from tests.team_tls import Member, client_context, issue_live, new_member_key, server_cert, tls_team_server

pytestmark = [pytest.mark.live, pytest.mark.anyio]

BOUND = 60
STREAM_END_AFTER_REVOCATION = 1.0  # seconds: the issue's promise, as the bound of a wait on the stream's end
LAST_CALLER = """
from audit.models import AuditEvent, EventKind
row = AuditEvent.objects.filter(kind=EventKind.TOOL_CALL, tool={tool!r}).latest("seq")
print(row.called_by, row.client_label)
"""


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory):
    with tls_team_server(tmp_path_factory.mktemp("mtls")) as server:
        yield server


@pytest.fixture(scope="module")
def alice(mtls_server, tmp_path_factory) -> Member:
    return issue_live(mtls_server, tmp_path_factory.mktemp("alice"), "alice@team")


def tls_for(server: LiveServer, member: Member | None):
    return client_context(member, server_cert(server))


def post_initialize(server: LiveServer, member: Member | None, **headers: str) -> httpx.Response:
    with httpx.Client(base_url=server.tls_base, verify=tls_for(server, member), timeout=30) as http:
        return http.post("/mcp", json=INITIALIZE, headers={"Accept": ACCEPT_BOTH, **headers})


def assert_refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["data"] == {"reason": reason}
    assert error["message"].startswith(f"Unauthorized: client certificate refused ({reason})")


def member_with(folder: Path, name: str, certificate_pem: bytes, key_path: Path) -> Member:
    cert_path = folder / f"{name}.crt"
    cert_path.write_bytes(certificate_pem)
    return Member(name, key_path, cert_path, "", "", "")


def certificate_signed_by(
    team_ca: ca.TeamCa, folder: Path, name: str, *, not_before: datetime, days: int = 30
) -> Member:
    """A certificate `team_ca` signs directly, outside any roster, for a key written under `folder`."""
    key_path, csr = new_member_key(folder, name)
    pem = ca.issue_certificate(
        team_ca,
        ca.inspect_csr(csr.encode()),
        common_name=name,
        serial=ca.random_serial(),
        not_before=not_before,
        days=days,
    )
    return member_with(folder, name, pem, key_path)


def last_caller(server: LiveServer, tool: str) -> str:
    return server.manage("shell", "-c", LAST_CALLER.format(tool=tool)).strip().splitlines()[-1]


# --- a certificate that passes, and the token fallback ------------------------------------------------


async def test_the_sdk_client_with_a_team_certificate_calls_a_tool_as_the_peer(mtls_server, alice):
    with anyio.fail_after(BOUND):
        async with streamable_client(mtls_server, mode="legacy", tls=tls_for(mtls_server, alice)) as client:
            status = (await client.call_tool("session.status", {})).structured_content
            info = (await client.call_tool("server_info", {})).structured_content

    assert status["owner"] == "peer:alice@team"
    assert status["client_label"].startswith("alice@team (certificate ")
    caller = await anyio.to_thread.run_sync(last_caller, mtls_server, "session.status")
    assert caller.startswith("peer:alice@team ")
    assert info["name"]


async def test_without_a_certificate_a_bearer_token_works_over_https(mtls_server):
    with anyio.fail_after(BOUND):
        async with streamable_client(
            mtls_server, mode="legacy", tls=tls_for(mtls_server, None), token=mtls_server.token
        ) as client:
            status = (await client.call_tool("session.status", {})).structured_content

    assert status["owner"] == "live"


def test_without_a_certificate_or_a_token_the_answer_asks_for_a_token(mtls_server):
    response = post_initialize(mtls_server, None)

    assert response.status_code == 401
    assert "Bearer" in response.json()["error"]["message"]


# --- each refusal, with its reason ----------------------------------------------------------------------


def test_a_certificate_of_an_unknown_ca_is_refused_even_with_a_valid_token(mtls_server, tmp_path):
    other = ca._team_ca_from_pem(*ca.create_ca("ed25519", common_name="Other Team CA"), where="a test")
    stranger = certificate_signed_by(other, tmp_path, "alice@team", not_before=datetime.now(UTC) - timedelta(minutes=1))

    assert_refused(post_initialize(mtls_server, stranger, **bearer(mtls_server.token)), "unknown_ca")


def test_a_certificate_of_the_team_ca_that_no_roster_lists_is_refused_as_unknown_peer(mtls_server, alice, tmp_path):
    team_ca = ca.load_ca(mtls_server.data_dir / "secrets" / "team-ca")
    stray = certificate_signed_by(
        team_ca, tmp_path, "mallory@team", not_before=datetime.now(UTC) - timedelta(minutes=1)
    )

    assert_refused(post_initialize(mtls_server, stray), "unknown_peer")


def test_an_expired_certificate_is_refused_as_expired(mtls_server, alice, tmp_path):
    team_ca = ca.load_ca(mtls_server.data_dir / "secrets" / "team-ca")
    old = certificate_signed_by(
        team_ca, tmp_path, "alice@team", not_before=datetime.now(UTC) - timedelta(days=5), days=1
    )

    assert_refused(post_initialize(mtls_server, old), "expired")


def test_a_revoked_certificate_is_refused_as_revoked_and_listed_in_the_crl(mtls_server, tmp_path):
    dave = issue_live(mtls_server, tmp_path, "dave@team")
    assert post_initialize(mtls_server, dave).status_code == 200

    revoke_by_approval(mtls_server, dave)

    assert_refused(post_initialize(mtls_server, dave, **bearer(mtls_server.token)), "revoked")
    crl = httpx.get(f"{mtls_server.base}/crl.pem", timeout=10)
    assert int(dave.serial, 16) in {entry.serial_number for entry in ca.x509.load_pem_x509_crl(crl.content)}


def test_a_certificate_listed_only_in_the_team_ca_s_crl_is_refused_as_revoked_crl(mtls_server, tmp_path):
    gina = issue_live(mtls_server, tmp_path, "gina@team")
    assert post_initialize(mtls_server, gina).status_code == 200
    # The CA revoked it and published a CRL saying so, before any roster listed the revocation.
    team_ca = ca.load_ca(mtls_server.data_dir / "secrets" / "team-ca")
    roster_dir = mtls_server.data_dir / "roster"
    current = store.read_published(roster_dir)
    now = datetime.now(UTC)
    crl = ca.sign_crl(
        team_ca, [(int(gina.serial, 16), now)], this_update=now, next_update=now + timedelta(days=7), crl_number=9999
    )
    store.publish(roster_dir, store.Published(current.peers_toml, current.revoked_toml, crl), sequence=9999)

    assert_refused(post_initialize(mtls_server, gina), "revoked_crl")


# --- revocation closes open streams ---------------------------------------------------------------------


def revoke_by_approval(approver: LiveServer, member: Member, *, asking: LiveServer | None = None) -> None:
    """A client asks for the revocation and the caretaker approves it over the operator REST API (on `approver`),
    typing the key's memorable ID; returns once the revocation is carried out."""
    asking = asking or approver
    with httpx.Client(base_url=asking.base, timeout=30) as http:
        headers = {**bearer(asking.token), "Accept": ACCEPT_BOTH}
        opened = http.post("/mcp", json=INITIALIZE, headers=headers)
        session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "team.revoke_peer", "arguments": {"peer": member.name, "reason": "laptop lost"}},
        }
        asked = http.post("/mcp", json=call, headers=session).json()["result"]["structuredContent"]
    approved = httpx.post(
        f"{approver.base}/api/confirmations/{asked['pending_id']}/approve",
        json={"typed_id": member.memorable_id},
        headers=bearer(approver.operator_token),  # type: ignore[attr-defined]
        timeout=30,
    )
    assert approved.status_code == 200, approved.text


@contextlib.asynccontextmanager
async def open_peer_stream(server: LiveServer, member: Member):
    """A GET /mcp stream of `member`'s session over mTLS; yields an event set when the server ends it."""
    ended = anyio.Event()
    async with httpx.AsyncClient(base_url=server.tls_base, verify=tls_for(server, member), timeout=30) as http:
        headers = {"Accept": ACCEPT_BOTH}
        opened = await http.post("/mcp", json=INITIALIZE, headers=headers)
        assert opened.status_code == 200, opened.text
        session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        stream_headers = {**session, "Accept": "text/event-stream"}
        opened_stream = anyio.Event()

        async def follow() -> None:
            async with http.stream("GET", "/mcp", headers=stream_headers, timeout=None) as response:
                assert response.status_code == 200
                async for _ in response.aiter_bytes():
                    opened_stream.set()
            ended.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            with anyio.fail_after(BOUND):
                await opened_stream.wait()
            yield ended
            tasks.cancel_scope.cancel()


async def test_an_open_stream_of_a_peer_ends_within_a_second_of_its_revocation(mtls_server, tmp_path):
    erin = await anyio.to_thread.run_sync(issue_live, mtls_server, tmp_path, "erin@team")

    async with open_peer_stream(mtls_server, erin) as ended:
        await anyio.to_thread.run_sync(revoke_by_approval, mtls_server, erin)
        with anyio.fail_after(STREAM_END_AFTER_REVOCATION):
            await ended.wait()


@pytest.mark.scaleout
@pytest.mark.skipif(not scaleout_configured(), reason="needs PostgreSQL and Redis: set DATABASE_URL and REDIS_URL")
async def test_a_revocation_approved_in_one_process_ends_the_peer_s_stream_in_another(mtls_server, tmp_path):
    frank = await anyio.to_thread.run_sync(issue_live, mtls_server, tmp_path, "frank@team")
    with run_server(mtls_server.env, mtls_server.token, mtls_server.data_dir, tls=True) as second:
        async with open_peer_stream(second, frank) as ended:
            await anyio.to_thread.run_sync(revoke_by_approval, mtls_server, frank)
            with anyio.fail_after(STREAM_END_AFTER_REVOCATION):
                await ended.wait()
