"""MCP resources: a project's accepted file, its working draft, a POU's ST body, and the authoring guidelines.

`resources/read` and `resources/subscribe` pass the read tools' consent gates (`mcp_api.consent`): MCP on,
the project visible, this session's grant; `resources/list` names only the projects the principal may view,
as `project.list` does, and pages with cursors. A subscription is stored (`ResourceSubscription`), so the
change that triggers `notifications/resources/updated` may happen in any process (`mcp_api.resource_updates`).
Every call is audited as a tool call is, its `tool` the method's name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from access import hotpath
from forge_core.errors import Refusal
from mcp_api import caching, registry
from mcp_api.consent import audited, granted_project, project_read, resource_not_found
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from mcp_api.models import ResourceSubscription
from projects import plcopen, reads, rights
from projects.models import Project

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext

GUIDELINES_URI = "forge://guidelines"
PAGE_SIZE = 50
MAX_RESOURCE_CHARS = 4_000_000
"""A resource is read whole; a file larger than this is read in chunks with project.export instead."""
MAX_SUBSCRIPTIONS_PER_SESSION = 100

GUIDELINES = f"""# Authoring guidelines for Forge MCP

{registry.AUTHORING_GUIDANCE}

## Naming (IEC 61131-3)

- An identifier starts with a letter or an underscore, then letters, digits and single underscores; it
  never ends with an underscore and never holds two in a row. Case does not distinguish two names:
  `Counter` and `COUNTER` in one scope are the same name, and the project check reports them.
- A keyword of the language (IF, END_IF, VAR, TON, INT, ...) is not a name.
- Name POUs for what they do (`ConveyorControl`, `FB_Valve`), variables for what they hold (`MotorRunning`,
  `FlowSetpoint`); keep one style across a project.
- Inputs go in inputVars, outputs in outputVars, state in localVars; globals only where several POUs need
  them, in a configuration or resource.
- Give every variable a type and, where it is not obvious, documentation; an initial value must fit its type.

## Working with resources

- `forge://projects/{{slug}}/accepted.xml` is the project as accepted; `.../draft.xml` is the working draft with
  every staged change group applied; `.../pous/{{pou}}/body.st` is one POU's Structured Text body as accepted.
- Subscribe to a resource to hear `notifications/resources/updated` when it changes; then read it again.
"""

PROJECT_TEMPLATES = [
    {
        "uriTemplate": "forge://projects/{slug}/accepted.xml",
        "name": "accepted",
        "title": "A project as accepted",
        "description": "The project's PLCopen XML file as it is accepted now. Needs this session's grant.",
        "mimeType": "application/xml",
    },
    {
        "uriTemplate": "forge://projects/{slug}/draft.xml",
        "name": "draft",
        "title": "A project's working draft",
        "description": "The PLCopen XML with every staged change group applied. Needs this session's grant.",
        "mimeType": "application/xml",
    },
    {
        "uriTemplate": "forge://projects/{slug}/pous/{pou}/body.st",
        "name": "pou_body",
        "title": "A POU's Structured Text body",
        "description": "The ST body of one POU of the accepted project. Needs this session's grant.",
        "mimeType": "text/plain",
    },
]


@dataclass(frozen=True)
class OpenResource:
    """A resource that names no project and holds nothing private (the guidelines): any principal may list,
    read and subscribe to it, with no gate but the audit. It changes only with the server's code, so a
    subscription to it is accepted and never announces anything. `contents` gives the read's content for the
    address (`{"text": ...}` or `{"blob": ...}`)."""

    uri: str
    name: str
    title: str
    description: str
    mime_type: str
    contents: Callable[[], dict[str, str]]

    def entry(self) -> dict[str, Any]:
        return {**_entry(self.uri, self.name, self.title, self.mime_type), "description": self.description}


@dataclass(frozen=True)
class OpenTemplate:
    """A resource template of open resources: `{name}` in its `uri_template` stands for one path segment, and
    `contents` gives the content of the address it matched from the variables' values."""

    uri_template: str
    name: str
    title: str
    description: str
    mime_type: str
    contents: Callable[[dict[str, str]], dict[str, str]]

    def descriptor(self) -> dict[str, Any]:
        return {
            "uriTemplate": self.uri_template,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "mimeType": self.mime_type,
        }

    def match(self, uri: str) -> dict[str, str] | None:
        literal = re.split(r"\{(\w+)\}", self.uri_template)
        pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/?#]+)" for i, part in enumerate(literal))
        found = re.fullmatch(pattern, uri)
        if found is None:
            return None
        values = {key: unquote(value) for key, value in found.groupdict().items()}
        return None if any(_UNSAFE.search(value) for value in values.values()) else values


