"""`python manage.py mcp_stdio`: an MCP stdio server for clients that only start local servers (Claude Desktop).

It reads newline-delimited JSON-RPC messages on stdin and writes every answer to stdout, one line each. Its modes
(docs/PROTOCOL.md, *stdio*):

- `--url URL`: relays every message to that server's Streamable HTTP endpoint with the client token (JSON or
  SSE answers, the session id the server gave, the session's GET stream of server notifications), and ends the
  session when stdin closes.
- no `--url`: the same, to the server of this data folder, which `runmcp`'s instance record names
  (`forge_core.instances`); the record is looked up again before every message, so a bridge started before its
  server answers unbound (`mcp_api.stdio_local`) and connects once the server is up, and goes back to unbound
  when it stops. With several servers of one data folder it refuses to choose.
- `--offline-project FILE`: the project reads over a local PLCopen file, never connecting (`mcp_api.stdio_local`).

The running server stays the single writer and does all checks; a change cut off by a broken connection is
reported, never sent again. The token comes from `--token-file` (refused unless 0600) or FORGE_MCP_TOKEN, never
the command line (other users can read a process's arguments).

Over HTTPS (`--url https://...`) the bridge checks the server against `--ca` (the server's own certificate, which
the console's dashboard and `server_info` describe, or a CA bundle; the system's CAs without it). A team member
presents the certificate the caretaker issued with `--cert` and `--key` (PEM files): the server then knows the
member as `peer:NAME` from the certificate alone, and no token is needed. The files are checked before anything
is sent (readable, PEM, the key the certificate's, not expired), so a mistake is one line, not a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from forge_core import instances
from mcp_api.registry import find_tool
from mcp_api.stdio_local import CONNECTED, OFFLINE, STATUS, UNBOUND, LocalServer, OfflineProject, tool_answer
from projects.services import ProjectRefused

ACCEPT = "application/json, text/event-stream"


class Bridge:
    def __init__(self, url: str, token: str, out: IO[str], tls: ssl.SSLContext | None = None) -> None:
        self.url = url
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=httpx.Timeout(30.0, read=None),
            verify=tls if tls is not None else True,
        )
        self.out = out
        self.lock = threading.Lock()
        self.session_id: str | None = None
        self.revision: str | None = None
        self.rewrite: Callable[[Any], Any] = lambda message: message  # what the answers pass through

    def emit(self, message: Any) -> None:
        with self.lock:
            self.out.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.out.flush()

    def headers(self) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.revision:
            headers["MCP-Protocol-Version"] = self.revision
        return headers

    def relay(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            self.emit(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32700, "message": "Parse error: one JSON-RPC message per line."},
                }
            )
            return
        with self.http.stream("POST", self.url, content=line, headers=self.headers()) as response:
            if isinstance(message, dict) and message.get("method") == "initialize" and response.status_code == 200:
                self.session_id = response.headers.get("mcp-session-id")
            self.forward(response)
        if isinstance(message, dict) and message.get("method") == "notifications/initialized" and self.session_id:
            threading.Thread(target=self.listen, name="mcp-stdio-stream", daemon=True).start()

    def forward(self, response: httpx.Response) -> None:
        kind = response.headers.get("content-type", "")
        if kind.startswith("text/event-stream"):
            for message in sse_messages(response.iter_lines()):
                self.note(message)
                self.emit(self.rewrite(message))
        elif response.status_code != 202:
            body = response.read()
            if body:
                try:
                    message = json.loads(body)
                except ValueError:
                    message = {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32603,
                            "message": f"The server answered HTTP {response.status_code} without JSON.",
                        },
                    }
                self.note(message)
                self.emit(self.rewrite(message))

    def open_session(self, initialize: bytes) -> None:
        """Initialize a session with the client's own initialize line, answering nothing to the client (it was
        answered when it came), then say initialized and follow the session's stream."""
        with self.http.stream("POST", self.url, content=initialize, headers=self.headers()) as response:
            if response.status_code != 200:
                raise httpx.HTTPStatusError("initialize refused", request=response.request, response=response)
            self.session_id = response.headers.get("mcp-session-id")
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                for message in sse_messages(response.iter_lines()):
                    self.note(message)
            else:
                self.note(_json_or_none(response.read()))
        self.relay(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())

    def note(self, message: Any) -> None:
        if (
            isinstance(message, dict)
            and isinstance(message.get("result"), dict)
            and "protocolVersion" in message["result"]
        ):
            self.revision = message["result"]["protocolVersion"]

    def listen(self) -> None:
        """Relay the session's GET stream (server notifications) until it or the bridge ends."""
        try:
            headers = {**self.headers(), "Accept": "text/event-stream"}
            with self.http.stream("GET", self.url, headers=headers) as response:
                if response.status_code == 200:
                    for message in sse_messages(response.iter_lines()):
                        self.emit(message)
        except httpx.HTTPError:
            pass  # the stream ended (session deleted, server gone): requests still work without it

    def close(self) -> None:
        if self.session_id:
            with contextlib.suppress(httpx.HTTPError):  # the bridge ends either way
                self.http.delete(self.url, headers=self.headers())
        self.http.close()


