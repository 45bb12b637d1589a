"""Readable internal values (forge_core.formatting, the filters of console.templatetags.forge_format): JSON laid
out, hashes shortened with a Copy button carrying the whole value, instants to the second with their offset."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from django.template import Context, Template
from django.test import override_settings
from django.utils import timezone

from forge_core.formatting import local_time, pretty_json, short_hash

MAC = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def test_json_text_is_laid_out_with_sorted_keys_and_escaped():
    assert pretty_json('{"b":[1,2],"a":"<x>"}') == (
        '<pre class="forge-json">{\n  &quot;a&quot;: &quot;&lt;x&gt;&quot;,\n  &quot;b&quot;: [\n    1,\n    2\n  ]\n}</pre>'
    )


def test_text_that_is_not_json_is_shown_as_it_is():
    assert pretty_json("not {json") == '<pre class="forge-json">not {json</pre>'


def test_a_hash_shows_its_ends_with_the_whole_value_as_tooltip_and_for_the_consoles_copy_button():
    shown = short_hash(MAC, "MAC")

    whole = re.fullmatch(
        rf'<span class="forge-hash"><code title="{MAC}">9f86d081…0a08</code>'
        rf'<span class="forge-whole" id="(forge-value-\d+)" aria-hidden="true">{MAC}</span>'
        r'<button type="button" class="copy forge-copy" data-copy="(forge-value-\d+)" aria-label="Copy the MAC" '
        r'title="Copy the MAC">Copy</button></span>',
        shown,
    )
    assert whole is not None
    assert whole.group(1) == whole.group(2)


def test_two_hashes_on_one_page_copy_each_its_own_value():
    first, second = short_hash(MAC), short_hash(MAC[::-1])

    ids = [re.search(r'data-copy="([^"]+)"', html).group(1) for html in (first, second)]
    assert ids[0] != ids[1]


def test_a_short_value_is_shown_whole_and_an_empty_one_not_at_all():
    assert '<code title="s-12">s-12</code>' in short_hash("s-12")
    assert short_hash("") == ""
    assert short_hash(None) == ""


def test_an_instant_is_shown_to_the_second_in_the_current_zone_with_its_offset():
    instant = datetime(2026, 12, 3, 7, 46, 9, 123456, tzinfo=UTC)

    with timezone.override("Europe/Vienna"):
        shown = local_time(instant)

    assert shown == (
        '<time class="forge-time" datetime="2026-12-03T07:46:09.123456Z" title="2026-12-03T07:46:09.123456Z (UTC)">'
        "2026-12-03 08:46:09 +01:00</time>"
    )


@override_settings(TIME_ZONE="UTC")
def test_templates_reach_the_filters_and_the_assets_tag_through_forge_format():
    template = Template(
        '{% load forge_format %}{% forge_format_assets %}{{ mac|short_hash:"MAC" }}{{ args|pretty_json }}'
    )

    page = template.render(Context({"mac": MAC, "args": "{}"}))

    assert '<script src="/static/forge/format.js" defer></script>' in page
    assert '<link rel="stylesheet" href="/static/forge/format.css">' in page
    assert 'aria-label="Copy the MAC"' in page
    assert '<pre class="forge-json">{}</pre>' in page
