"""The team tools (DESIGN sections 10 and 13): the peers with their fingerprint art, and, while this server is
the team's active caretaker, certificate requests, revocations, rotations and the team's setup.

`team.list_peers` answers any token. The others need an active caretaker (`caretaker.activation`): they are
in `tools/list` only while it is active, and a call without one is refused with FORGE_ERR_NOT_CARETAKER naming
what is missing. A request never issues anything by itself: it becomes a pending confirmation the caretaker
approves in the console by typing the key's memorable ID, and the one executor then writes the roster; the
client learns the outcome (the certificate, its memorable ID and randomart) from `editor.confirm`, or at once
when it streams and sent a progress token.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from access import limits, tls
from caretaker import services
from caretaker.capability import RosterCapability
from confirmations.services import do_create_confirmation
from forge_core.errors import Refusal
from mcp_api.protocol import CallContext
from mcp_api.registry import Arguments, Need, NoArguments, tool
from mcp_api.tools.common import console_url

CARETAKER_NEEDS = frozenset({Need.TOKEN, Need.CARETAKER})
PEM = Field(max_length=16_384)


def _suspend(ctx: CallContext, proposal: services.Proposal, arguments: dict[str, Any]) -> dict[str, Any]:
    """Turn a caretaker proposal into a pending confirmation and answer FORGE_ERR_CONFIRMATION_REQUIRED."""
    limits.check_pending_confirmation_cap(ctx.token)
    confirmation = do_create_confirmation(
        tool=proposal.tool,
        arguments=arguments,
        question=f"{ctx.called_by} ({ctx.token.label or 'a client'}) asks: {proposal.question}",
        preview={**proposal.preview, "result": {}},
        principal=ctx.token.owner,
        session_id=ctx.session_id,
        client_label=ctx.token.label,
        project="",
        capability=RosterCapability.name,
        method=proposal.method,
        target=proposal.target,
        intent=proposal.intent,
        base_fingerprint=proposal.base_fingerprint,
        result_digest=proposal.result_digest,
        label=proposal.label,
        requires_typed_id=True,
        key_memorable_id=proposal.key_memorable_id,
    )
    ctx.awaiting = str(confirmation.id)
    typed = proposal.key_memorable_id or confirmation.memorable_id
    raise Refusal(
        "FORGE_ERR_CONFIRMATION_REQUIRED",
        f"The team's caretaker must approve this in the Forge console ({console_url(confirmation.id)}) by typing "
        f"the memorable ID {typed}; it expires at {confirmation.expires_at.isoformat()}. Tell the user to compare "
        "that ID with the one their own key shows. Call editor.confirm with the pending_id for the outcome.",
        pending_id=str(confirmation.id),
        memorable_id=typed,
        expires_at=confirmation.expires_at.isoformat(),
        console_url=console_url(confirmation.id),
        preview=proposal.preview,
    )


@tool("team.list_peers", title="Team peers")
def team_list_peers(ctx: CallContext, args: NoArguments) -> dict[str, Any]:
    """The team's peers: name, role, endpoint, certificate fingerprint and serial, the certified key's
    memorable ID and randomart, whether it is revoked and when it expires."""
    return {"peers": services.list_peers(), "caretaker_active": services.activation.is_caretaker()}


class RequestCertArguments(Arguments):
    enrollment_code: str = Field(
        max_length=200, description="The one-time enrollment code the caretaker gave you (fenr_...)."
    )
    csr: str = Field(
        max_length=16_384,
        description="A PEM certificate signing request for your key: Ed25519, RSA of 3072 bits or more, or ECDSA "
        "P-256/P-384/P-521. Subject and SAN are set by the caretaker's record of you, not from the CSR.",
    )
    session_handle: str | None = Field(default=None, max_length=64, description="Stateless clients: your handle.")


@tool(
    "team.request_cert",
    title="Request a team certificate",
    arguments=RequestCertArguments,
    needs=CARETAKER_NEEDS,
    read_only=False,
    idempotent=False,
    secret_arguments=frozenset({"enrollment_code"}),
)
def team_request_cert(ctx: CallContext, args: RequestCertArguments) -> dict[str, Any]:
    """Ask the team's caretaker for a client certificate with a one-time enrollment code and a CSR. Nothing is
    issued by this call: the caretaker approves in the Forge console by typing your key's memorable ID; then
    editor.confirm(pending_id) gives the certificate, its memorable ID and randomart. A code works once."""
    # Checked before the code is redeemed: a refusal answers the call and what came before it commits, so a
    # cap reached after redeeming would use the code up with no request made.
    limits.check_pending_confirmation_cap(ctx.token)
    proposal = services.propose_issuance(args.csr, code=args.enrollment_code, requested_by=ctx.called_by)
    return _suspend(
        ctx, proposal, {"csr_sha256": proposal.preview["key_fingerprint"], "peer": proposal.intent["peer"]["name"]}
    )


class RevokeArguments(Arguments):
    peer: str = Field(max_length=100, description="The peer's name, as team.list_peers shows it.")
    reason: str = Field(max_length=200, description="Why (key lost, member left, ...); recorded in revoked.toml.")
    session_handle: str | None = Field(default=None, max_length=64, description="Stateless clients: your handle.")


@tool(
    "team.revoke_peer",
    title="Revoke a peer's certificate",
    arguments=RevokeArguments,
    needs=CARETAKER_NEEDS,
    read_only=False,
    destructive=True,
    idempotent=False,
)
def team_revoke_peer(ctx: CallContext, args: RevokeArguments) -> dict[str, Any]:
    """Ask the caretaker to revoke a peer's current certificate: once approved it is in revoked.toml and the
    CRL, and the roster is signed again. Nothing is revoked by this call itself."""
    proposal = services.propose_revocation(args.peer, args.reason, requested_by=ctx.called_by)
    return _suspend(ctx, proposal, {"peer": args.peer, "reason": args.reason})


class RotateArguments(Arguments):
    peer: str = Field(max_length=100, description="Your peer name.")
    csr: str = Field(max_length=16_384, description="A PEM CSR for your new key.")
    proof: str = Field(
        max_length=4_096,
        description="Base64 signature, made with your CURRENT certificate's private key, over the bytes "
        "'forge-rotate-cert:' followed by the new CSR in DER (Ed25519; RSA-PSS-SHA256; ECDSA-SHA256).",
    )
    session_handle: str | None = Field(default=None, max_length=64, description="Stateless clients: your handle.")


@tool(
    "team.rotate_cert",
    title="Rotate your team certificate",
    arguments=RotateArguments,
    needs=CARETAKER_NEEDS,
    read_only=False,
    idempotent=False,
)
def team_rotate_cert(ctx: CallContext, args: RotateArguments) -> dict[str, Any]:
    """Replace your certificate with one for a new key, proving you hold the current one. Once the caretaker
    approves, the new certificate is issued and the old one revoked in the same signed roster."""
    proposal = services.propose_rotation(args.peer, args.csr, args.proof, requested_by=ctx.called_by)
    return _suspend(ctx, proposal, {"peer": args.peer, "new_key": proposal.preview["key_fingerprint"]})


@tool("team.export_setup", title="Export the team setup", needs=CARETAKER_NEEDS)
def team_export_setup(ctx: CallContext, args: NoArguments) -> dict[str, Any]:
    """Everything a member needs to join, as one document: the team CA certificate with its fingerprint art,
    the current signed peers.toml and revoked.toml, the CRL, this server's HTTPS certificate when it serves
    one, and client configuration snippets for a team certificate."""
    from django.conf import settings

    return services.export_setup(public_url=settings.FORGE_PUBLIC_URL, server_tls=tls.served())
