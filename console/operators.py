"""Console operators: who may use the console, the operator REST API and operator tokens.

An operator is a staff user in the `operators` group (`forge_core.console.is_operator`), which holds the
permissions of the apps whose screens operators work in. `create_operator` and the quickstart's
`demo_setup` make one through `do_create_operator`, which audits it.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from audit.models import EventKind
from audit.services import record
from forge_core.console import OPERATORS_GROUP

# The apps whose permissions the operators group holds (every model an operator's screen shows).
OPERATOR_APPS = ["access", "console", "audit", "projects", "confirmations"]


def do_create_operator(name: str, password: str, *, acting_user: str, reset_password: bool = True):
    """Create a console operator (or reset an existing one's password) and audit it.

    With `reset_password=False` an existing operator keeps the password it has (the quickstart's demo
    operator, made again by every `forge.py up`): a new hash would log every browser of it out.
    """
    with transaction.atomic():
        group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
        group.permissions.set(Permission.objects.filter(content_type__app_label__in=OPERATOR_APPS))
        user, created = get_user_model().objects.get_or_create(username=name)
        user.is_staff = True
        user.is_active = True
        if created or reset_password:
            user.set_password(password)
        user.save()
        user.groups.add(group)
        record(
            EventKind.OPERATOR_CREATED,
            arguments={"name": name},
            outcome="created" if created else "password_reset" if reset_password else "kept",
            called_by=acting_user,
        )
    return user, created
