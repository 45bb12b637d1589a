"""HTTPS beside (or instead of) plain HTTP, with daphne still the HTTP server: the TLS listener and how a client
certificate reaches the application (docs/TLS.md).

daphne listens on Twisted endpoint strings, and Twisted's `ssl:` endpoint cannot ask for a client certificate
or hand it on. So `runmcp` gives daphne's own HTTP factory a second port here, wrapped in Twisted's TLS
(`TLSMemoryBIOFactory`) with a connection creator of our own:

- TLS 1.2 and 1.3 only, the system OpenSSL's default ciphers, no compression, no renegotiation;
- while the trust store holds a CA, each connection asks for a client certificate without requiring one
  (the reference's QueryPeer) and accepts whatever is presented, so that the application, not a dropped
  handshake, says why a certificate is refused (`access.peers`);
- `ForgeServer.create_application` puts the presented chain into the request's ASGI scope as the ASGI TLS
  extension (`scope["extensions"]["tls"]["client_cert_chain"]`), from the TLS connection itself. Nothing a
  client writes in a header can reach it: daphne builds the rest of the scope, and proxy headers are off.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from daphne.server import Server
from OpenSSL import SSL, crypto
from twisted.internet import reactor
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator, ISSLTransport
from zope.interface import implementer

from access.tls import ServerCertificate
from caretaker import trust

SESSION_CONTEXT = b"forge-mcp"


def _accept_any(connection: SSL.Connection, certificate: crypto.X509, errno: int, depth: int, ok: int) -> bool:
    # The handshake takes any certificate; access.peers checks it and refuses with a reason the client can read.
    return True


def server_context(certificate: ServerCertificate) -> SSL.Context:
    """The OpenSSL context every TLS connection is made from."""
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    context.set_min_proto_version(SSL.TLS1_2_VERSION)
    context.set_max_proto_version(SSL.TLS1_3_VERSION)
    context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_NO_RENEGOTIATION | SSL.OP_CIPHER_SERVER_PREFERENCE)
    # No cipher list of our own: the system OpenSSL's defaults (and the distribution's security level) apply.
    context.use_certificate_chain_file(str(certificate.cert_path))
    context.use_privatekey_file(str(certificate.key_path))
    context.check_privatekey()
    # Sessions resume only within this server; OpenSSL refuses resumption on a verifying connection without it.
    context.set_session_id(SESSION_CONTEXT)
    return context


@implementer(IOpenSSLServerConnectionCreator)
class ServerTls:
    """Makes each TLS connection: from the server context, asking for a client certificate while the trust
    store holds a CA (looked at again when its files change)."""

    def __init__(self, certificate: ServerCertificate, trust_folder: Path) -> None:
        self.context = server_context(certificate)
        self.trust_folder = trust_folder
        self._trust_key: tuple[Any, ...] | None = None
        self.mutual = False

    def serverConnectionForTLS(self, tlsProtocol: Any) -> SSL.Connection:
        self._follow_trust_store()
        connection = SSL.Connection(self.context, None)
        if self.mutual:
            connection.set_verify(SSL.VERIFY_PEER, _accept_any)
        return connection

    def _follow_trust_store(self) -> None:
        try:
            key = tuple(
                sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in self.trust_folder.glob("*.pem"))
            )
        except OSError:
            key = ()
        if key == self._trust_key:
            return
        self._trust_key = key
        cas = trust.trusted_certificates()
        self.mutual = bool(cas)
        # Which CAs to present a certificate from (clients that hold several pick by it).
        self.context.set_client_ca_list([crypto.X509.from_cryptography(c).get_subject() for c in cas])


def tls_scope(transport: Any) -> dict[str, Any] | None:
    """The ASGI TLS extension for a request on `transport`, or None when it is not TLS; worked out once per
    connection (a connection carries many requests, and its certificate never changes)."""
    if not ISSLTransport.providedBy(transport):
        return None
    cached = getattr(transport, "_forge_tls_scope", None)
    if cached is not None:
        return cached
    connection: SSL.Connection = transport.getHandle()
    leaf = connection.get_peer_certificate(as_cryptography=True)
    chain: list[x509.Certificate] = []
    if leaf is not None:
        # On the server side OpenSSL's peer chain may or may not hold the leaf; it goes first, once.
        chain = [leaf] + [c for c in connection.get_peer_cert_chain(as_cryptography=True) or [] if c != leaf]
    found = {
        "server_cert": None,
        "client_cert_chain": [c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in chain],
        "client_cert_name": leaf.subject.rfc4514_string() if leaf is not None else None,
        "client_cert_error": None,
        "tls_version": connection.get_protocol_version(),
        "cipher_suite": None,
    }
    transport._forge_tls_scope = found
    return found


class ForgeServer(Server):
    """daphne's server, with a TLS listener of its own beside the endpoint strings (there may be none of those:
    HTTPS only) and the TLS extension in each HTTP request's scope."""

    def __init__(self, *, endpoints: list[str], tls: tuple[str, int, ServerTls] | None, **kwargs: Any) -> None:
        # daphne refuses to start without an endpoint string; with HTTPS only, ours stands in for them.
        super().__init__(endpoints=endpoints or ["tls-only"], **kwargs)
        self.endpoints = endpoints
        self.tls = tls
        ready: Callable[[], None] | None = kwargs.get("ready_callable")

        def listen_then_ready() -> None:
            self.listen_tls()
            if ready is not None:
                ready()

        self.ready_callable = listen_then_ready

    def listen_tls(self) -> None:
        if self.tls is None:
            return
        host, port, creator = self.tls
        endpoint = SSL4ServerEndpoint(reactor, port, creator, interface=host.strip("[]"))
        listener = endpoint.listen(self.http_factory)
        listener.addCallback(self.listen_success)
        listener.addErrback(self.listen_error)
        self.listeners.append(listener)

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        channel = getattr(protocol, "channel", None)
        extension = tls_scope(getattr(channel, "transport", None))
        if extension is not None:
            scope.setdefault("extensions", {})["tls"] = extension
        return super().create_application(protocol, scope)
