"""Direct write tools (`project.write.*`), present only in override deployments (DESIGN section 8.2).

They are registered only when the process starts with `FORGE_OVERRIDE_SECURITIES=1`: without it they are
in neither `tools/list` nor the registry. A call never writes: it checks its one operation against the
project as it is now (the same vocabulary and findings as change groups), suspends it into a pending
confirmation with a preview for the operator (diff, findings added and cleared) and answers
FORGE_ERR_CONFIRMATION_REQUIRED with the `pending_id`. When the client streams and sent a progress
token, the transport waits for the decision instead (see `exchange.WaitPlan`). Only the executor writes,
after an operator approved; a client's say-so is never an approval.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import create_model

from access import limits
from confirmations.sealing import canonical_json
from confirmations.services import do_create_confirmation
from forge_core.errors import Refusal
from mcp_api.protocol import CallContext
from mcp_api.registry import REGISTRY, Need, Tool, register
from mcp_api.tools.common import ProjectArguments, console_url
from projects import operations, plcopen
from projects.capability import APPLY_OPERATIONS, intent_for
from projects.preview import preview_change
from projects.services import ProjectUnavailable, current_document, project_path

WRITE_NEEDS = frozenset({Need.TOKEN, Need.GRANT, Need.OVERRIDE})

# tool suffix -> (operation model, destructive, what it does)
WRITE_OPERATIONS: dict[str, tuple[type[operations._Strict], bool, str]] = {
    "add_variable": (
        operations.AddVariable,
        False,
        "Declare a variable in a POU (give section) or as a global of a configuration or resource.",
    ),
    "update_variable": (
        operations.UpdateVariable,
        False,
        "Change exactly one field of a variable (name, type, initial_value, address, documentation, retain "
        "or constant); null clears initial_value, address or documentation.",
    ),
    "remove_variable": (operations.RemoveVariable, True, "Remove a variable by its id."),
    "add_pou": (
        operations.AddPou,
        False,
        "Add a program, function or function block with an ST or IL body and its variables.",
    ),
    "set_pou_body": (operations.SetPouBody, True, "Replace the ST or IL body of a POU."),
    "remove_pou": (operations.RemovePou, True, "Remove a POU by its id."),
    "add_task": (
        operations.AddTask,
        False,
        "Add a cyclic task (interval, e.g. T#20ms) or an event task (single) to a resource.",
    ),
    "add_pou_instance": (
        operations.AddPouInstance,
        False,
        "Instantiate a program in a resource or under one of its tasks.",
    ),
}
AFTER = (
    " Nothing is written by this call: it answers FORGE_ERR_CONFIRMATION_REQUIRED with a pending_id; an "
    "operator approves or denies it in the Forge console, then editor.confirm(pending_id) gives the outcome. "
    "Prefer change groups (change_group.*) for anything larger than one operation."
)


def _describe(op: dict[str, Any]) -> str:
    kind = op["op"]
    if kind == "add_variable":
        return f"add variable {op['name']} : {op['type']} to {op['scope']}"
    if kind == "update_variable":
        field = next(k for k in op if k not in ("op", "id"))
        return f"change {field} of {op['id']} to {op[field]!r}"
    if kind == "add_pou":
        return f"add {op['pou_type']} {op['name']} ({op.get('language', 'ST')})"
    if kind == "set_pou_body":
        return f"replace the body of {op['id']}"
    if kind == "add_task":
        return f"add task {op['name']} to {op['resource']}"
    if kind == "add_pou_instance":
        return f"add instance {op['name']} of {op['type_name']} to {op['target']}"
    return f"{kind.replace('_', ' ')} {op.get('id', '')}".strip()


def propose(ctx: CallContext, args: ProjectArguments, tool_name: str, op_name: str) -> dict[str, Any]:
    """Check one operation against the project now and suspend it for an operator's decision."""
    try:
        project = current_document(ctx.project).project
        current = project_path(project).read_bytes()
    except (ProjectUnavailable, OSError) as exc:
        raise Refusal("FORGE_ERR_NOT_FOUND", f"The project cannot be read now: {exc}.") from None
    op = {"op": op_name, **args.model_dump(mode="json", exclude_unset=True, exclude={"project", "session_handle"})}
    # The executor keeps the intent in canonical form (NFC); previewing that same form makes the bytes
    # the operator approves the bytes that are written.
    intent = json.loads(canonical_json(intent_for([op])))
    try:
        preview = preview_change(current, intent, name=project.path)
    except operations.OperationRefused as refusal:
        raise Refusal(
            "FORGE_ERR_INVALID_OPERATION",
            f"{refusal.reason}. Nothing was proposed; fix the arguments (project.get_element shows the element "
            "as it is) and call again.",
            index=refusal.index,
        ) from None
    limits.check_pending_confirmation_cap(ctx.token)
    confirmation = do_create_confirmation(
        tool=tool_name,
        arguments=op,
        question=(
            f"{ctx.called_by} ({ctx.token.label or 'a client'}) asks to {_describe(op)} in project {project.slug}."
        ),
        preview={**preview.content, "result": {"project": project.slug, "changed_ids": list(preview.changed_ids)}},
        principal=ctx.token.owner,
        session_id=ctx.session_id,
        client_label=ctx.token.label,
        project=project.slug,
        capability="project.file",
        method=APPLY_OPERATIONS,
        target={"project": project.slug},
        intent=intent,
        base_fingerprint=plcopen.fingerprint(current),
        result_digest=plcopen.fingerprint(preview.result),
        result=preview.result,
        label=f"{tool_name} on {project.slug}",
    )
    ctx.awaiting = str(confirmation.id)
    raise Refusal(
        "FORGE_ERR_CONFIRMATION_REQUIRED",
        f"An operator must approve this change in the Forge console ({console_url(confirmation.id)}) before it "
        f"is written; it expires at {confirmation.expires_at.isoformat()}. Call editor.confirm with the "
        "pending_id to learn the outcome. Do not tell the user it is done until then.",
        pending_id=str(confirmation.id),
        memorable_id=confirmation.memorable_id,
        expires_at=confirmation.expires_at.isoformat(),
        console_url=console_url(confirmation.id),
        changed_ids=list(preview.changed_ids),
        new_findings=preview.content["new_findings"],
    )


