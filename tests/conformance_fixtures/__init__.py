"""The official MCP conformance suite's fixtures: its named test tools, resources and prompts, as a Django app
that only the conformance tests' settings (`tests.conformance_fixtures.settings`) install, never a deployment.

`python3 scripts/conformance.py suite URL` runs the suite's scenarios against a server; the ones named after a
fixture (`tools-call-image`, `resources-read-text`, `prompts-get-with-args`, ...) need what this app registers
through the same registries the real tools, resources and prompts use (`mcp_api.registry`,
`mcp_api.resources`, `mcp_api.prompts`). tests/e2e/test_conformance.py starts a live server with these settings.
"""
