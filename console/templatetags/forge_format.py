"""Template filters for readable internal values: `{% load forge_format %}`, then `{{ row.arguments_json|pretty_json }}`,
`{{ event.mac|short_hash:"MAC" }}` and `{{ event.ts|local_time }}`. A page that uses them loads the shared
script and style once: `{% forge_format_assets %}` in its head. The HTML itself is made in
`forge_core.formatting`, where screens of apps that may not import the console find it too."""

from __future__ import annotations

from django import template
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString

from forge_core import formatting

register = template.Library()

register.filter("pretty_json", formatting.pretty_json)
register.filter("short_hash", formatting.short_hash)
register.filter("local_time", formatting.local_time)


@register.simple_tag
def forge_format_assets() -> SafeString:
    """The script (Copy buttons, instants in the browser's time zone) and style the filters' HTML needs."""
    return format_html(
        '<script src="{}" defer></script><link rel="stylesheet" href="{}">',
        static("forge/format.js"),
        static("forge/format.css"),
    )
