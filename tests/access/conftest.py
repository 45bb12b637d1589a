"""Fixtures of the access tests that drive the MCP edge in-process: the asyncio backend and a fresh channel
layer per test, as the transport tests have them."""

from tests.mcp_api.conftest import anyio_backend, fresh_channel_layer

__all__ = ["anyio_backend", "fresh_channel_layer"]