def _handler(tool_name: str, op_name: str):
    def handle(ctx: CallContext, args: ProjectArguments) -> dict[str, Any]:
        return propose(ctx, args, tool_name, op_name)

    return handle


def _arguments_model(op_name: str, model: type[operations._Strict]) -> type[ProjectArguments]:
    """The tool's arguments: the project (and session handle), then the operation's own fields."""
    # Any values: mypy checks a **-expanded dict against every keyword parameter of create_model
    # (__module__: str, ...), not only against the field definitions it fills.
    fields: dict[str, Any] = {
        name: (info.annotation, info) for name, info in model.model_fields.items() if name != "op"
    }
    class_name = "".join(part.title() for part in op_name.split("_")) + "Arguments"
    return create_model(class_name, __base__=ProjectArguments, __doc__=model.__doc__, **fields)


def write_tools() -> list[Tool]:
    tools = []
    for op_name, (model, destructive, what) in WRITE_OPERATIONS.items():
        name = f"project.write.{op_name}"
        tools.append(
            Tool(
                name=name,
                title=f"Propose: {op_name.replace('_', ' ')}",
                description=what + AFTER,
                arguments=_arguments_model(op_name, model),
                handler=_handler(name, op_name),
                needs=WRITE_NEEDS,
                read_only=False,
                destructive=destructive,
                idempotent=False,
            )
        )
    return tools


def register_write_tools() -> None:
    """Add the direct write tools to the registry (override deployments only, once, at start)."""
    for tool in write_tools():
        if tool.name not in REGISTRY:
            register(tool)


def unregister_write_tools() -> None:
    for op_name in WRITE_OPERATIONS:
        REGISTRY.pop(f"project.write.{op_name}", None)