def sse_messages(lines) -> Any:
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                message = _json_or_none("\n".join(data))
                if message is not None:
                    yield message
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def _json_or_none(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def tls_context(url: str, cert: Path | None, key: Path | None, ca: Path | None) -> ssl.SSLContext | None:
    """The TLS settings of the bridge's client: the server checked against `ca` (else the system's CAs), the
    member's certificate and key presented; None when none of them is given. Raises CommandError saying which
    file is wrong and how."""
    if cert is None and key is None and ca is None:
        return None
    if not url.lower().startswith("https://"):
        raise CommandError("--cert, --key and --ca are for an https:// URL; give the server's HTTPS address.")
    if (cert is None) != (key is None):
        raise CommandError("--cert and --key go together: the certificate the caretaker issued and its private key.")
    context = ssl.create_default_context()
    if ca is not None:
        authorities = _pem_file(ca, "--ca")
        try:
            x509.load_pem_x509_certificates(authorities)
            context = ssl.create_default_context(cadata=authorities.decode("ascii"))
        except (ValueError, ssl.SSLError):
            raise CommandError(
                f"--ca {ca} holds no PEM certificate; give the server's certificate or a CA bundle (PEM)."
            ) from None
    if cert is not None and key is not None:
        certificate = _client_certificate(cert, key)
        if certificate.not_valid_after_utc <= datetime.now(UTC):
            raise CommandError(
                f"the certificate in {cert} expired on {certificate.not_valid_after_utc:%Y-%m-%d}; "
                "ask the caretaker for a new one."
            )
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise CommandError(f"--cert {cert} with --key {key} cannot be used: {exc.reason or exc}.") from None
    return context


def _client_certificate(cert: Path, key: Path) -> x509.Certificate:
    try:
        certificate = x509.load_pem_x509_certificate(_pem_file(cert, "--cert"))
    except ValueError:
        raise CommandError(f"--cert {cert} is not a PEM certificate.") from None
    try:
        private_key = serialization.load_pem_private_key(_pem_file(key, "--key"), password=None)
    except TypeError:
        raise CommandError(f"--key {key} is encrypted; give the key without a passphrase.") from None
    except (ValueError, UnsupportedAlgorithm):
        raise CommandError(f"--key {key} is not a PEM private key.") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if private_key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ) != certificate.public_key().public_bytes(serialization.Encoding.DER, public):
        raise CommandError(f"--key {key} is not the key of the certificate in --cert {cert}; give the pair.")
    return certificate


