"""The side menu (the admin's nav sidebar) and the index's list of apps carry the purpose-built screens: the
working drafts among the projects for whoever sees projects, the caretaker's screen for a user who may act
as caretaker only; both mark the screen open as the current one."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from tests.console.test_site import operator_client

pytestmark = pytest.mark.django_db
__all__ = ["operator_client"]  # the logged-in operator's browser, a fixture

DRAFTS = '<a href="/console/drafts/"'
CARETAKER = '<a href="/console/caretaker/"'


def test_an_operators_side_menu_lists_the_working_drafts_and_marks_them_current_there(operator_client):
    tokens = operator_client.get("/console/access/clienttoken/").content.decode()
    drafts = operator_client.get("/console/drafts/").content.decode()

    assert DRAFTS in tokens and 'id="nav-sidebar"' in tokens
    assert 'class="model-workingdraft current-model"' in drafts


def test_the_projects_app_page_lists_its_working_drafts(operator_client):
    assert DRAFTS in operator_client.get("/console/projects/").content.decode()


def test_the_caretaker_screen_is_in_no_menu_of_an_operator_who_may_not_act_as_caretaker(operator_client):
    for address in ("/console/", "/console/access/clienttoken/"):
        assert CARETAKER not in operator_client.get(address).content.decode()


def test_a_caretaker_finds_the_caretaker_screen_in_the_side_menu_and_on_the_index(operator_client, cast):
    cast.operator.user.user_permissions.add(Permission.objects.get(codename="act_as_caretaker"))

    index = operator_client.get("/console/").content.decode()
    screen = operator_client.get("/console/caretaker/").content.decode()

    assert CARETAKER in index
    assert 'class="model-caretaker current-model"' in screen
