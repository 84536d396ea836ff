"""`rewind demo --mcp` as a user runs it: offline, in an empty folder, the agent of
examples.mcp_files_agent whose only tools are the filesystem MCP server's; and, without
node, one line saying what it needs."""

from __future__ import annotations

import asyncio
import re
import subprocess

from as_user import BIN, one_line_error, rewind_json, user_env
from mcp_servers import filesystem_server_command


async def _demo(cwd, env) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "demo", "--mcp", cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 240)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_the_mcp_demo_edits_the_workspace_once(tmp_path) -> None:
    filesystem_server_command(tmp_path)  # skips (or fails in CI) without node and the npm server
    env = user_env(tmp_path)
    code, text, err = await _demo(tmp_path, env)
    assert code == 0, text + err
    assert "fs__edit_file                    side effect, sent once" in text, text
    assert "fs__read_text_file               read-only" in text
    assert "finished: completed" in text and "1 served from the run's cache" in text, text
    todo = (tmp_path / ".rewind" / "mcp-demo" / "todo.md").read_text()
    assert todo.count("- [x] ship MCP tools") == 1 and "- [ ] ship MCP tools" not in todo
    run_id = re.search(r"run (\S+) started", text).group(1)  # type: ignore[union-attr]
    shown = await rewind_json(tmp_path, env, "show", f"{run_id}:main:4")
    (edit,) = [r for r in shown["tool_call_cache"] if r["tool_name"] == "fs__edit_file"]
    assert edit["mcp"]["annotations"]["idempotentHint"] is False and edit["side_effects"] is True


async def test_without_node_the_demo_says_what_it_needs(tmp_path) -> None:
    env = user_env(tmp_path, PATH=str(BIN))  # no /usr/bin: no node
    code, out, err = await _demo(tmp_path, env)
    one_line_error(code, err, "node is not installed", "@modelcontextprotocol/server-filesystem", prefix="rewind: ")
    assert not (tmp_path / ".rewind" / "temporal.db").exists()  # nothing started
