"""MCP tools as a user meets them, against the reference filesystem server (npm, run
with node): `rewind` and the worker as subprocesses in empty folders, configured by
environment only (REWIND_MCP_CONFIG).

A run reads a file twice (the second read is the run's cache), edits it (applied
once), and the checkpoints say which server, tool and annotations decided each
call. A fork after the edit and a rollback past it re-issue the same edit: it is
reused, not applied again, until an override says on_repeat "run". A SIGKILL of
the worker while the edit's answer is on its way: the next worker does not send
the edit again (the server does not mark it idempotent), the model hears that the
effect's state is unknown, and the file holds the edit once.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from as_user import rewind, rewind_json, user_workers
from mcp_servers import RELAY, filesystem_server_command

import sys


def _config(path: Path, servers: dict) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


async def _until_state(cli, env, run_id: str, want: str, branch: str = "main", timeout_s: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        view = await rewind_json(cli, env, "status", run_id, "--branch", branch)
        if view["state"] == want:
            return view
        assert time.monotonic() < deadline, f"{run_id} is {view['state']}, not {want}: {view}"
        await asyncio.sleep(0.3)


def _call(shown: dict, call_id: str) -> dict:
    """The record of one call in a checkpoint's tool records (they accumulate over the branch)."""
    (record,) = [r for r in shown["tool_call_cache"] if r["tool_call_id"] == call_id]
    return record