OPEN_RESOURCES: dict[str, OpenResource] = {}
OPEN_TEMPLATES: list[OpenTemplate] = []


def register_open_resource(resource: OpenResource) -> OpenResource:
    """Serve one more open resource (listed after those before it, before any project's)."""
    if resource.uri in OPEN_RESOURCES or parse(resource.uri) is not None:
        raise ValueError(f"resource {resource.uri} is registered twice or is a project's address")
    OPEN_RESOURCES[resource.uri] = resource
    return resource


def register_open_template(template: OpenTemplate) -> OpenTemplate:
    if any(t.uri_template == template.uri_template for t in OPEN_TEMPLATES):
        raise ValueError(f"resource template {template.uri_template} is registered twice")
    OPEN_TEMPLATES.append(template)
    return template


def templates() -> list[dict[str, Any]]:
    """Every template this server serves, as resources/templates/list shows them: the projects' first."""
    return [dict(template) for template in PROJECT_TEMPLATES] + [t.descriptor() for t in OPEN_TEMPLATES]


def open_contents(uri: str) -> dict[str, str] | None:
    """The content item of an open resource's address (one listed, or one an open template matches), or None."""
    resource = OPEN_RESOURCES.get(uri)
    if resource is not None:
        return {"uri": uri, "mimeType": resource.mime_type, **resource.contents()}
    for template in OPEN_TEMPLATES:
        values = template.match(uri) if len(uri) <= 500 else None
        if values is not None:
            return {"uri": uri, "mimeType": template.mime_type, **template.contents(values)}
    return None


def is_open(uri: str) -> bool:
    return uri in OPEN_RESOURCES or any(t.match(uri) is not None for t in OPEN_TEMPLATES if len(uri) <= 500)


_PROJECT_URI = re.compile(
    r"forge://projects/(?P<slug>[^/?#]+)/(?:(?P<file>accepted|draft)\.xml|pous/(?P<pou>[^/?#]+)/body\.st)"
)


_UNSAFE = re.compile(r"[\x00-\x1f\x7f/]")


@dataclass(frozen=True)
class ResourceUri:
    """A project resource's address, parsed: the project's slug, and the file or the POU it names."""

    slug: str
    file: str | None  # "accepted" or "draft"
    pou: str | None


def parse(uri: Any) -> ResourceUri | None:
    """The project resource a URI names, or None (the guidelines, or no resource of this server)."""
    found = _PROJECT_URI.fullmatch(uri) if isinstance(uri, str) and len(uri) <= 500 else None
    if found is None:
        return None
    slug, pou = unquote(found.group("slug")), unquote(found.group("pou") or "")
    if _UNSAFE.search(slug + pou):
        return None  # a control character (%00 and the like) names nothing, and no database may be asked for it
    return ResourceUri(slug, found.group("file"), pou or None)


def _unknown(ctx: CallContext, uri: Any) -> RpcError:
    return RpcError(
        resource_not_found(ctx),
        f"There is no resource {str(uri)[:200]!r}. Call resources/list and resources/templates/list for the "
        "addresses this server serves.",
        {"uri": str(uri)[:500]},
    )


def _uri_of(params: dict[str, Any]) -> str:
    uri = params.get("uri")
    if not isinstance(uri, str) or not uri:
        raise RpcError(INVALID_PARAMS, "Invalid params: 'uri' must be a resource address from resources/list.")
    return uri


def project_uris(slug: str) -> tuple[str, str]:
    return f"forge://projects/{slug}/accepted.xml", f"forge://projects/{slug}/draft.xml"


# --- resources/list and resources/templates/list ---------------------------------------------------------


