"""Who may reach the MCP server and what: client tokens, MCP sessions, the master switch, and the
per-session grants operators decide (DESIGN sections 5 and 6).

Both edges stand on it: the MCP edge authenticates clients, opens sessions and applies the gates on every
call; the operators' screens, API and commands show and decide them. It imports neither edge.
"""
