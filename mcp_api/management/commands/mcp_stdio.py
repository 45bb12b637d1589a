"""`python manage.py mcp_stdio --url URL`: an MCP stdio server that relays to a running Forge server.

Clients that only start local (stdio) servers, such as Claude Desktop, run this command. It reads
newline-delimited JSON-RPC messages on stdin and posts each to the server's Streamable HTTP endpoint
with the client token, writes every answer (JSON or SSE) to stdout as one line, keeps the session id
the server gave, relays the session's GET stream (server notifications) to stdout, and ends the session
when stdin closes. The running server stays the single writer and does all checks; this bridge holds
no state but the session id. The token comes from `--token-file` or FORGE_MCP_TOKEN, never the command
line (other users can read a process's arguments).

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
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import httpx
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from django.core.management.base import BaseCommand, CommandError

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
                self.emit(message)
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
                self.emit(message)

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


def _json_or_none(text: str) -> Any:
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


class Command(BaseCommand):
    help = "Serve MCP over stdio by relaying to a running Forge server's Streamable HTTP endpoint."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/mcp", help="the server's /mcp URL")
        parser.add_argument("--token-file", type=Path, default=None, help="a file holding the client token")
        parser.add_argument("--cert", type=Path, default=None, help="your team certificate (PEM), for HTTPS")
        parser.add_argument("--key", type=Path, default=None, help="the private key of --cert (PEM, unencrypted)")
        parser.add_argument(
            "--ca", type=Path, default=None, help="the server's certificate or a CA bundle (PEM) to check it against"
        )

    def handle(
        self,
        *args,
        url: str,
        token_file: Path | None,
        cert: Path | None,
        key: Path | None,
        ca: Path | None,
        **options,
    ) -> None:
        token = os.environ.get("FORGE_MCP_TOKEN", "")
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise CommandError(f"cannot read {token_file}: {exc.strerror}") from None
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
                        bridge.emit(
                            {
                                "jsonrpc": "2.0",
                                "id": None,
                                "error": {
                                    "code": -32603,
                                    "message": unreachable(url, exc),
                                },
                            }
                        )
        finally:
            bridge.close()
