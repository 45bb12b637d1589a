"""The operator token moved out of mcp_api without moving its data: same table, same content type and
permissions, and an operator token made before the move still authenticates."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from console.models import OperatorToken
from forge_core.console import OPERATORS_GROUP

move = importlib.import_module("console.migrations.0001_initial")


def test_the_operator_token_keeps_the_table_mcp_api_made():
    assert OperatorToken._meta.db_table == "mcp_api_operatortoken"


@pytest.mark.django_db
def test_the_move_relabels_the_content_type_in_place_so_permissions_follow(cast):
    ContentType.objects.filter(app_label="console", model="operatortoken").update(app_label="mcp_api")
    before = ContentType.objects.get(app_label="mcp_api", model="operatortoken").pk
    ContentType.objects.clear_cache()

    move.relabel(apps, None)

    assert ContentType.objects.get(app_label="console", model="operatortoken").pk == before
    permission = Permission.objects.get(codename="view_operatortoken")
    assert permission.content_type.app_label == "console"
    assert permission.group_set.filter(name=OPERATORS_GROUP).exists()


@pytest.mark.django_db
def test_undoing_the_move_points_the_content_type_back_at_mcp_api():
    move.unlabel(apps, None)

    assert ContentType.objects.filter(app_label="mcp_api", model="operatortoken").exists()
    assert not ContentType.objects.filter(app_label="console", model="operatortoken").exists()
