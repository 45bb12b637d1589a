"""What the conformance suite's scenarios call by name, as its scenario descriptions specify them: tools that
answer each content type, report progress, log, fail, ask the client to sample or to elicit; open resources
(static text and binary, a template, one to subscribe to); prompts with and without arguments, an image and
an embedded resource.

Every call passes the same edge as a real one (authentication, the session, the registry's parsing, the
audit row); none of them reads or changes a project.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import wave
import zlib
from collections.abc import Generator
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic.json_schema import GenerateJsonSchema

from forge_core import live
from forge_core.errors import Refusal
from mcp_api import dialogue, prompts, registry, resources
from mcp_api import logging as client_logging
from mcp_api.prompts import Argument, Prompt
from mcp_api.protocol import CallContext
from mcp_api.resources import OpenResource, OpenTemplate
from mcp_api.results import Content

JSON_SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def png_pixel(red: int, green: int, blue: int) -> bytes:
    """A 1x1 PNG of one colour (signature, IHDR, IDAT, IEND), built rather than stored."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8 bits, truecolour
    pixels = zlib.compress(bytes([0, red, green, blue]))  # one scanline: filter 0, then RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def wav_silence(milliseconds: int = 10, rate: int = 8000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(rate)
        out.writeframes(b"\x80" * (rate * milliseconds // 1000))
    return buffer.getvalue()


RED_PIXEL = base64.b64encode(png_pixel(255, 0, 0)).decode()
SILENCE = base64.b64encode(wav_silence()).decode()


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


IMAGE = {"type": "image", "data": RED_PIXEL, "mimeType": "image/png"}


# --- tools -----------------------------------------------------------------------------------------------


def simple_text(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Answers one text block (conformance fixture)."""
    return Content((text("This is a simple text response for testing."),))


def image_content(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Answers a 1x1 red PNG image (conformance fixture)."""
    return Content((IMAGE,))


def audio_content(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Answers ten milliseconds of silence as audio/wav (conformance fixture)."""
    return Content(({"type": "audio", "data": SILENCE, "mimeType": "audio/wav"},))


def embedded_resource(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Answers an embedded text resource (conformance fixture)."""
    resource = {
        "uri": "test://embedded-resource",
        "mimeType": "text/plain",
        "text": "This is an embedded resource content.",
    }
    return Content(({"type": "resource", "resource": resource},))


def multiple_content_types(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Answers text, an image and an embedded JSON resource (conformance fixture)."""
    data = json.dumps({"test": "data", "value": 123})
    resource = {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": data}
    return Content((text("Multiple content types test:"), IMAGE, {"type": "resource", "resource": resource}))


def error_handling(ctx: CallContext, arguments: registry.NoArguments) -> dict[str, Any]:
    """Always fails, as a tool error result (conformance fixture)."""
    raise Refusal("FORGE_ERR_FIXTURE_FAILED", "This tool intentionally returns an error for testing")


def tool_with_logging(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Logs three messages at info while it runs (conformance fixture); a session hears them once it set a level
    with logging/setLevel."""
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        client_logging.emit(ctx, "info", "conformance", message)
    return Content((text("Logged three messages at info."),))


def tool_with_progress(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Reports progress 0, 50 and 100 of 100 while it runs, about 50 ms apart (conformance fixture)."""
    for done in (0, 50, 100):
        if done:
            yield dialogue.pause(0.05)
        yield dialogue.progress(done, 100)
    return Content((text("Progress reported: 0, 50 and 100 of 100."),))


class SamplingArguments(registry.Arguments):
    prompt: str = Field(description="The prompt the client's model is asked to answer.", max_length=10_000)


def sampling(ctx: CallContext, arguments: SamplingArguments) -> Generator[Any, Any, Content]:
    """Asks the client's model to answer the prompt (sampling/createMessage) and answers what it said
    (conformance fixture)."""
    message = {"role": "user", "content": text(arguments.prompt)}
    answer = yield dialogue.create_message([message], max_tokens=100)
    said = answer.get("content") if isinstance(answer, dict) else None
    said_text = said.get("text") if isinstance(said, dict) else None
    return Content((text(f"LLM response: {said_text if isinstance(said_text, str) else json.dumps(said)}"),))


class ElicitationArguments(registry.Arguments):
    message: str = Field(description="What the client shows its user.", max_length=10_000)


def _elicited(answer: Any, prefix: str) -> Content:
    action = answer.get("action") if isinstance(answer, dict) else None
    content = answer.get("content") if isinstance(answer, dict) else None
    return Content((text(f"{prefix}action={action}, content={json.dumps(content)}"),))


def elicitation(ctx: CallContext, arguments: ElicitationArguments) -> Generator[Any, Any, Content]:
    """Asks the client's user for a user name and an e-mail address (elicitation/create) and answers what the
    user did (conformance fixture)."""
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = yield dialogue.elicit(arguments.message, schema)
    return _elicited(answer, "User response: ")


def elicitation_defaults(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks the client's user for values of each primitive type, each with a default (SEP-1034; conformance
    fixture)."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    answer = yield dialogue.elicit("Please review and update the form fields with defaults", schema)
    return _elicited(answer, "Elicitation completed: ")


def elicitation_enums(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks the client's user to choose from each of the five kinds of enumeration (SEP-1330; conformance
    fixture)."""

    def titled(prefix: str, titles: tuple[str, ...]) -> list[dict[str, str]]:
        return [{"const": f"{prefix}{n}", "title": title} for n, title in enumerate(titles, start=1)]

    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": titled("value", ("First Option", "Second Option", "Third Option")),
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {"anyOf": titled("value", ("First Choice", "Second Choice", "Third Choice"))},
            },
        },
    }
    answer = yield dialogue.elicit("Please choose from each kind of list", schema)
    return _elicited(answer, "Elicitation completed: ")


class _LowerCaseDefinitions(GenerateJsonSchema):
    """Names a nested model's definition as the scenario expects it (`address`, not pydantic's `Address`)."""

    def normalize_name(self, name: str) -> str:
        return super().normalize_name(name).lower()


class Address(BaseModel):
    street: str | None = None
    city: str | None = None


# What pydantic cannot say of the arguments below, said in JSON Schema 2020-12 (composition, a condition, an
# anchor) and enforced by the model's validator, so the published schema and the validation agree.
CONTACT_RULES: dict[str, Any] = {
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
}


class JsonSchemaArguments(registry.Arguments):
    name: str | None = None
    address: Address | None = None
    contactMethod: Literal["phone", "email"] | None = None
    phone: str | None = None
    email: str | None = None

    @model_validator(mode="after")
    def _reachable(self) -> JsonSchemaArguments:
        wanted = "phone" if self.contactMethod == "phone" else "email"
        if getattr(self, wanted) is None:
            raise ValueError(f"give {wanted} (a phone number with contactMethod phone, otherwise an email address)")
        return self

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        kwargs["schema_generator"] = _LowerCaseDefinitions
        schema = super().model_json_schema(*args, **kwargs)
        schema["$defs"]["address"]["$anchor"] = "addressDef"
        return {"$schema": JSON_SCHEMA_2020_12, **schema, **CONTACT_RULES}


def json_schema_tool(ctx: CallContext, arguments: JsonSchemaArguments) -> dict[str, Any]:
    """Takes arguments described with JSON Schema 2020-12 ($schema, $defs with an $anchor, additionalProperties,
    allOf/anyOf, if/then/else) and echoes them (conformance fixture)."""
    return {"received": arguments.model_dump(mode="json", exclude_none=True)}


# --- 2026-07-28: input_required rounds (SEP-2322) and the stateless diagnostics (SEP-2575) ---------------------

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _accepted(answer: Any, field: str) -> str:
    content = answer.get("content") if isinstance(answer, dict) and answer.get("action") == "accept" else None
    value = content.get(field) if isinstance(content, dict) else None
    return value if isinstance(value, str) else "(not given)"


def _sampled(answer: Any) -> str:
    said = answer.get("content") if isinstance(answer, dict) else None
    value = said.get("text") if isinstance(said, dict) else None
    return value if isinstance(value, str) else "(no text)"


def _roots(answer: Any) -> list[str]:
    roots = answer.get("roots") if isinstance(answer, dict) else None
    found = [root.get("uri") for root in roots if isinstance(root, dict)] if isinstance(roots, list) else []
    return [uri for uri in found if isinstance(uri, str)]


def rounds_elicitation(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks the user's name (`user_name`) and greets them (conformance fixture)."""
    answer = yield dialogue.elicit("What is your name?", NAME_SCHEMA, key="user_name")
    return Content((text(f"Hello, {_accepted(answer, 'name')}!"),))


def rounds_sampling(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks the client's model a question (`capital_question`) and answers what it said (conformance fixture)."""
    question = {"role": "user", "content": text("What is the capital of France?")}
    answer = yield dialogue.create_message([question], max_tokens=100, key="capital_question")
    return Content((text(f"The model said: {_sampled(answer)}"),))


def rounds_list_roots(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks the client for its roots (`client_roots`) and names them (conformance fixture)."""
    answer = yield dialogue.list_roots(key="client_roots")
    return Content((text(f"The client's roots: {', '.join(_roots(answer)) or '(none)'}"),))


def rounds_request_state(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks for a confirmation (`confirm`); its answer only comes back with the sealed request state, which the
    server checked (conformance fixture)."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    answer = yield dialogue.elicit("Please confirm", schema, key="confirm")
    content = answer.get("content") if isinstance(answer, dict) else None
    return Content((text(f"state-ok: confirmed={json.dumps((content or {}).get('ok'))}"),))


def rounds_multiple(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks for a name, a model's greeting and the client's roots at once (conformance fixture)."""
    greeting = {"role": "user", "content": text("Generate a greeting")}
    answers = yield dialogue.ask_all(
        {
            "user_name": dialogue.elicit("What is your name?", NAME_SCHEMA),
            "greeting": dialogue.create_message([greeting], max_tokens=50),
            "client_roots": dialogue.list_roots(),
        }
    )
    name, said = _accepted(answers["user_name"], "name"), _sampled(answers["greeting"])
    return Content((text(f"{said} {name}; roots: {', '.join(_roots(answers['client_roots'])) or '(none)'}"),))


def rounds_multi_round(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks for a name (`step1`), then for a colour (`step2`): two rounds (conformance fixture)."""
    first = yield dialogue.elicit("Step 1: What is your name?", NAME_SCHEMA, key="step1")
    colour = {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}
    second = yield dialogue.elicit("Step 2: What is your favorite color?", colour, key="step2")
    return Content((text(f"{_accepted(first, 'name')} likes {_accepted(second, 'color')}."),))


def rounds_tampered_state(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks for a confirmation; a changed request state on the way back is refused (conformance fixture)."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    yield dialogue.elicit("Please confirm", schema, key="confirm")
    return Content((text("Confirmed."),))


def rounds_capabilities(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Asks only what the request's client declared it can answer: a user's name, a model's message (conformance
    fixture)."""
    asks: dict[str, dialogue.Ask] = {}
    if dialogue.can_ask(ctx, "elicitation"):
        asks["user_name"] = dialogue.elicit("What is your name?", NAME_SCHEMA)
    if dialogue.can_ask(ctx, "sampling"):
        asks["greeting"] = dialogue.create_message([{"role": "user", "content": text("Say hello")}], max_tokens=50)
    answers = (yield dialogue.ask_all(asks)) if asks else {}
    return Content((text(f"Asked for {', '.join(sorted(answers)) or 'nothing'}."),))


def missing_capability(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Needs the client's model (sampling): a request that does not declare it is refused with -32021
    (conformance fixture)."""
    answer = yield dialogue.create_message([{"role": "user", "content": text("Say hello")}], max_tokens=20)
    return Content((text(f"The model said: {_sampled(answer)}"),))


def streaming_elicitation(ctx: CallContext, arguments: registry.NoArguments) -> Generator[Any, Any, Content]:
    """Reports progress, then asks the user's name: at 2026-07-28 the question is an input request in the result,
    never a request on the response stream (conformance fixture)."""
    yield dialogue.progress(0, 1)
    answer = yield dialogue.elicit("What is your name?", NAME_SCHEMA, key="user_name")
    yield dialogue.progress(1, 1)
    return Content((text(f"Hello, {_accepted(answer, 'name')}!"),))


def logging_tool(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Logs three messages at info: none reaches a client that did not ask for them (conformance fixture)."""
    heard = sum(client_logging.emit(ctx, "info", "conformance", f"Log message {n}") for n in (1, 2, 3))
    return Content((text(f"Logged {heard} of 3 messages."),))


class HeaderArguments(registry.Arguments):
    region: str = Field(
        description="Mirrored into the Mcp-Param-Region header.",
        max_length=200,
        json_schema_extra={"x-mcp-header": "Region"},
    )
    query: str = Field(description="Not mirrored into any header.", max_length=200)
    priority: int = Field(
        default=0,
        description="Mirrored into the Mcp-Param-Priority header.",
        json_schema_extra={"x-mcp-header": "Priority"},
    )


def custom_headers(ctx: CallContext, arguments: HeaderArguments) -> dict[str, Any]:
    """Echoes arguments whose values the client also sends as Mcp-Param headers, which the server checked against
    the body (SEP-2243; conformance fixture)."""
    return {"received": arguments.model_dump(mode="json", exclude_none=True)}


DYNAMIC_TOOL = "test_dynamic_tool"


def dynamic_tool(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Comes and goes with test_trigger_tool_change (conformance fixture)."""
    return Content((text("This tool comes and goes."),))


def trigger_tool_change(ctx: CallContext, arguments: registry.NoArguments) -> Content:
    """Adds test_dynamic_tool to this process's tools, or takes it away again, and tells every open stream that
    the list changed (SEP-2575's listen streams hear notifications/tools/list_changed; conformance fixture)."""
    if registry.REGISTRY.pop(DYNAMIC_TOOL, None) is None:
        registry.tool(DYNAMIC_TOOL, title="test dynamic tool")(dynamic_tool)
        change = "added"
    else:
        change = "removed"
    live.notify_tools_changed()
    return Content((text(f"{DYNAMIC_TOOL} {change}."),))


TOOLS: tuple[tuple[str, Any, type[registry.Arguments]], ...] = (
    ("test_simple_text", simple_text, registry.NoArguments),
    ("test_image_content", image_content, registry.NoArguments),
    ("test_audio_content", audio_content, registry.NoArguments),
    ("test_embedded_resource", embedded_resource, registry.NoArguments),
    ("test_multiple_content_types", multiple_content_types, registry.NoArguments),
    ("test_tool_with_logging", tool_with_logging, registry.NoArguments),
    ("test_error_handling", error_handling, registry.NoArguments),
    ("test_tool_with_progress", tool_with_progress, registry.NoArguments),
    ("test_sampling", sampling, SamplingArguments),
    ("test_elicitation", elicitation, ElicitationArguments),
    ("test_elicitation_sep1034_defaults", elicitation_defaults, registry.NoArguments),
    ("test_elicitation_sep1330_enums", elicitation_enums, registry.NoArguments),
    ("json_schema_2020_12_tool", json_schema_tool, JsonSchemaArguments),
    ("test_input_required_result_elicitation", rounds_elicitation, registry.NoArguments),
    ("test_input_required_result_sampling", rounds_sampling, registry.NoArguments),
    ("test_input_required_result_list_roots", rounds_list_roots, registry.NoArguments),
    ("test_input_required_result_request_state", rounds_request_state, registry.NoArguments),
    ("test_input_required_result_multiple_inputs", rounds_multiple, registry.NoArguments),
    ("test_input_required_result_multi_round", rounds_multi_round, registry.NoArguments),
    ("test_input_required_result_tampered_state", rounds_tampered_state, registry.NoArguments),
    ("test_input_required_result_capabilities", rounds_capabilities, registry.NoArguments),
    ("test_missing_capability", missing_capability, registry.NoArguments),
    ("test_streaming_elicitation", streaming_elicitation, registry.NoArguments),
    ("test_logging_tool", logging_tool, registry.NoArguments),
    ("test_custom_headers", custom_headers, HeaderArguments),
)


# --- resources and prompts --------------------------------------------------------------------------------


def _template_data(values: dict[str, str]) -> dict[str, str]:
    item = values["id"]
    return {"text": json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})}


RESOURCES = (
    OpenResource(
        "test://static-text",
        "static-text",
        "Static text",
        "A text resource (conformance fixture).",
        "text/plain",
        lambda: {"text": "This is the content of the static text resource."},
    ),
    OpenResource(
        "test://static-binary",
        "static-binary",
        "Static binary",
        "A 1x1 red PNG (conformance fixture).",
        "image/png",
        lambda: {"blob": RED_PIXEL},
    ),
    OpenResource(
        "test://watched-resource",
        "watched-resource",
        "Watched resource",
        "A resource to subscribe to; it never changes (conformance fixture).",
        "text/plain",
        lambda: {"text": "This resource is watched."},
    ),
)
TEMPLATE = OpenTemplate(
    "test://template/{id}/data",
    "template-data",
    "Data by id",
    "JSON naming the id it was read with (conformance fixture).",
    "application/json",
    _template_data,
)


def _embedded_resource_messages(arguments: dict[str, str]) -> list[dict[str, Any]]:
    resource = {
        "uri": arguments["resourceUri"],
        "mimeType": "text/plain",
        "text": "Embedded resource content for testing.",
    }
    return [
        {"role": "user", "content": {"type": "resource", "resource": resource}},
        {"role": "user", "content": text("Please process the embedded resource above.")},
    ]


def _prompt_with_context(arguments: dict[str, str]) -> Generator[Any, Any, list[dict[str, Any]]]:
    schema = {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]}
    answer = yield dialogue.elicit("What context should the prompt use?", schema, key="user_context")
    return [{"role": "user", "content": text(f"Use this context: {_accepted(answer, 'context')}")}]


PROMPTS = (
    Prompt(
        "test_simple_prompt",
        "Simple prompt",
        "A prompt with no arguments (conformance fixture).",
        (),
        text=lambda arguments: "This is a simple prompt for testing.",
    ),
    Prompt(
        "test_prompt_with_arguments",
        "Prompt with arguments",
        "A prompt that repeats its two arguments (conformance fixture).",
        (Argument("arg1", "First test argument"), Argument("arg2", "Second test argument")),
        text=lambda arguments: f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'",
    ),
    Prompt(
        "test_prompt_with_embedded_resource",
        "Prompt with an embedded resource",
        "A prompt that embeds a text resource at the address given (conformance fixture).",
        (Argument("resourceUri", "URI of the resource to embed"),),
        render=_embedded_resource_messages,
    ),
    Prompt(
        "test_prompt_with_image",
        "Prompt with an image",
        "A prompt carrying a 1x1 red PNG (conformance fixture).",
        (),
        render=lambda arguments: [
            {"role": "user", "content": IMAGE},
            {"role": "user", "content": text("Please analyze the image above.")},
        ],
    ),
    Prompt(
        "test_input_required_result_prompt",
        "Prompt that asks for context",
        "A prompt that asks the user for its context first (2026-07-28 input_required; conformance fixture).",
        (),
        converse=_prompt_with_context,
    ),
)


def register_all() -> None:
    """Register every fixture, once per process (the app's `ready`)."""
    if "test_simple_text" in registry.REGISTRY:
        return
    for name, handler, arguments in TOOLS:
        registry.tool(name, title=name.replace("_", " "), arguments=arguments)(handler)
    # It changes what tools/list says (this process's registry), so it is not marked read-only.
    registry.tool("test_trigger_tool_change", title="test trigger tool change", read_only=False, idempotent=False)(
        trigger_tool_change
    )
    for resource in RESOURCES:
        resources.register_open_resource(resource)
    resources.register_open_template(TEMPLATE)
    for prompt in PROMPTS:
        prompts.register(prompt)
