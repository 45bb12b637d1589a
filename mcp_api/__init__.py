"""The MCP edge: JSON-RPC, protocol revisions, transports, sessions, client identity and the tools."""
