"""Client tokens: stored as their digest, audited by id and label (never the raw value or digest), and never
taken for an operator token."""

from __future__ import annotations

import pytest

from access.models import ClientToken
from access.services import authenticate_token, do_create_token, do_revoke_token, token_digest
from audit.models import AuditEvent, EventKind
from console.operator_tokens import do_create_operator_token

pytestmark = pytest.mark.django_db


def test_a_client_token_is_stored_as_its_digest_and_its_creation_audited_by_id_and_label(cast):
    new = do_create_token(owner=cast.caretaker.user, label="laptop", acting_user="olivia")

    stored = ClientToken.objects.get(pk=new.token.pk)
    assert new.raw.startswith("fmcp_")
    assert (stored.digest, stored.prefix) == (token_digest(new.raw), new.raw[:12])
    created = AuditEvent.objects.filter(kind=EventKind.TOKEN_CREATED).order_by("-seq").first()
    assert (created.called_by, created.client_label, created.outcome, created.arguments) == (
        "olivia",
        "laptop",
        "created",
        {
            "token_id": new.token.pk,
            "kind": "client",
            "label": "laptop",
            "owner": "carla",
            "prefix": new.raw[:12],
            "expires_at": "",
        },
    )


def test_revoking_a_client_token_audits_which_token_it_was_once(cast):
    token = cast.caretaker.token

    do_revoke_token(token, acting_user="olivia")
    do_revoke_token(token, acting_user="olivia")

    assert token.revoked_at is not None
    revoked = AuditEvent.objects.filter(kind=EventKind.TOKEN_REVOKED).get()
    assert (revoked.called_by, revoked.client_label, revoked.outcome, revoked.arguments) == (
        "olivia",
        "carla-client",
        "revoked",
        {"token_id": token.pk, "kind": "client", "label": "carla-client", "owner": "carla", "prefix": token.prefix},
    )
    assert cast.caretaker.raw_token not in revoked.arguments_json
    assert token.digest not in revoked.arguments_json


def test_an_operator_token_never_authenticates_as_a_client_token_even_with_its_digest_stored_there(cast):
    # The prefix check comes before the lookup: an operator value is not looked up among client tokens at all.
    raw = do_create_operator_token(cast.operator.user, "scripts").raw
    ClientToken.objects.create(label="planted", owner=cast.operator.user, digest=token_digest(raw), prefix=raw[:12])

    assert authenticate_token(raw) is None
