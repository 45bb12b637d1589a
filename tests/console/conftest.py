"""The console's live feed and draft screens are tested in-process like the MCP transports, with the same
fixtures: the asyncio backend and a fresh channel layer for each test."""

from tests.mcp_api.conftest import anyio_backend, fresh_channel_layer

__all__ = ["anyio_backend", "fresh_channel_layer"]
