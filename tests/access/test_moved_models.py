"""The access models moved out of mcp_api without moving their data: same tables, same content types and
permissions, and the console's old addresses still lead to their screens."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType

from access.models import AccessRequest, ClientToken, McpSession, ServerState

MOVED = [ClientToken, McpSession, ServerState, AccessRequest]
move = importlib.import_module("access.migrations.0001_initial")


@pytest.mark.parametrize("model", MOVED, ids=lambda model: model.__name__)
def test_a_moved_model_keeps_the_table_mcp_api_made(model):
    assert model._meta.db_table == f"mcp_api_{model._meta.model_name}"


@pytest.mark.django_db
def test_the_move_relabels_content_types_in_place_so_permissions_follow():
    ContentType.objects.filter(app_label="access").update(app_label="mcp_api")
    before = dict(ContentType.objects.filter(app_label="mcp_api").values_list("model", "pk"))
    ContentType.objects.clear_cache()

    move.relabel(apps, None)

    after = dict(ContentType.objects.filter(app_label="access").values_list("model", "pk"))
    assert after == {model: pk for model, pk in before.items() if model in move.MOVED}
    assert Permission.objects.get(codename="view_accessrequest").content_type.app_label == "access"


@pytest.mark.django_db
def test_an_old_console_address_of_a_moved_screen_redirects_to_its_new_one(cast, client):
    client.force_login(cast.operator.user)

    response = client.get("/console/mcp_api/accessrequest/?state__exact=pending")

    assert response.status_code == 301
    assert response["Location"] == "/console/access/accessrequest/?state__exact=pending"
    assert client.get(response["Location"]).status_code == 200
