"""What operators use (DESIGN sections 2 and 14): the console site and its dashboard, the console's live
feed, the operator REST API and operator tokens, the screens of tokens, sessions, the switch and access
requests, working-draft review and acceptance, and the operators' management commands.

It stands beside the MCP edge (`mcp_api`) and neither imports the other: what both need lives below them
(`access`, `forge_core`). Nothing imports it but the composition root (`forge_site`).
"""
