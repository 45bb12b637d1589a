"""`completion/complete`: values for prompt arguments and resource template variables that name projects,
POUs, variables and tasks.

Projects are those the principal may view (as `project.list` names them); names inside a project need this
session's grant on it, as any read of its content does (`mcp_api.consent`). At most 100 values are returned,
as the specification bounds them, with `total` and `hasMore` saying whether there are more. Every call is
audited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from access import hotpath
from mcp_api import prompts, resources
from mcp_api.consent import audited, granted_project, project_read, switched_off
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError
from projects import plcopen, reads, rights

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext

MAX_VALUES = 100
"""The specification's bound on the values of one completion."""

TEMPLATE_VARIABLES = {"slug": "project", "pou": "pou"}
"""What each variable of the resource templates names."""

KIND_OF = {"pou": "pou", "variable": "variable", "task": "task"}


def complete(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    ref, argument = params.get("ref"), params.get("argument")
    if not isinstance(ref, dict) or not isinstance(argument, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: completion/complete takes a ref and an argument {name, value}.")
    name, value = argument.get("name"), argument.get("value", "")
    if not isinstance(name, str) or not isinstance(value, str) or len(value) > 200:
        raise RpcError(
            INVALID_PARAMS, "Invalid params: argument.name and argument.value are strings (value at most 200)."
        )
    context = params.get("context")
    known = context.get("arguments") if isinstance(context, dict) else None
    known = {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}
    audit_arguments = {"ref": str(ref.get("name") or ref.get("uri"))[:200], "argument": name[:100], "value": value}

    def answer() -> dict[str, Any]:
        names = _what_it_names(ref, name)
        if names is None:
            return _values([], has_more=False)
        if not hotpath.mcp_enabled(ctx.token):
            raise switched_off()
        if names == "project":
            return _projects(ctx, value)
        slug = known.get("project") or known.get("slug")
        if not slug:
            return _values([], has_more=False)  # nothing to look in until the project is chosen
        return _names_in(ctx, granted_project(ctx, slug, params), names, value, known.get("pou"))

    return {"completion": audited(ctx, "completion/complete", audit_arguments, answer)}


def _what_it_names(ref: dict[str, Any], argument: str) -> str | None:
    """project, pou, variable or task: what the argument of the referenced prompt or template names, if any."""
    if ref.get("type") == "ref/prompt":
        prompt = prompts.find_prompt(ref.get("name"))
        return next((a.completes for a in prompt.arguments if a.name == argument), None)
    if ref.get("type") == "ref/resource":
        if not any(t["uriTemplate"] == ref.get("uri") for t in resources.templates()):
            raise RpcError(
                INVALID_PARAMS,
                "Invalid params: ref.uri is not one of this server's templates (resources/templates/list).",
            )
        return TEMPLATE_VARIABLES.get(argument)
    raise RpcError(INVALID_PARAMS, "Invalid params: ref.type is ref/prompt or ref/resource.")


def _projects(ctx: CallContext, prefix: str) -> dict[str, Any]:
    slugs = list(
        rights.visible_projects(ctx.token.owner)
        .filter(slug__startswith=prefix.strip().lower())
        .values_list("slug", flat=True)[: MAX_VALUES + 1]
    )
    return _values(slugs[:MAX_VALUES], has_more=len(slugs) > MAX_VALUES)


def _names_in(ctx: CallContext, project: Any, kind: str, prefix: str, pou: str | None) -> dict[str, Any]:
    """Names of one kind in the accepted project that start with the prefix (case-insensitive, as IEC names)."""
    found = project_read(reads.find, project, kind=KIND_OF[kind], text=prefix or None, limit=plcopen.MAX_LIMIT)
    scope = f"pou/{pou}/".lower() if kind == "variable" and pou else None
    wanted = prefix.lower()
    names: list[str] = []
    for item in found["items"]:
        name = str(item.get("name") or "")
        if (
            name.lower().startswith(wanted)
            and name not in names
            and (scope is None or item["id"].lower().startswith(scope))
        ):
            names.append(name)
    has_more = len(names) > MAX_VALUES or bool(found.get("next_cursor"))
    return _values(names[:MAX_VALUES], has_more=has_more)


def _values(values: list[str], *, has_more: bool) -> dict[str, Any]:
    # `total` is the number of values there are: known only when all of them are here.
    return (
        {"values": values, "hasMore": has_more}
        if has_more
        else {"values": values, "total": len(values), "hasMore": False}
    )
