"""MCP servers as a user meets them, with the PyPI reference servers (time, git) and a
server of the tests' own (tests/mcp_test_server.py) for what those do not show: the
worker and `rewind` as subprocesses in empty folders, configured by environment only.

A bad configuration stops the worker with one line naming the file and the key; a
destructive git call waits for `rewind approve` under --approve-destructive and its
rejection reaches the model; the idempotency key reaches the server in `_meta`; an
image is stored by reference; a stdio server that died while the worker held its
session is restarted on the next call (the log says so) and the run completes; an
HTTP server that is down is retried, named in `rewind status`, and the run completes
once it is back; a tool the restarted server no longer lists is a tool error to the
model, not a stuck run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from as_user import one_line_error, rewind, rewind_json, user_workers
from mcp_servers import python_server_command

OWN = str(Path(__file__).resolve().parents[1] / "mcp_test_server.py")


def _config(path: Path, servers: dict, **top: object) -> Path:
    path.write_text(json.dumps({"mcpServers": servers, **top}))
    return path


def _call(shown: dict, call_id: str) -> dict:
    (record,) = [r for r in shown["tool_call_cache"] if r["tool_call_id"] == call_id]
    return record


async def _until(cli, env, run_id: str, done, timeout_s: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        view = await rewind_json(cli, env, "status", run_id)
        if done(view):
            return view
        assert time.monotonic() < deadline, f"{run_id}: {view}"
        await asyncio.sleep(0.3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}


@pytest.mark.parametrize("case", ["malformed", "missing command", "unknown server", "unknown tool", "invalid schema",
                                  "unreachable", "unknown compensation"])
async def test_a_bad_configuration_stops_the_worker_with_one_line(world, tmp_path, case) -> None:
    path = tmp_path / "mcp.json"
    needles = {
        "malformed": (f"REWIND_MCP_CONFIG={path}: not valid JSON",),
        "missing command": (f"REWIND_MCP_CONFIG={path}: mcpServers.time.command: missing",),
        "unknown server": (f"REWIND_MCP_CONFIG={path}: rewind.tools.tiem__convert_time: no server 'tiem'",),
        "unknown tool": (f"{path}: mcpServers.time.rewind.tools.get_time", "lists no tool 'get_time'",
                         "get_current_time"),
        "invalid schema": ("mcpServers.own", "lists tool 'broken' with an invalid input schema", "integr"),
        "unreachable": ("mcpServers.web", "MCP server web (http://127.0.0.1:", "cannot be reached"),
        "unknown compensation": (f"{path}: mcpServers.time.rewind.tools.convert_time.compensate.tool",
                                 "lists no tool 'unconvert_time'", "get_current_time"),
    }[case]
    if case == "malformed":
        path.write_text('{"mcpServers": {"time": ')
    elif case == "missing command":
        _config(path, {"time": {"args": ["-m", "mcp_server_time"]}})
    elif case == "unknown server":
        _config(path, {"time": TIME}, rewind={"tools": {"tiem__convert_time": {"max_attempts": 1}}})
    elif case == "unknown tool":
        _config(path, {"time": {**TIME, "rewind": {"tools": {"get_time": {"max_attempts": 1}}}}})
    elif case == "invalid schema":
        _config(path, {"own": {"command": sys.executable, "args": [OWN, "stdio", "--bad-schema"],
                               "env": {"NOTES_FILE": str(tmp_path / "notes")}}})
    elif case == "unknown compensation":
        _config(path, {"time": {**TIME, "rewind": {"tools": {"convert_time": {
            "side_effects": True, "compensate": {"tool": "unconvert_time"}}}}}})
    else:
        _config(path, {"web": {"url": f"http://127.0.0.1:{_free_port()}/mcp"}})
    wdir = world.folder("worker")
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(path)))
        assert await worker.wait_exit() == 1, worker.log()
        one_line_error(1, worker.stderr(), *needles, prefix="rewind: ")


async def test_time_and_git_with_approve_destructive(world, tmp_path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    (repo / "b.txt").write_text("two\n")
    config = _config(tmp_path / "mcp.json", {
        "time": TIME,
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)],
                "env": {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.com",
                        "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.com"}}})
    script = "git-" + world.queue
    world.model.add_script(script, [
        {"tool_calls": [{"name": "time__get_current_time", "arguments": {"timezone": "Etc/UTC"}},
                        {"name": "git__git_status", "arguments": {"repo_path": str(repo)}}]},
        {"tool_calls": [{"name": "git__git_add", "arguments": {"repo_path": str(repo), "files": ["b.txt"]}}]},
        {"tool_calls": [{"name": "git__git_commit", "arguments": {"repo_path": str(repo), "message": "add b"}}]},
        {"tool_calls": [{"name": "git__git_reset", "arguments": {"repo_path": str(repo)}}]},
        {"content": None, "echo_tool_results": True},
    ])
    wdir, cli = world.folder("worker"), world.folder("cli")
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(config)), "--approve-destructive")
        await worker.wait_ready()
        tools = {t["name"]: t for t in (await rewind_json(cli, env, "tools"))["tools"]}
        assert tools["git__git_reset"]["policy"]["approval"] == "every call"
        assert any("--approve-destructive" in w for w in tools["git__git_reset"]["policy"]["why"])
        assert tools["git__git_commit"]["policy"]["label"] == "side effect, sent once"  # destructiveHint false
        assert tools["time__get_current_time"]["policy"]["label"] == "read-only"
        await rewind_json(cli, env, "start", "--task", "commit b", "--model", f"script:{script}", "--run-id", "git-1")
        view = await _until(cli, env, "git-1", lambda v: v["status"].get("pending_approvals"))
        (waiting,) = view["status"]["pending_approvals"]
        assert waiting["tool_name"] == "git__git_reset"
        await rewind_json(cli, env, "reject", "git-1", waiting["tool_call_id"], "--reason", "keep the index",
                          "--by", "ops")
        view = await _until(cli, env, "git-1", lambda v: v["state"] == "completed")
    final = view["status"]["final_answer"]
    assert "rejected by ops: keep the index" in final, final
    log = subprocess.run([*git, "log", "--format=%s %an"], check=True, capture_output=True, text=True).stdout
    assert log.splitlines() == ["add b agent", "first t"]  # the commit ran once
    shown = await rewind_json(cli, env, "show", "git-1:main:1")
    assert _call(shown, "call_0_0")["tool_output"]["timezone"] == "Etc/UTC"
    assert _call(shown, "call_0_0")["mcp"]["server_version"].startswith("mcp-time ")


async def test_own_server_meta_key_image_restart_and_http_down(world, tmp_path) -> None:
    notes = tmp_path / "notes.jsonl"
    port = _free_port()
    http_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NOTES_FILE": str(tmp_path / "web-notes.jsonl")}

    def http_server() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, OWN, "http", str(port)], env=http_env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    web = http_server()
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and web.poll() is None, "the HTTP test server did not start"
            await asyncio.sleep(0.1)
        config = _config(tmp_path / "mcp.json", {
            "own": {"command": sys.executable, "args": [OWN, "stdio"], "env": {"NOTES_FILE": str(notes)}},
            "web": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer ${WEB_TOKEN}"},
                    "rewind": {"tools": {"echo": {"max_attempts": 30}}}}})
        script = "own-" + world.queue
        world.model.add_script(script, [
            {"tool_calls": [{"name": "own__note", "arguments": {"text": "first"}},
                            {"name": "own__picture", "arguments": {}}]},
            {"tool_calls": [{"name": "own__echo", "arguments": {"text": "after the crash"}}]},
            {"tool_calls": [{"name": "web__echo", "arguments": {"text": "over http"}}]},
            {"content": None, "echo_tool_results": True},
        ])
        wdir, cli = world.folder("worker"), world.folder("cli")
        env = world.env(cli)
        async with user_workers() as start:
            worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(config), WEB_TOKEN="t0ken"))
            await worker.wait_ready()
            # The stdio server dies while the worker holds its session; the HTTP server goes down.
            children = subprocess.run(["pgrep", "-P", str(worker.pid), "-f", "mcp_test_server.py"],
                                      capture_output=True, text=True).stdout.split()
            assert len(children) == 1, children
            os.kill(int(children[0]), signal.SIGKILL)
            web.kill()
            web.wait()
            await rewind_json(cli, env, "start", "--task", "note it", "--model", f"script:{script}", "--run-id", "own-1")
            view = await _until(cli, env, "own-1", lambda v: any(
                "MCP server web" in (p.get("last_failure") or "") for p in v.get("pending") or []))
            code, text, _ = await rewind(cli, env, "status", "own-1")
            assert code == 0 and "MCP server web" in text and "cannot be reached" in text, text
            web = http_server()
            view = await _until(cli, env, "own-1", lambda v: v["state"] == "completed")
            said = worker.log() + worker.stderr()
            assert "MCP server own" in said and "restarting it" in said and "MCP server own restarted" in said, said
    finally:
        web.kill()
    final = view["status"]["final_answer"]
    assert "over http" in final, final
    step2 = await rewind_json(cli, env, "show", "own-1:main:2")
    assert _call(step2, "call_1_0")["tool_output"] == {"result": "after the crash"}
    (noted,) = [json.loads(line) for line in notes.read_text().splitlines()]
    shown = await rewind_json(cli, env, "show", "own-1:main:1")
    note = _call(shown, "call_0_0")
    assert noted == {"text": "first", "key": note["idempotency_key"]}  # the key reached the server in _meta
    assert note["mcp"]["annotations"] == {} and any("no readOnlyHint" in p for p in note["mcp"]["policy"])
    picture = _call(shown, "call_0_1")["tool_output"]
    (image,) = picture["attachments"]
    assert image["type"] == "image" and image["mimeType"] == "image/png" and len(image["ref"]) == 64
    assert "stored in the payload store" in picture["text"] and "data" not in image


async def test_a_tool_the_restarted_server_no_longer_lists_is_a_tool_error(world, tmp_path) -> None:
    hide = tmp_path / "hide-echo"
    config = _config(tmp_path / "mcp.json", {"own": {"command": sys.executable, "args": [OWN, "stdio"],
                                                     "env": {"NOTES_FILE": str(tmp_path / "notes"),
                                                             "HIDE_ECHO_FILE": str(hide)}}})
    script = "gone-" + world.queue
    world.model.add_script(script, [{"tool_calls": [{"name": "own__echo", "arguments": {"text": "hello"}}]},
                                    {"content": None, "echo_tool_results": True}])
    wdir, cli = world.folder("worker"), world.folder("cli")
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(config)))
        await worker.wait_ready()
        (child,) = subprocess.run(["pgrep", "-P", str(worker.pid), "-f", "mcp_test_server.py"],
                                  capture_output=True, text=True).stdout.split()
        hide.touch()  # the server is updated: its next start lists no echo
        os.kill(int(child), signal.SIGKILL)
        await rewind_json(cli, env, "start", "--task", "echo", "--model", f"script:{script}", "--run-id", "gone-1")
        view = await _until(cli, env, "gone-1", lambda v: v["state"] != "running")
    assert view["state"] == "completed", view
    final = view["status"]["final_answer"]
    assert "own__echo is no longer offered by MCP server own" in final and "note" in final, final
