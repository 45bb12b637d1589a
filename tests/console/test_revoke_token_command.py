"""`manage.py revoke_token`: a client token revoked from a shell, named by its label, prefix or id; a name
that fits no token, or more than one, is refused with what to do instead, and nothing is revoked."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from access.models import ClientToken
from access.services import do_create_token
from audit.models import AuditEvent, EventKind
from tests.conftest import Cast

pytestmark = pytest.mark.django_db


def revoked(*tokens: ClientToken) -> list[bool]:
    return [ClientToken.objects.get(pk=t.pk).revoked_at is not None for t in tokens]


@pytest.mark.parametrize("named_by", ["label", "prefix", "id"])
def test_the_named_token_is_revoked_and_audited_as_manage_py(cast: Cast, named_by: str):
    token, other = cast.operator.token, cast.other_operator.token
    value = {"label": token.label, "prefix": token.prefix, "id": str(token.pk)}[named_by]
    out = io.StringIO()

    call_command("revoke_token", f"--{named_by}", value, stdout=out)

    assert revoked(token, other) == [True, False]
    assert f"Revoked token {token.prefix}" in out.getvalue()
    row = AuditEvent.objects.filter(kind=EventKind.TOKEN_REVOKED).get()
    assert (row.called_by, row.arguments["token_id"]) == ("manage.py", token.pk)


def test_a_label_two_tokens_share_is_refused_and_nothing_is_revoked(cast: Cast):
    twin = do_create_token(owner=cast.operator.user, label=cast.operator.token.label).token

    with pytest.raises(CommandError, match="More than one token"):
        call_command("revoke_token", "--label", twin.label)

    assert revoked(cast.operator.token, twin) == [False, False]


def test_a_token_already_revoked_or_unknown_is_refused(cast: Cast):
    call_command("revoke_token", "--id", str(cast.operator.token.pk), stdout=io.StringIO())

    for named in (["--id", str(cast.operator.token.pk)], ["--label", "no-such-client"]):
        with pytest.raises(CommandError, match="is left to revoke"):
            call_command("revoke_token", *named)
    assert AuditEvent.objects.filter(kind=EventKind.TOKEN_REVOKED).count() == 1
