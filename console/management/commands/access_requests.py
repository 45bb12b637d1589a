"""`python manage.py access_requests list | allow | deny | revoke`: decide access requests from a shell.

The same decisions as the console's, by a named console user who needs `grant_access` on the project;
every decision is audited with that user.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.grants import AccessDecisionRefused, do_decide_access, do_revoke_access
from access.models import AccessRequest, AccessState


class Command(BaseCommand):
    help = "List access requests, or allow, deny or revoke them as a console user with grant_access."

    def add_arguments(self, parser) -> None:
        parser.add_argument("action", choices=["list", "allow", "deny", "revoke"])
        parser.add_argument("ids", nargs="*", type=int, help="request ids (see list)")
        parser.add_argument("--pending", action="store_true", help="with allow or deny: every pending request")
        parser.add_argument("--as", dest="username", default="", help="the deciding console user")

    def handle(self, *args, action: str, ids: list[int], pending: bool, username: str, **options) -> None:
        if action == "list":
            for request in AccessRequest.objects.select_related("token__owner", "project"):
                self.stdout.write(
                    f"{request.pk} {request.state} {request.project.slug} {request.token.owner.get_username()} "
                    f"{request.token.label} {request.session_id}"
                )
            return
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError("Name the deciding console user with --as USER.")
        if pending:
            ids = list(AccessRequest.objects.filter(state=AccessState.PENDING).values_list("pk", flat=True))
        if not ids:
            raise CommandError("Name the request ids (see 'access_requests list'), or pass --pending.")
        for request_id in ids:
            try:
                if action == "revoke":
                    request = do_revoke_access(request_id, user=user)
                else:
                    request = do_decide_access(request_id, allow=action == "allow", user=user)
            except AccessDecisionRefused as exc:
                raise CommandError(f"request {request_id}: {exc}") from None
            self.stdout.write(f"{request.pk} {request.state} {request.project.slug}")
