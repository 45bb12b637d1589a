"""Readable views of internal values on console screens: JSON laid out, hashes shortened with a Copy button,
and instants to the second with their offset.

Each function returns escaped HTML (a `SafeString`) that the console's scripts and style bring to life: the
Copy button is the console's shared one (`console/static/console/console.js`), and `console/static/forge/format.js`
shows an instant again in the browser's own time zone (`format.css` lays them out). Without the script, the page still reads: the full
hash is the shortened one's tooltip and the instant is in the server's time zone with its offset. Templates
use them as the filters of `console.templatetags.forge_format`; an app's admin (which may not import the
console) calls them from here.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

HASH_HEAD = 8
HASH_TAIL = 4
SHORTEST_SHORTENED = HASH_HEAD + HASH_TAIL + 4  # a shorter value is shown whole: an ellipsis would hide little


def pretty_json(value: Any) -> SafeString:
    """`value` (JSON text, or what JSON holds) indented, keys sorted, as a block; text that is not JSON as it is."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            return format_html('<pre class="forge-json">{}</pre>', value)
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="forge-json">{}</pre>', text)


def short_hash(value: Any, label: str = "") -> SafeString:
    """A MAC, digest or fingerprint as its first and last characters, the whole value as tooltip and a Copy
    button for it; `label` names it for a screen reader ("MAC"); empty stays empty.

    The button is the console's shared one (`console/static/console/console.js`: a `button.copy` copies the
    text of the element its `data-copy` names), here the whole value kept beside the short one, out of sight."""
    text = "" if value is None else str(value)
    if not text:
        return format_html("{}", "")
    shown = text if len(text) < SHORTEST_SHORTENED else f"{text[:HASH_HEAD]}…{text[-HASH_TAIL:]}"
    what = f"Copy the {label}" if label else "Copy the full value"
    whole = f"forge-value-{next(_whole_values)}"
    return format_html(
        '<span class="forge-hash"><code title="{}">{}</code><span class="forge-whole" id="{}" aria-hidden="true">{}</span>'
        '<button type="button" class="copy forge-copy" data-copy="{}" aria-label="{}" title="{}">Copy</button></span>',
        text,
        shown,
        whole,
        text,
        whole,
        what,
        what,
    )


_whole_values = itertools.count(1)  # ids unique in the process, so in any page: one element per shown value


def local_time(value: datetime | None) -> SafeString:
    """An instant to the second with its UTC offset, in the current time zone (the browser's, once the script
    ran); the exact UTC instant, to the microsecond, is its tooltip and its `datetime`."""
    if value is None:
        return format_html("{}", "")
    exact = value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    return format_html(
        '<time class="forge-time" datetime="{}" title="{}">{}</time>', exact, f"{exact} (UTC)", second_text(value)
    )


def second_text(value: datetime) -> str:
    """`2026-12-03 08:46:09 +01:00`: the instant in the current time zone, to the second, with its offset."""
    here = timezone.localtime(value)
    offset = here.strftime("%z")
    return f"{here:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"