async def test_read_cached_edit_once_fork_and_rollback_reuse_the_edit(world, tmp_path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notes = workspace / "notes.txt"
    notes.write_text("alpha\n")
    command = filesystem_server_command(workspace)
    wdir, cli = world.folder("worker"), world.folder("cli")
    config = _config(tmp_path / "mcp.json", {"fs": {"command": command[0], "args": command[1:]}})
    read = {"name": "fs__read_text_file", "arguments": {"path": str(notes)}}
    edit = {"name": "fs__edit_file", "arguments": {"path": str(notes), "edits": [{"oldText": "alpha", "newText": "alpha beta"}]}}
    main_script = "fs-" + world.queue
    world.model.add_script(main_script, [{"tool_calls": [read]}, {"tool_calls": [read]}, {"tool_calls": [edit]},
                                         {"content": None, "echo_tool_results": True}])
    again = "again-" + world.queue
    world.model.add_script(again, [{"content": "unused"}] * 3 + [{"tool_calls": [edit]},
                                                                  {"content": None, "echo_tool_results": True}])
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(config)))
        await worker.wait_ready()
        listed = await rewind_json(cli, env, "tools")
        by_name = {t["name"]: t for t in listed["tools"]}
        assert by_name["fs__read_text_file"]["policy"]["label"] == "read-only"
        assert by_name["fs__edit_file"]["policy"]["label"] == "side effect, sent once"
        assert by_name["fs__edit_file"]["mcp"]["annotations"]["idempotentHint"] is False
        assert any("idempotentHint false" in why for why in by_name["fs__edit_file"]["policy"]["why"])
        assert by_name["fs__write_file"]["policy"]["retry"] == "retried"
        code, text, _ = await rewind(cli, env, "tools")
        assert code == 0 and "fs__edit_file" in text and "sent once" in text and "secure-filesystem-server" in text

        done = await rewind_json(cli, env, "start", "--task", "add beta", "--model", f"script:{main_script}",
                                 "--run-id", "fs-1", "--wait")
        assert done["status"]["state"] == "completed", done
        assert notes.read_text() == "alpha beta\n"
        second = _call(await rewind_json(cli, env, "show", "fs-1:main:2"), "call_1_0")
        assert second["served_from_cache"] is True and second["tool_output"] == {"content": "alpha\n"}
        edited = _call(await rewind_json(cli, env, "show", "fs-1:main:3"), "call_2_0")
        assert edited["side_effects"] is True and edited["idempotency_key"].startswith("idem-")
        assert edited["mcp"]["server"] == "fs" and edited["mcp"]["tool"] == "edit_file"
        assert edited["mcp"]["annotations"]["destructiveHint"] is True
        assert edited["mcp"]["server_version"].startswith("secure-filesystem-server ")
        code, text, _ = await rewind(cli, env, "show", "fs-1:main:3")
        assert code == 0 and "mcp        fs__edit_file call call_2_0: tool edit_file of server fs" in text, text
        assert "idempotentHint false" in text and "a side effect, sent once" in text, text
        assert "fs__read_text_file call call_1_0" in text and "served from the run's cache" in text, text

        # A fork after the edit whose model asks for it again: reused from the lineage.
        forked = await rewind_json(cli, env, "fork", "fs-1", "--step", "3", "--branch", "alt", "--model",
                                   f"script:{again}", "--wait")
        assert forked["status"]["state"] == "completed", forked
        reused = _call(await rewind_json(cli, env, "show", "fs-1:alt:4"), "call_3_0")
        assert reused["reused"]["tool_name"] == "fs__edit_file", reused
        assert notes.read_text() == "alpha beta\n"

        # A rollback past the edit: the re-issued edit is reused too.
        back = await rewind_json(cli, env, "rollback", "fs-1", "--step", "2", "--wait")
        assert back["status"]["state"] == "completed", back
        assert notes.read_text() == "alpha beta\n"
        code, text, _ = await rewind(cli, {**env, "COLUMNS": "160"}, "diff", "fs-1", "main.r0", "main")
        assert code == 0 and "[reused]" in text, text
        # Why the edit was an effect (so reused), sent once and not gated: its annotations.
        assert "why (mcp)" in text and "fs__edit_file: side effect (readOnlyHint false)" in text, text
        assert "fs__edit_file: sent once (idempotentHint false)" in text, text
        assert "fs__edit_file: no approval (destructiveHint true" in text, text
        doc = await rewind_json(cli, env, "diff", "fs-1", "main.r0", "main")
        assert any(c["mcp_policy"] for c in doc["b"]["tool_calls"]), doc
        await worker.stop_async()

        # With on_repeat "run" the same fork runs the edit again (the file shows it twice).
        rerun = _config(tmp_path / "mcp-rerun.json", {"fs": {
            "command": command[0], "args": command[1:],
            "rewind": {"tools": {"edit_file": {"on_repeat": "run"}}}}})
        worker = start(world.folder("worker-rerun"), world.env(world.folder("worker-rerun"),
                                                               REWIND_MCP_CONFIG=str(rerun)))
        await worker.wait_ready()
        forked = await rewind_json(cli, env, "fork", "fs-1", "--step", "3", "--branch", "alt2", "--model",
                                   f"script:{again}", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert notes.read_text() == "alpha beta beta\n"
    # Duplicate effects of the fork and the rollback: none (the on_repeat "run" fork is the one asked for).


async def test_sigkill_while_the_edit_answer_is_on_its_way_applies_it_once(world, tmp_path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notes = workspace / "notes.txt"
    notes.write_text("alpha\n")
    command = filesystem_server_command(workspace)
    held = tmp_path / "held.txt"
    relay = {"command": sys.executable, "args": [str(RELAY), *command],
             "env": {"RELAY_HOLD_TOOL": "edit_file", "RELAY_HOLD_S": "30", "RELAY_HELD_FILE": str(held)}}
    slow = _config(tmp_path / "mcp-slow.json", {"fs": relay})
    plain = _config(tmp_path / "mcp.json", {"fs": {"command": command[0], "args": command[1:]}})
    edit = {"name": "fs__edit_file", "arguments": {"path": str(notes), "edits": [{"oldText": "alpha", "newText": "alpha beta"}]}}
    script = "kill-" + world.queue
    world.model.add_script(script, [{"tool_calls": [edit]}, {"content": None, "echo_tool_results": True}])
    cli = world.folder("cli")
    env = world.env(cli)
    async with user_workers() as start:
        first = start(world.folder("a"), world.env(world.folder("a"), REWIND_MCP_CONFIG=str(slow)))
        await first.wait_ready()
        await rewind_json(cli, env, "start", "--task", "add beta", "--model", f"script:{script}", "--run-id", "kill-1")
        deadline = time.monotonic() + 60
        while not held.exists():
            assert time.monotonic() < deadline, first.log()[-3000:]
            await asyncio.sleep(0.05)
        assert notes.read_text() == "alpha beta\n"  # the server acted; its answer is held
        first.kill()
        second = start(world.folder("b"), world.env(world.folder("b"), REWIND_MCP_CONFIG=str(plain)))
        await second.wait_ready()
        view = await _until_state(cli, env, "kill-1", "completed")
    assert notes.read_text() == "alpha beta\n", "the edit was applied twice"
    final = view["status"]["final_answer"]
    assert "state is unknown" in final and "not sent again" in final, final
    record = _call(await rewind_json(cli, env, "show", "kill-1:main:1"), "call_0_0")
    assert record["attempts"] == 2 and "state is unknown" in record["error"], record


async def test_rollback_compensate_undoes_mcp_effects_with_the_configured_calls(world, tmp_path) -> None:
    """`"compensate"` overrides name the filesystem server's own calls that undo a write
    (move the file aside) and an edit (the edit reversed); `rollback --compensate` runs
    them once each, latest first, and the continuation's repeats run again."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notes, draft = workspace / "notes.txt", workspace / "draft.txt"
    notes.write_text("alpha\n")
    command = filesystem_server_command(workspace)
    config = _config(tmp_path / "mcp.json", {"fs": {"command": command[0], "args": command[1:], "rewind": {"tools": {
        "write_file": {"compensate": {"tool": "move_file", "arguments": {
            "source": "{arguments.path}", "destination": "{arguments.path}.rolled-back"}}},
        "edit_file": {"compensate": {"tool": "edit_file", "arguments": {
            "path": "{arguments.path}",
            "edits": [{"oldText": "{arguments.edits.0.newText}", "newText": "{arguments.edits.0.oldText}"}]}}},
    }}}})
    read = {"name": "fs__read_text_file", "arguments": {"path": str(notes)}}
    write = {"name": "fs__write_file", "arguments": {"path": str(draft), "content": "draft one"}}
    edit = {"name": "fs__edit_file", "arguments": {"path": str(notes), "edits": [{"oldText": "alpha", "newText": "alpha beta"}]}}
    script = "undo-" + world.queue
    world.model.add_script(script, [{"tool_calls": [read]}, {"tool_calls": [write]}, {"tool_calls": [edit]},
                                    {"content": "done"}])
    wdir, cli = world.folder("worker"), world.folder("cli")
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_MCP_CONFIG=str(config)))
        await worker.wait_ready()
        listed = {t["name"]: t for t in (await rewind_json(cli, env, "tools"))["tools"]}
        assert "compensated on rollback --compensate by fs__move_file (override)" in \
            listed["fs__write_file"]["policy"]["why"], listed["fs__write_file"]
        done = await rewind_json(cli, env, "start", "--task", "draft and edit", "--model", f"script:{script}",
                                 "--run-id", "undo-1", "--wait")
        assert done["status"]["state"] == "completed", done
        assert (notes.read_text(), draft.read_text()) == ("alpha beta\n", "draft one")

        back = await rewind_json(cli, env, "rollback", "undo-1", "--step", "1", "--compensate", "--wait")
        assert back["status"]["state"] == "completed", back
        statuses = {c["tool_name"]: c["status"] for c in back["compensations"]}
        assert statuses == {"fs__write_file": "compensated", "fs__edit_file": "compensated"}, back["compensations"]
        # The draft was moved aside once; the edit was reversed, and the continuation (whose
        # model asks for both again) ran them again: the edit shows once, not twice.
        assert (workspace / "draft.txt.rolled-back").read_text() == "draft one"
        assert (notes.read_text(), draft.read_text()) == ("alpha beta\n", "draft one")
        code, text, _ = await rewind(cli, env, "rollback", "undo-1", "--step", "1", "--compensate")
        assert code == 0 and "compensation of fs__edit_file" in text, text