def resources_list(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    """The open resources (the guidelines first), then each visible project's accepted file and draft, in slug
    order, a page at a time."""
    offset = page_offset(params.get("cursor"), "resources/list")
    # Entries 0..n-1 are the open resources; project k is entries n+2k (accepted) and n+2k+1 (draft).
    opened = list(OPEN_RESOURCES.values())
    first_project = max(0, (offset - len(opened)) // 2)
    wanted = PAGE_SIZE // 2 + 2
    # While MCP is off no project is named, as project.list answers nothing then.
    visible = rights.visible_projects(ctx.token.owner) if hotpath.mcp_enabled(ctx.token) else Project.objects.none()
    projects = list(visible[first_project : first_project + wanted])
    entries = [resource.entry() for resource in opened[offset:]]
    for project in projects:
        accepted, draft = project_uris(project.slug)
        entries.append(
            _entry(accepted, f"{project.slug}/accepted.xml", f"{project.name} (accepted)", "application/xml")
        )
        entries.append(_entry(draft, f"{project.slug}/draft.xml", f"{project.name} (working draft)", "application/xml"))
    skip = 0 if offset <= len(opened) else offset - (len(opened) + 2 * first_project)
    rest = entries[skip:]
    page: dict[str, Any] = {"resources": rest[:PAGE_SIZE]}
    if len(rest) > PAGE_SIZE:
        page["nextCursor"] = registry.encode_cursor(offset + PAGE_SIZE)
    # Which projects are named depends on who asks and on the MCP switch.
    return caching.PER_CALLER.apply(ctx, page)


def templates_list(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    page_offset(params.get("cursor"), "resources/templates/list")
    # The same addresses for everyone, fixed by the server's code: a template names no project.
    return caching.STATIC.apply(ctx, {"resourceTemplates": templates()})


def page_offset(cursor: Any, method: str) -> int:
    """Where a page of a list method starts: a cursor this server gave, or -32602 naming the method."""
    try:
        return registry.decode_cursor(cursor)
    except RpcError:
        raise RpcError(
            INVALID_PARAMS, f"Invalid params: unknown cursor. Pass back a nextCursor from {method}."
        ) from None


def _entry(uri: str, name: str, title: str, mime: str) -> dict[str, Any]:
    return {"uri": uri, "name": name, "title": title, "mimeType": mime}


# --- resources/read ---------------------------------------------------------------------------------


def resources_read(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    uri = _uri_of(params)
    if is_open(uri):
        contents = audited(ctx, "resources/read", {"uri": uri[:500]}, lambda: open_contents(uri))
        # Nothing private; the guidelines change only with the server's code, another open resource any time.
        hint = caching.STATIC if uri == GUIDELINES_URI else caching.SHARED_LIVE
        return hint.apply(ctx, {"contents": [contents]})
    address = parse(uri)
    arguments = {"uri": uri[:500], "project": address.slug[:100] if address else ""}

    def read() -> dict[str, Any]:
        if address is None:
            raise _unknown(ctx, uri)
        project = granted_project(ctx, address.slug, params)
        if address.pou is not None:
            return {"uri": uri, "mimeType": "text/plain", "text": project_read(_pou_body, project, address.pou)}
        view = reads.WORKING_DRAFT if address.file == "draft" else reads.ACCEPTED
        return {"uri": uri, "mimeType": "application/xml", "text": project_read(_whole_file, project, view)}

    contents = audited(ctx, "resources/read", arguments, read, not_found=resource_not_found(ctx))
    # Behind this session's grant, and a draft changes whenever a change group is staged.
    return caching.PER_CALLER.apply(ctx, {"contents": [contents]})


def _whole_file(project: Project, view: str) -> str:
    exported = reads.export(project, offset=0, limit=MAX_RESOURCE_CHARS, view=view)
    if "next_offset" in exported:
        raise Refusal(
            "FORGE_ERR_TOO_LARGE",
            f"{project.slug} holds {exported['length']} characters, more than a resource carries "
            f"({MAX_RESOURCE_CHARS}); read it with project.export in chunks, or the bounded reads.",
            length=exported["length"],
        )
    return str(exported["xml"])


def _pou_body(project: Project, pou: str) -> str:
    """The whole ST body of a POU of the accepted project, read page by page."""
    parts: list[str] = []
    cursor = None
    while True:
        try:
            element = reads.get_element(project, f"pou/{pou}", body_limit=plcopen.MAX_BODY_LIMIT, cursor=cursor)
        except (plcopen.ElementNotFound, ValueError):
            raise Refusal(
                "FORGE_ERR_NOT_FOUND",
                f"{project.slug} has no POU {pou!r}. Complete the pou variable (completion/complete) or call "
                "project.find with kind pou for the names.",
            ) from None
        body = element.get("body") if element.get("kind", "pou") == "pou" else None
        if not body or body.get("language") != "ST" or not body.get("rendered"):
            language = body.get("language") if body else "no"
            raise Refusal(
                "FORGE_ERR_NOT_FOUND",
                f"POU {pou} of {project.slug} has {language} body, not Structured Text; read it with "
                "project.get_element.",
            )
        parts.append(str(body.get("text", "")))
        cursor = body.get("next_cursor")
        if not cursor:
            return "".join(parts)


# --- resources/subscribe and resources/unsubscribe -------------------------------------------------------


def listened_resource(ctx: CallContext, uri: Any, params: dict[str, Any]) -> tuple[int, bool] | None:
    """What one address of a 2026-07-28 `subscriptions/listen`'s `resourceSubscriptions` follows: the project's
    id and whether only its draft is named, for a project resource this call may read (the same gates as
    resources/subscribe, audited as `subscriptions/listen`); None for an open resource (the guidelines change
    only with the server). Refused as resources/subscribe refuses."""
    if not isinstance(uri, str) or not uri:
        raise RpcError(
            INVALID_PARAMS, "Invalid params: resourceSubscriptions holds resource addresses from resources/list."
        )
    address = parse(uri)
    arguments = {"uri": uri[:500], "project": address.slug[:100] if address else ""}

    def follow() -> tuple[int, bool] | None:
        if is_open(uri):
            return None
        if address is None:
            raise _unknown(ctx, uri)
        project = granted_project(ctx, address.slug, params)
        return project.pk, address.file == "draft"

    return audited(ctx, "subscriptions/listen", arguments, follow, not_found=resource_not_found(ctx))


def resources_subscribe(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    uri = _uri_of(params)
    address = parse(uri)
    arguments = {"uri": uri[:500], "project": address.slug[:100] if address else ""}

    def subscribe() -> dict[str, Any]:
        if is_open(uri):
            return {}  # it changes only with the server's code: nothing to announce
        if address is None:
            raise _unknown(ctx, uri)
        project = granted_project(ctx, address.slug, params)
        do_subscribe_resource(ctx, project, uri)
        return {}

    return audited(ctx, "resources/subscribe", arguments, subscribe, not_found=resource_not_found(ctx), changes=True)


def do_subscribe_resource(ctx: CallContext, project: Project, uri: str) -> ResourceSubscription:
    """Store this session's subscription to one of the project's resources (the caller audits it)."""
    session = ctx.session
    if session is None:
        raise LookupError("resources/subscribe is offered only on revisions with sessions")
    existing = ResourceSubscription.objects.filter(session=session, uri=uri).first()
    if existing is not None:
        return existing
    if ResourceSubscription.objects.filter(session=session).count() >= MAX_SUBSCRIPTIONS_PER_SESSION:
        raise Refusal(
            "FORGE_ERR_LIMIT_REACHED",
            f"This session holds {MAX_SUBSCRIPTIONS_PER_SESSION} resource subscriptions, the most one may hold; "
            "unsubscribe from one you no longer follow (resources/unsubscribe) first.",
            limit=MAX_SUBSCRIPTIONS_PER_SESSION,
        )
    return ResourceSubscription.objects.create(session=session, project=project, uri=uri)


def resources_unsubscribe(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    uri = _uri_of(params)
    address = parse(uri)
    arguments = {"uri": uri[:500], "project": address.slug[:100] if address else ""}

    def unsubscribe() -> dict[str, Any]:
        # Ending a subscription reveals nothing and needs no grant: a revoked session may still stop listening.
        ResourceSubscription.objects.filter(session=ctx.session, uri=uri).delete()
        return {}

    return audited(ctx, "resources/unsubscribe", arguments, unsubscribe, changes=True)


register_open_resource(
    OpenResource(
        GUIDELINES_URI,
        "guidelines",
        "Authoring guidelines and IEC naming rules",
        "How to change a project through Forge MCP, and how to name things in IEC 61131-3.",
        "text/markdown",
        lambda: {"text": GUIDELINES},
    )
)
