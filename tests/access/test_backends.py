"""Model permissions (access.backends): Django's answers, from one read of a user's permissions instead of two."""

from __future__ import annotations

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from access.backends import ModelPermissions

pytestmark = pytest.mark.django_db

DECIDE = "confirmations.decide_confirmation"
RESOLVE = "confirmations.resolve_contract"
VIEW = "projects.view_project"
ASKED = (DECIDE, RESOLVE, VIEW, "projects.approve_change")


def permission(name: str) -> Permission:
    app_label, codename = name.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


@pytest.fixture
def deciders(cast) -> Group:
    group = Group.objects.create(name="deciders")
    group.permissions.add(permission(DECIDE), permission(VIEW))
    return group


def fresh(user: User) -> User:
    """The user as a request reads it: no permissions cached on the object yet."""
    return User.objects.get(pk=user.pk)


def test_a_users_own_and_its_groups_permissions_are_read_in_one_statement(cast, deciders):
    user = cast.caretaker.user
    user.groups.add(deciders)
    user.user_permissions.add(permission(RESOLVE))
    asking = fresh(user)

    with CaptureQueriesContext(connection) as queries:
        held = {name for name in ASKED if asking.has_perm(name)}

    assert held == {DECIDE, RESOLVE, VIEW}
    assert len(queries.captured_queries) == 1


@pytest.mark.parametrize(
    "holder",
    ["own permission", "group permission", "both", "none", "inactive", "superuser"],
)
def test_the_permissions_are_djangos_whoever_holds_them(cast, deciders, holder):
    user = cast.caretaker.user
    if holder in ("own permission", "both", "inactive"):
        user.user_permissions.add(permission(DECIDE))
    if holder in ("group permission", "both", "inactive"):
        user.groups.add(deciders)
    if holder == "inactive":
        user.is_active = False
    if holder == "superuser":
        user.is_superuser = True
    user.save()

    ours = ModelPermissions().get_all_permissions(fresh(user))

    assert ours == ModelBackend().get_all_permissions(fresh(user))
    assert {name for name in ASKED if fresh(user).has_perm(name)} == {name for name in ASKED if name in ours}
