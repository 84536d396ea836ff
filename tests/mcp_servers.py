"""Real MCP servers for the MCP tests: the npm filesystem server (run with node; .ci/run
installs it into .mcp-servers/ when missing) and the PyPI time and git servers (the test extra)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILESYSTEM_JS = "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


def filesystem_server_command(root: Path) -> list[str]:
    """`node …/server-filesystem/dist/index.js ROOT`, or skip saying what is missing
    (REWIND_TEST_REQUIRE_MCP=1, as in CI: fail instead)."""
    node = shutil.which("node")
    where = Path(os.environ.get("REWIND_MCP_SERVERS_DIR", REPO / ".mcp-servers")) / FILESYSTEM_JS
    missing = ("node is not installed (apt-get install nodejs)" if node is None else
               f"the npm package @modelcontextprotocol/server-filesystem is not in {where.parents[3]} "
               f"(npm install --prefix {where.parents[3]} @modelcontextprotocol/server-filesystem, as .ci/run does)"
               if not where.is_file() else None)
    if missing:
        if os.environ.get("REWIND_TEST_REQUIRE_MCP"):
            pytest.fail(f"the filesystem MCP server is required here: {missing}")
        pytest.skip(f"the filesystem MCP server cannot run: {missing}")
    return [str(node), str(where), str(root)]


def python_server_command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


RELAY = Path(__file__).with_name("mcp_stdio_relay.py")
