"""MCP prompts: the guidance for three common jobs, with their arguments (`prompts/list`, `prompts/get`).

A prompt's text names the tools to use and the order to use them in; it carries no project content, but it
names a project, so `prompts/get` passes the same gates as a read (a project the principal may not view is
not found, and this session needs its grant). Arguments are completed by `completion/complete`
(`mcp_api.completions`). Every `prompts/get` is audited.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_api import caching, dialogue, resources
from mcp_api.consent import audited, granted_project
from mcp_api.jsonrpc import INVALID_PARAMS, RpcError

if TYPE_CHECKING:
    from mcp_api.protocol import CallContext


@dataclass(frozen=True)
class Argument:
    name: str
    description: str
    required: bool = True
    completes: str | None = None  # what completion/complete offers for it: project, pou, variable or task


@dataclass(frozen=True)
class Prompt:
    """A prompt: its text from its arguments, or (`render`) messages of other content, such as an image or an
    embedded resource. A prompt with a `project` argument passes the read gates for that project; one without
    names nothing private and is answered to any principal."""

    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    text: Callable[[dict[str, str]], str] | None = None
    render: Callable[[dict[str, str]], list[dict[str, Any]]] | None = None
    # Messages that need the client's answers first: a generator function, as a conversing tool is
    # (`mcp_api.dialogue`), returning the messages. At 2026-07-28 its requests are input_required rounds.
    converse: Callable[[dict[str, str]], Generator[Any, Any, list[dict[str, Any]]]] | None = None

    @property
    def names_project(self) -> bool:
        return any(a.name == "project" for a in self.arguments)

    def messages(self, arguments: dict[str, str]) -> list[dict[str, Any]]:
        if self.render is not None:
            return self.render(arguments)
        assert self.text is not None, f"prompt {self.name} has neither text nor render"
        return [{"role": "user", "content": {"type": "text", "text": self.text(arguments)}}]

    def descriptor(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": [
                {"name": a.name, "description": a.description, "required": a.required} for a in self.arguments
            ],
        }


PROJECT = Argument("project", "The project's slug, from project.list.", completes="project")
POU = Argument("pou", "The POU's name in that project.", completes="pou")

_STEPS = (
    "Begin a change group (change_group.begin) with a title and a rationale a reviewer understands; rehearse "
    "each batch with change_group.check, stage it with change_group.stage (carry expected_working_revision and "
    "expected_context_generation from the previous answer), fix what the findings say, and submit with "
    "change_group.submit. A person reviews and accepts the working draft in the Forge console: do not tell the "
    "user the change is in the project before that."
)


def _add_io_variables(args: dict[str, str]) -> str:
    signals = args.get("signals") or "the signals the user names"
    return (
        f"Add input and output variables to POU {args['pou']} of project {args['project']} for: {signals}.\n\n"
        f"1. Read the POU first: project.get_element with element_id pou/{args['pou']}, and "
        f"project.list_variables with scope pou/{args['pou']}, so that no name is declared twice (IEC names ignore "
        "case) and the new ones follow the names already there.\n"
        "2. An input goes in inputVars, an output in outputVars; give each an elementary type that fits the signal "
        "(BOOL for a contact or a coil, INT or REAL for a measured value, TIME for a duration) and documentation "
        "that says what it is wired to and in which unit. Use project.suggest_placement when it is unclear which "
        "POU should own a signal.\n"
        "3. Names start with a letter, hold letters, digits and single underscores, and are not keywords; see the "
        "forge://guidelines resource.\n"
        f"4. {_STEPS}"
    )


def _restructure_pou(args: dict[str, str]) -> str:
    goal = args.get("goal") or "make it easier to read and to change, without changing what it does"
    task = f" It runs in task {args['task']}: keep its work within that task's cycle." if args.get("task") else ""
    return (
        f"Restructure POU {args['pou']} of project {args['project']}; the goal: {goal}.{task}\n\n"
        f"1. Read its interface and body (resource forge://projects/{args['project']}/pous/{args['pou']}/body.st, "
        f"or project.get_element with element_id pou/{args['pou']}), and project.find for where it is called or "
        "instantiated, so that every caller still fits the interface afterwards.\n"
        "2. Keep behaviour: the same outputs for the same inputs and state. Extract repeated logic into a function or "
        "function block only where it is used more than once; keep each new POU's name telling what it does.\n"
        "3. Change the body with set_pou_body operations and the interface with variable operations; run "
        "project.check on the working draft view to see that no identifier is left undeclared or unused.\n"
        f"4. {_STEPS}"
    )


def _fix_findings(args: dict[str, str]) -> str:
    named = [args[key] for key in ("pou", "variable") if args.get(key)]
    focus = f" Start with the findings about {' and '.join(named)}." if named else ""
    return (
        f"Fix the problem findings of project {args['project']}.{focus}\n\n"
        "1. Call project.check (and again with view working_draft if a draft exists): problems come first, then "
        "advisories. Each finding names its element id and what is wrong.\n"
        "2. For each problem, read the element it names (project.get_element) and make the smallest change that "
        "removes it: declare an undeclared identifier, rename a duplicate or invalid name, correct an unknown type "
        "or an initial value that does not fit its type, give a program a task.\n"
        "3. Do not hide a finding by deleting what it is about unless that is what the user asked for; an advisory "
        "may stand when it is deliberate, and change_group.submit asks you to acknowledge it.\n"
        f"4. {_STEPS}"
    )


PROMPTS: dict[str, Prompt] = {
    prompt.name: prompt
    for prompt in (
        Prompt(
            "add_io_variables",
            "Add I/O variables to a POU",
            "Guidance for declaring input and output variables for field signals in one POU.",
            (
                PROJECT,
                POU,
                Argument("signals", "The signals to add, in words (e.g. 'start button, motor contactor').", False),
            ),
            _add_io_variables,
        ),
        Prompt(
            "restructure_pou",
            "Restructure a POU",
            "Guidance for reorganizing one POU's body and interface without changing its behaviour.",
            (
                PROJECT,
                POU,
                Argument("goal", "What the restructuring should achieve.", False),
                Argument("task", "The task the POU runs in, when its cycle time matters.", False, completes="task"),
            ),
            _restructure_pou,
        ),
        Prompt(
            "fix_findings",
            "Fix a project's findings",
            "Guidance for clearing the problems project.check reports, smallest change first.",
            (
                PROJECT,
                Argument("pou", "A POU to start with.", False, completes="pou"),
                Argument("variable", "A variable whose findings to fix first.", False, completes="variable"),
            ),
            _fix_findings,
        ),
    )
}


def register(prompt: Prompt) -> Prompt:
    """Offer one more prompt (listed after those before it)."""
    makers = [maker for maker in (prompt.text, prompt.render, prompt.converse) if maker is not None]
    if prompt.name in PROMPTS or len(makers) != 1:
        raise ValueError(
            f"prompt {prompt.name} is registered twice, or has not exactly one of text, render and converse"
        )
    PROMPTS[prompt.name] = prompt
    return prompt


def prompts_list(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    resources.page_offset(params.get("cursor"), "prompts/list")  # one page holds them all; a cursor must be one
    page: dict[str, Any] = {"prompts": [prompt.descriptor() for prompt in PROMPTS.values()]}
    # The same prompts for everyone (a prompt's project is an argument), fixed by the server's code.
    return caching.STATIC.apply(ctx, page)


def find_prompt(name: Any) -> Prompt:
    prompt = PROMPTS.get(name) if isinstance(name, str) else None
    if prompt is None:
        raise RpcError(
            INVALID_PARAMS, f"Unknown prompt {str(name)[:100]!r}. Call prompts/list for the prompts this server offers."
        )
    return prompt


def prompts_get(ctx: CallContext, params: dict[str, Any]) -> dict[str, Any]:
    raw = params.get("arguments") or {}
    name = params.get("name")
    given = list(raw.items())[:10] if isinstance(raw, dict) else []
    audit_arguments = {"name": str(name)[:100], **{str(k)[:100]: str(v)[:500] for k, v in given}}

    def get() -> dict[str, Any]:
        prompt = find_prompt(name)
        arguments = _arguments(prompt, raw)
        if prompt.names_project:
            arguments["project"] = granted_project(ctx, arguments["project"], params).slug
        if prompt.converse is None:
            return {"description": prompt.description, "messages": prompt.messages(arguments)}
        rounds = dialogue.Rounds.open(ctx, f"prompt:{prompt.name}", arguments, params) if ctx.stateless else None
        messages = dialogue.run_rounds(ctx, prompt.converse(arguments), rounds)
        if isinstance(messages, dialogue.InputRequired):
            return messages.result
        return {"description": prompt.description, "messages": messages}

    return audited(ctx, "prompts/get", audit_arguments, get)


def _arguments(prompt: Prompt, raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) and len(v) <= 500 for v in raw.values()):
        raise RpcError(
            INVALID_PARAMS, f"Invalid params: the arguments of {prompt.name} are strings of at most 500 characters."
        )
    known = {a.name for a in prompt.arguments}
    unknown = sorted(set(raw) - known)
    missing = [a.name for a in prompt.arguments if a.required and not raw.get(a.name)]
    if unknown or missing:
        problem = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params for prompt {prompt.name}: {problem}. It takes {', '.join(sorted(known))}; see prompts/list.",
        )
    return {key: value.strip() for key, value in raw.items()}