def _pem_file(path: Path, option: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {option} {path}: {exc.strerror}") from None


def unreachable(url: str, exc: httpx.HTTPError) -> str:
    """What the client is told when a request did not reach the server, TLS failures named as such."""
    reason: BaseException | None = exc
    while reason is not None and not isinstance(reason, ssl.SSLError):
        reason = reason.__cause__ or reason.__context__  # httpx wraps httpcore's error, which wraps ssl's
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (
            f"The Forge server at {url} failed the certificate check ({reason.verify_message}): "
            "give its certificate with --ca, and check its fingerprint against the console's dashboard."
        )
    if isinstance(reason, ssl.SSLError):
        return f"The TLS handshake with the Forge server at {url} failed ({reason.reason or reason})."
    return f"The Forge server at {url} cannot be reached ({type(exc).__name__}); is it running?"


class Dynamic:
    """No `--url`: the server of this data folder, found through its instance record, again before every message.

    While there is none (or several), this answers as the unbound `LocalServer`; when one appears, the next message
    opens a session with it (the client's own initialize, replayed), tells the client the tool list changed, and
    goes to it. When the server goes away, the next message is answered locally again. A call cut off mid-way is
    reported, never sent again: the server may have carried it out.
    """

    def __init__(self, token: str, out: IO[str], data_dir: Path) -> None:
        self.token = token
        self.out = out
        self.data_dir = data_dir
        self.lock = threading.Lock()
        self.local = LocalServer(UNBOUND)
        self.bridge: Bridge | None = None
        self.instance: instances.Instance | None = None
        self.initialize: bytes | None = None  # the client's initialize line, replayed to each server
        self.status_calls: set[Any] = set()  # ids of session.status calls the server answers
        self.replayed = False  # the session was opened with a replayed initialize (the client's came earlier)

    def emit(self, message: Any) -> None:
        with self.lock:
            self.out.write(json.dumps(message, separators=(",", ":")) + "\n")
            self.out.flush()

    def handle(self, line: bytes) -> None:
        message = _json_or_none(line)
        if not isinstance(message, dict):
            if message is None:
                self.emit({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": PARSE_ERROR}})
            else:
                self.emit(_invalid_request())
            return
        method = message.get("method")
        if method == "initialize":
            self.initialize = line
        self.follow_records(replay=method != "initialize")
        if self.bridge is not None and self.send(line, message):
            return
        answer = self.local.answer(message)
        if answer is not None:
            self.emit(answer)

    def follow_records(self, *, replay: bool) -> None:
        """Connect to, stay with or leave the server, as the instance records say now."""
        live = instances.live_instances(self.data_dir)
        if self.instance is not None and any(found.pid == self.instance.pid for found in live):
            return  # still there (even if another one started since: this session stays with its server)
        if self.bridge is not None:
            self.leave("The Forge server went away; this session answers locally until it is back.")
        if len(live) > 1:
            urls = ", ".join(found.mcp_url for found in live)
            self.local.several = (
                f"{len(live)} Forge servers of this data folder are running ({urls}); this bridge will not choose "
                "one. Stop all but one, or start mcp_stdio with --url and the one you mean."
            )
            return
        self.local.several = ""
        if live:
            self.promote(live[0], replay=replay and self.initialize is not None)

    def promote(self, instance: instances.Instance, *, replay: bool) -> None:
        """Connect to `instance`; with `replay`, open its session now with the client's earlier initialize (the
        client was answered by the unbound mode so far) and tell the client that its tool list changed."""
        bridge = Bridge(instance.mcp_url, self.token, self.out)
        bridge.lock = self.lock
        bridge.rewrite = self.rewrite
        if replay and self.initialize is not None:
            try:
                bridge.open_session(self.initialize)
            except httpx.HTTPError as exc:
                bridge.close()
                # Not ready yet, refusing, or HTTPS only (this mode speaks plain HTTP to the loopback server): the
                # next message looks again; meanwhile the unbound answers say why.
                self.local.note = unreachable(instance.mcp_url, exc) + (
                    " This mode speaks plain HTTP: for an HTTPS-only server give --url and --ca."
                    if instance.mcp_url.startswith("https://")
                    else ""
                )
                return
        self.bridge, self.instance, self.replayed = bridge, instance, replay
        self.local.note = ""
        if replay:
            self.emit({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    def leave(self, note: str) -> None:
        if self.bridge is not None:
            self.bridge.close()
        self.bridge, self.instance = None, None
        self.local.note = note

    def send(self, line: bytes, message: dict[str, Any]) -> bool:
        """Relay one message to the server; False when it could not be sent (answer it locally instead)."""
        assert self.bridge is not None
        if message.get("method") == "notifications/initialized" and self.replayed:
            return True  # said to the server when the session was opened
        if message.get("method") == "tools/call" and (message.get("params") or {}).get("name") == STATUS:
            self.status_calls.add(message.get("id"))
        try:
            self.bridge.relay(line)
        except httpx.ConnectError:
            self.leave("The Forge server could not be reached; this session answers locally until it is back.")
            return False  # nothing reached the server
        except httpx.HTTPError:
            self.leave("A call was cut off when the Forge server went away; it was not sent again.")
            if message.get("id") is not None:
                self.emit(interrupted(message))
        return True

    def rewrite(self, message: Any) -> Any:
        """The server's answers, with the bridge's mode added where the client asks for it."""
        if not isinstance(message, dict) or not isinstance(message.get("result"), dict):
            return message
        result = message["result"]
        url = self.instance.mcp_url if self.instance is not None else ""
        if "protocolVersion" in result and isinstance(result.get("instructions"), str):
            result["instructions"] = (
                f"CONNECTED through mcp_stdio to the Forge server at {url} (found by its instance record). "
                + result["instructions"]
            )
        elif message.get("id") in self.status_calls and isinstance(result.get("structuredContent"), dict):
            self.status_calls.discard(message.get("id"))
            status = {"mode": CONNECTED, "server": url, **result["structuredContent"]}
            result.update(tool_answer(status, is_error=bool(result.get("isError"))))
        return message

    def close(self) -> None:
        if self.bridge is not None:
            self.bridge.close()


PARSE_ERROR = "Parse error: one JSON-RPC message per line."


def _invalid_request() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid request: send a JSON object."}}


def interrupted(message: dict[str, Any]) -> dict[str, Any]:
    """The answer to a request the server may or may not have carried out before the connection broke."""
    params = message.get("params")
    name = params.get("name") if isinstance(params, dict) and message.get("method") == "tools/call" else None
    tool = find_tool(name)
    if tool is None:
        return {
            "jsonrpc": "2.0",
            "id": message.get("id"),
            "error": {
                "code": -32603,
                "message": "The Forge server went away during this request; ask again (this session reconnects by "
                "itself when it is back).",
            },
        }
    if tool.read_only:
        said = "Ask again: this session reconnects by itself when the server is back."
    else:
        said = (
            f"{tool.name} changes something and may have been carried out before the connection broke, so it is "
            "not sent again. When the server is back, check what happened (draft.status, change_group.describe, "
            "editor.pending_confirmations) before calling it again."
        )
    refusal = {"error": "FORGE_ERR_INTERRUPTED", "message": f"The Forge server went away during {tool.name}. {said}"}
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": tool_answer(refusal, is_error=True)}


class Command(BaseCommand):
    help = (
        "Serve MCP over stdio: relay to the Forge server (--url, else the one this data folder's instance record "
        "names, found again before every message), or read one local PLCopen file with --offline-project."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--url",
            default=None,
            help="the server's /mcp URL; without it, the running server of this data folder (FORGE_DATA_DIR)",
        )
        parser.add_argument("--token-file", type=Path, default=None, help="a file holding the client token (0600)")
        parser.add_argument(
            "--offline-project",
            type=Path,
            default=None,
            help="serve the read tools over this PLCopen file, read-only, never connecting to a server",
        )
        parser.add_argument("--cert", type=Path, default=None, help="your team certificate (PEM), for HTTPS")
        parser.add_argument("--key", type=Path, default=None, help="the private key of --cert (PEM, unencrypted)")
        parser.add_argument(
            "--ca", type=Path, default=None, help="the server's certificate or a CA bundle (PEM) to check it against"
        )

    def handle(
        self,
        *args,
        url: str | None,
        token_file: Path | None,
        offline_project: Path | None,
        cert: Path | None,
        key: Path | None,
        ca: Path | None,
        **options,
    ) -> None:
        if offline_project is not None:
            if url is not None or cert is not None or key is not None or ca is not None:
                raise CommandError(
                    "--offline-project never connects to a server: drop --url, --cert, --key and --ca, or drop "
                    "--offline-project to connect."
                )
            serve_offline(offline_project)
            return
        token = client_token(token_file)
        if url is None:
            if cert is not None or key is not None or ca is not None:
                raise CommandError("--cert, --key and --ca are for an https:// server: give its --url too.")
            if not token:
                raise CommandError(
                    "Give the client token with --token-file F (a 0600 file) or the FORGE_MCP_TOKEN variable."
                )
            dynamic = Dynamic(token, sys.stdout, Path(settings.FORGE_DATA_DIR))
            try:
                for line in sys.stdin.buffer:
                    if line.strip():
                        dynamic.handle(line.strip())
            finally:
                dynamic.close()
            return
        tls = tls_context(url, cert, key, ca)
        if not token and cert is None:
            raise CommandError(
                "Give the client token with --token-file F or the FORGE_MCP_TOKEN variable "
                "(or, over HTTPS, your team certificate with --cert and --key)."
            )
        bridge = Bridge(url, token, sys.stdout, tls)
        try:
            # Lines are relayed as the bytes they are: the server screens them (a line that is not UTF-8, or
            # carries a lone surrogate, is its refusal to give, not a crash of this bridge).
            for line in sys.stdin.buffer:
                if line.strip():
                    try:
                        bridge.relay(line.strip())
                    except httpx.HTTPError as exc:
                        message = _json_or_none(line)
                        if isinstance(message, dict) and not isinstance(exc, httpx.ConnectError):
                            bridge.emit(interrupted(message))  # a change cut off is reported, never sent again
                            continue
                        bridge.emit(
                            {
                                "jsonrpc": "2.0",
                                "id": message.get("id") if isinstance(message, dict) else None,
                                "error": {"code": -32603, "message": unreachable(url, exc)},
                            }
                        )
        finally:
            bridge.close()


def client_token(token_file: Path | None) -> str:
    """The client token: from `token_file` (refused unless 0600), else FORGE_MCP_TOKEN, else ''."""
    if token_file is None:
        return os.environ.get("FORGE_MCP_TOKEN", "")
    try:
        return instances.read_token_file(token_file)
    except instances.LooseTokenFile as exc:
        raise CommandError(str(exc)) from None
    except OSError as exc:
        raise CommandError(f"cannot read {token_file}: {exc.strerror}") from None


def serve_offline(path: Path) -> None:
    """The offline mode: the read tools over one local file, until stdin closes."""
    try:
        project = OfflineProject.open(path)
    except OSError as exc:
        raise CommandError(f"cannot read --offline-project {path}: {exc.strerror}") from None
    except ProjectRefused as exc:
        raise CommandError(f"--offline-project {path} cannot be served: {exc}") from None
    local = LocalServer(OFFLINE, project)
    out = sys.stdout
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        message = _json_or_none(line)
        if isinstance(message, dict):
            answer = local.answer(message)
        else:
            answer = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": PARSE_ERROR}}
        if answer is not None:
            out.write(json.dumps(answer, separators=(",", ":")) + "\n")
            out.flush()
