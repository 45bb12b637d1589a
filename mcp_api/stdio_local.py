"""What `manage.py mcp_stdio` answers itself, when no server answers for it: the offline and unbound modes.

- **offline** (`--offline-project FILE`): the project read tools over a local PLCopen file, with the server's
  tool names, argument schemas and queries (`projects.reads`, `projects.plcopen.queries`), every result naming
  `view: accepted`. The file is only ever read. Every tool that changes something is refused with the reason:
  the server is the only writer of a project, so a change needs it. This mode never connects.
- **unbound** (no `--url`, and no server of this data folder running yet): only `session.status` answers; every
  other tool says no server is running and that the session connects by itself once one is.

The answers keep the server's shape: a tool's result has structured content and the same JSON as text, and a
refusal is a result with `isError` and a `FORGE_ERR_*` code, never a JSON-RPC error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_core.errors import Refusal
from mcp_api import registry, tools  # noqa: F401  (tools: registers every tool in the registry)
from mcp_api.jsonrpc import METHOD_NOT_FOUND, RpcError
from mcp_api.protocol import SERVER_VERSION
from mcp_api.revisions import negotiate
from mcp_api.tools.common import read
from projects import document_reads, placement, reads
from projects.plcopen import documents, queries, tc6
from projects.services import ProjectRefused, checked_document, clean_slug

OFFLINE = "offline"
UNBOUND = "unbound"
CONNECTED = "connected"

OFFLINE_READS = (
    "project.list",
    "project.overview",
    "project.find",
    "project.get_element",
    "project.list_variables",
    "project.check",
    "project.export",
    "project.suggest_placement",
)
STATUS = "session.status"

MODE_INSTRUCTIONS = {
    OFFLINE: (
        "OFFLINE MODE: this session reads one local PLCopen file ({name}) with no Forge server; every answer is "
        "the accepted file (view: accepted). Nothing can be changed here: the Forge server is the only writer "
        "of a project. To propose changes, start the server (manage.py runmcp) and run mcp_stdio without "
        "--offline-project. session.status says the mode."
    ),
    UNBOUND: (
        "UNBOUND: no Forge server of this data folder is running yet, so only session.status answers. Start the "
        "server (manage.py runmcp): the next call connects to it by itself, with no restart of this client. "
        "session.status says the mode."
    ),
}


def rpc_error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def tool_answer(structured: dict[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": json.dumps(structured, ensure_ascii=False, default=str)}],
        "structuredContent": structured,
        "isError": is_error,
    }


@dataclass
class OfflineProject:
    """A local PLCopen file, read afresh when its bytes change, never written."""

    path: Path
    slug: str
    _fingerprint: str = ""
    _document: documents.ProjectDocument | None = None

    @classmethod
    def open(cls, path: Path) -> OfflineProject:
        """The file, checked once now (ProjectRefused or OSError say why it cannot be served)."""
        try:
            slug = clean_slug(path.stem)
        except ProjectRefused:
            slug = "offline"
        project = cls(path=path.resolve(), slug=slug)
        project.document()
        return project

    def document(self) -> documents.ProjectDocument:
        data = self.path.read_bytes()
        fingerprint = documents.fingerprint(data)
        if self._document is None or fingerprint != self._fingerprint:
            self._document, self._fingerprint = checked_document(data), fingerprint
        return self._document

    def frame(self) -> dict[str, Any]:
        return {"view": reads.ACCEPTED, "project": self.slug, "offline": True, "file_sha256": self._fingerprint}

    def name(self) -> str:
        header = self.document().root.find(tc6.q("contentHeader"))
        return (header.get("name", "") if header is not None else "") or self.path.stem


def _offline_read(project: OfflineProject, name: str, args: Any) -> dict[str, Any]:
    """One read tool's answer over the offline file: the server's query, framed as the accepted view."""
    if name == "project.list":
        return {"projects": [{"project": project.slug, "name": project.name()}], "offline": True}
    if args.project.strip().lower() != project.slug:
        raise Refusal(
            "FORGE_ERR_NOT_FOUND",
            f"There is no project {args.project!r} here: offline mode serves only {project.slug!r} (the file given "
            "with --offline-project). Call project.list.",
        )
    if args.view != reads.ACCEPTED:
        raise Refusal(
            "FORGE_ERR_OFFLINE_READ_ONLY",
            "Offline mode has no working draft: drafts live in the Forge server. Ask for view 'accepted', or start "
            "the server and run mcp_stdio without --offline-project.",
        )
    document = project.document()
    query: dict[str, Any]
    if name == "project.overview":
        query = queries.overview(document)
    elif name == "project.find":
        query = queries.find(
            document, text=args.text, kind=args.kind, type=args.type, limit=args.limit, cursor=args.cursor
        )
    elif name == "project.get_element":
        query = queries.get_element(document, args.element_id, body_limit=args.body_limit, cursor=args.cursor)
    elif name == "project.list_variables":
        query = queries.list_variables(
            document, scope=args.scope, section=args.section, limit=args.limit, cursor=args.cursor
        )
    elif name == "project.check":
        query = document_reads.check_page(document, limit=args.limit, offset=args.offset)
    elif name == "project.export":
        query = document_reads.export_page(document, offset=args.offset)
    else:
        query = placement.suggest_placement(document, args.topic, args.limit)
    return {**project.frame(), **query}


class LocalServer:
    """The MCP methods this process answers itself, in one mode (offline or unbound)."""

    def __init__(self, mode: str, project: OfflineProject | None = None) -> None:
        self.mode = mode
        self.project = project
        self.offered = (*OFFLINE_READS, STATUS) if mode == OFFLINE else (STATUS,)
        self.note = ""  # what session.status adds (an interrupted call, a server that went away)
        self.several = ""  # unbound because several servers run: why, and how to pick one

    def instructions(self) -> str:
        name = self.project.path.name if self.project is not None else ""
        return MODE_INSTRUCTIONS[self.mode].format(name=name)

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The response to one request (None for a notification or a client's response)."""
        request_id = message.get("id")
        method = message.get("method")
        if not isinstance(method, str) or request_id is None:
            return None
        params = message.get("params")
        try:
            return {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": self._result(method, params if isinstance(params, dict) else {}),
            }
        except RpcError as exc:
            return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_error()}

    def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return {
                "protocolVersion": negotiate(params.get("protocolVersion")),
                "capabilities": {"tools": {"listChanged": self.mode == UNBOUND}},
                "serverInfo": {"name": "forge-mcp-stdio", "title": "Forge MCP (stdio)", "version": SERVER_VERSION},
                "instructions": self.instructions(),
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [registry.REGISTRY[name].descriptor() for name in self.offered]}
        if method == "tools/call":
            return self.call(params.get("name"), params.get("arguments"))
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not found: {method[:100]} is not offered in {self.mode} mode (only the tools are). "
            + ("Start the Forge server to get it." if self.mode == UNBOUND else "Connect to the Forge server for it."),
        )

    def call(self, name: Any, raw: Any) -> dict[str, Any]:
        tool = registry.find_tool(name)
        if tool is None:
            raise registry.unknown_tool(name)
        if name not in self.offered:
            return tool_answer(self.not_offered(tool).structured(), is_error=True)
        arguments = tool.parse(raw)
        if name == STATUS:
            return tool_answer(self.status())
        assert self.project is not None  # only the offline mode offers the reads
        try:
            self.project.document()  # the file as it is now (an engineering tool may have saved it since)
        except OSError as exc:
            refusal = Refusal(
                "FORGE_ERR_NOT_FOUND",
                f"The file {self.project.path.name} cannot be read now ({exc.strerror}); restore it and ask again.",
            )
            return tool_answer(refusal.structured(), is_error=True)
        except ProjectRefused as exc:
            refusal = Refusal("FORGE_ERR_NOT_FOUND", f"The file {self.project.path.name} cannot be served: {exc}")
            return tool_answer(refusal.structured(), is_error=True)
        try:
            return tool_answer(read(_offline_read, self.project, tool.name, arguments))
        except Refusal as refusal:
            return tool_answer(refusal.structured(), is_error=True)

    def not_offered(self, tool: registry.Tool) -> Refusal:
        if self.mode == UNBOUND and self.several:
            return Refusal("FORGE_ERR_SEVERAL_SERVERS", f"{tool.name} was not sent: {self.several}", mode=UNBOUND)
        if self.mode == UNBOUND and self.note:
            return Refusal("FORGE_ERR_NO_SERVER", f"{tool.name} was not sent: {self.note}", mode=UNBOUND)
        if self.mode == UNBOUND:
            return Refusal(
                "FORGE_ERR_NO_SERVER",
                f"{tool.name} needs the Forge server, and none of this data folder is running. Start it "
                "(manage.py runmcp) and call again: this session connects by itself, no client restart needed.",
                mode=UNBOUND,
            )
        if not tool.read_only:
            return Refusal(
                "FORGE_ERR_OFFLINE_READ_ONLY",
                f"{tool.name} changes something, and offline mode only reads the file: the Forge server is the "
                "only writer of a project (it checks each change and a person accepts it). Start the server "
                "(manage.py runmcp) and run mcp_stdio without --offline-project to propose changes.",
                mode=OFFLINE,
            )
        return Refusal(
            "FORGE_ERR_OFFLINE_READ_ONLY",
            f"{tool.name} needs what only the Forge server keeps (drafts, confirmations, the team, the runtime); "
            "offline mode has the accepted file only. Start the server and run mcp_stdio without "
            "--offline-project.",
            mode=OFFLINE,
        )

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"mode": self.mode, "connected": False, "transport": "stdio"}
        if self.project is not None:
            status.update(project=self.project.slug, file=self.project.path.name, view=reads.ACCEPTED)
        status["what_to_do"] = (
            "Reads only; start the Forge server and run mcp_stdio without --offline-project to propose changes."
            if self.mode == OFFLINE
            else "Start the Forge server (manage.py runmcp); the next call connects to it by itself."
        )
        if self.several:
            status["what_to_do"] = self.several
        if self.note:
            status["note"] = self.note
        return status
