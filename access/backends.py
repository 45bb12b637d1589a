"""Model permissions for Django's auth, read in one statement: Django's own backend reads a user's permissions in
two (those given to the user, then those of its groups), each compiled by the ORM, once per user object, and every
request reads its user afresh, so an operator's decision paid both at every approval. The permissions and what they
mean are Django's; only the read differs: the two sets in one statement, written once (`_permissions_sql`), and kept
on the user object as Django's backend keeps them (`_perm_cache`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection


class ModelPermissions(ModelBackend):
    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            if user_obj.is_superuser:
                found = list(Permission.objects.values_list("content_type__app_label", "codename"))
            else:
                with connection.cursor() as cursor:
                    cursor.execute(_permissions_sql(), [user_obj.pk, user_obj.pk])
                    found = cursor.fetchall()
            user_obj._perm_cache = {f"{app_label}.{codename}" for app_label, codename in found}
        perms: set[str] = user_obj._perm_cache
        return perms


@cache
def _permissions_sql() -> str:
    """(app label, codename) of every permission a user holds, its own and its groups', for the user's id given
    twice."""
    quote = connection.ops.quote_name

    def table(model: Any) -> str:
        return quote(model._meta.db_table)

    def column(model: Any, name: str) -> str:
        return quote(model._meta.get_field(name).column)

    own, grouped, membership = User.user_permissions.through, Group.permissions.through, User.groups.through
    return (
        f"SELECT ct.{column(ContentType, 'app_label')}, p.{column(Permission, 'codename')} "
        f"FROM {table(Permission)} p INNER JOIN {table(ContentType)} ct "
        f"ON ct.{column(ContentType, 'id')} = p.{column(Permission, 'content_type')} "
        f"WHERE p.{column(Permission, 'id')} IN ("
        f"SELECT {column(own, 'permission')} FROM {table(own)} WHERE {column(own, 'user')} = %s "
        f"UNION ALL SELECT g.{column(grouped, 'permission')} FROM {table(grouped)} g INNER JOIN {table(membership)} m "
        f"ON m.{column(membership, 'group')} = g.{column(grouped, 'group')} WHERE m.{column(membership, 'user')} = %s)"
    )
