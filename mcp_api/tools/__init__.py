"""The MCP tools, one module per family, each declaring its tools into `mcp_api.registry`.

Importing this package (which importing any tool module does first) declares every tool, in this order,
which is the order `tools/list` shows: the tools that answer before consent first. The direct-write tools
are declared too but join the registry only in override deployments, through `ensure_loaded`.
"""

from __future__ import annotations

from django.conf import settings

# isort: off
from mcp_api.tools import server  # noqa: F401  (first: tools/list keeps registration order)
from mcp_api.tools import projects  # noqa: F401
from mcp_api.tools import drafts  # noqa: F401
from mcp_api.tools import editor  # noqa: F401
from mcp_api.tools import team  # noqa: F401
from mcp_api.tools import monitor  # noqa: F401
from mcp_api.tools.writes import register_write_tools

# isort: on


def ensure_loaded() -> None:
    """Complete the registry for this deployment before the first call: the direct-write tools join it when
    the process started with FORGE_OVERRIDE_SECURITIES=1 (read once at start)."""
    if settings.FORGE_OVERRIDE_SECURITIES:
        register_write_tools()
