"""An agent whose tools are MCP servers only: the reference filesystem server
(`@modelcontextprotocol/server-filesystem`, run with node) on a small workspace.

    python -m examples.mcp_files_agent WORKSPACE > mcp.json   # the mcpServers file
    rewind worker --mcp-config mcp.json [--approve-destructive]
    rewind start --task "$(python -c 'from examples.mcp_files_agent import TASK; print(TASK)')"
    rewind demo --mcp                                          # all of it, offline

No @tool function is involved: the worker lists the server's tools at start and
offers them as fs__read_text_file, fs__edit_file, ...; their annotations decide
what is cached (the reads), what is an effect reused on fork and rollback (the
edit and the write) and what is never sent twice (the edit: not idempotent).
Without OPENAI_API_KEY the scripted offline model plays `script_turns()`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from workflows.vocabulary.errors import ConfigError

PACKAGE = "@modelcontextprotocol/server-filesystem"
SCRIPT_NAME = "mcp-files"
TASK = "In the workspace, tick off the 'ship MCP tools' item of todo.md and write a one-line summary.md of what is left."
PROMPT = ("You keep a small workspace of notes. Use the filesystem tools: read before you change anything, "
          "change files with the smallest edit, and finish with what you did.")
TODO = "# todo\n\n- [ ] ship MCP tools\n- [ ] write the docs\n"


def filesystem_server_command(workspace: Path, search: list[Path] | None = None) -> list[str]:
    """The command that starts the filesystem server on `workspace`; a ConfigError says what is missing."""
    node = shutil.which("node")
    if node is None:
        raise ConfigError(f"the MCP demo runs {PACKAGE} with node, and node is not installed "
                          "(e.g. apt-get install nodejs npm), then: npm install --prefix .mcp-servers " + PACKAGE)
    places = list(search or [])
    if os.environ.get("REWIND_MCP_SERVERS_DIR"):
        places.insert(0, Path(os.environ["REWIND_MCP_SERVERS_DIR"]))
    places += [Path.cwd() / ".mcp-servers", Path(__file__).resolve().parents[1] / ".mcp-servers"]
    for place in places:
        script = place / "node_modules" / PACKAGE / "dist" / "index.js"
        if script.is_file():
            return [node, str(script), str(workspace)]
    installed = shutil.which("mcp-server-filesystem")
    if installed is not None:
        return [installed, str(workspace)]
    raise ConfigError(f"the MCP demo needs the npm package {PACKAGE}, which is not installed here: "
                      f"npm install --prefix .mcp-servers {PACKAGE} (or npm install -g {PACKAGE})")


def mcp_config(workspace: Path) -> dict[str, Any]:
    command = filesystem_server_command(workspace)
    return {"mcpServers": {"fs": {"command": command[0], "args": command[1:]}}}


def prepare_workspace(workspace: Path) -> None:
    """A fresh workspace: todo.md with two open items, no summary yet."""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "todo.md").write_text(TODO)
    (workspace / "summary.md").unlink(missing_ok=True)


def script_turns(workspace: Path) -> list[dict[str, Any]]:
    """What the offline model does: list, read, read again (the run's cache answers), edit, write."""
    todo = str(workspace / "todo.md")
    return [
        {"tool_calls": [{"name": "fs__list_directory", "arguments": {"path": str(workspace)}}]},
        {"tool_calls": [{"name": "fs__read_text_file", "arguments": {"path": todo}}]},
        {"tool_calls": [{"name": "fs__read_text_file", "arguments": {"path": todo}}]},
        {"tool_calls": [{"name": "fs__edit_file", "arguments": {
            "path": todo, "edits": [{"oldText": "- [ ] ship MCP tools", "newText": "- [x] ship MCP tools"}]}}]},
        {"tool_calls": [{"name": "fs__write_file", "arguments": {
            "path": str(workspace / "summary.md"), "content": "Left to do: write the docs.\n"}}]},
        {"content": "Ticked off 'ship MCP tools' in todo.md and wrote summary.md: the docs are left to write."},
    ]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m examples.mcp_files_agent WORKSPACE > mcp.json")
    try:
        print(json.dumps(mcp_config(Path(sys.argv[1]).resolve()), indent=2))
    except ConfigError as exc:
        sys.exit(f"rewind: {exc}")
