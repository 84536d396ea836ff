"""Approvals and reused effects as a user meets them: the worker and `rewind` as
subprocesses in empty folders, configured by environment only.

A run waits for approval across a SIGKILL of its worker; `rewind approve` from
another folder lets it go on; the tool ran once. `rewind reject` gives the
model the reason, and the rejected step can be forked. After `rewind rollback`
the re-issued invoice is reused, not sent again, and `show`/`diff` say so.
"""

from __future__ import annotations

import asyncio
import json
import time

from as_user import one_line_error, rewind, rewind_json, user_workers

BILLING = '''
import json, os
from pathlib import Path

from activities.tools.registry import tool, tool_context


def _sent(kind, **fields):
    out = Path(os.environ["BILLING_OUTBOX"])
    out.mkdir(parents=True, exist_ok=True)
    key = tool_context().idempotency_key
    (out / f"{kind}-{key}.json").write_text(json.dumps(fields))
    return f"{kind} {json.dumps(fields, sort_keys=True)} ({key})"


@tool(side_effects=True, needs_approval=True)
async def wire(to: str, amount_cents: int) -> str:
    """Send money: a person approves every transfer."""
    return _sent("wire", to=to, amount_cents=amount_cents)


@tool(side_effects=True, effect_key=("customer", "amount_cents"))
async def send_invoice(customer: str, amount_cents: int) -> str:
    """Send an invoice (a repeat on the lineage is reused)."""
    return _sent("invoice", customer=customer, amount_cents=amount_cents)


@tool
async def lookup(customer: str) -> str:
    """Read-only."""
    return f"{customer}: 3 open orders"
'''


async def _status(cli, env, run_id: str, branch: str = "main") -> dict:
    return await rewind_json(cli, env, "status", run_id, "--branch", branch)


async def _until_waiting(cli, env, run_id: str, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        view = await _status(cli, env, run_id)
        status = view.get("status") or {}
        if status.get("pending_approvals"):
            return view
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} did not wait for approval within {timeout_s:.0f} s: {view}")


async def test_a_run_waits_for_approval_across_a_worker_crash(world, tmp_path) -> None:
    outbox = tmp_path / "outbox"
    first_dir, second_dir, cli = world.folder("worker-a"), world.folder("worker-b"), world.folder("cli")
    for d in (first_dir, second_dir):
        (d / "billing.py").write_text(BILLING)
    name = "wire-" + world.queue
    world.model.add_script(name, [{"tool_calls": [{"name": "wire", "arguments": {"to": "bob", "amount_cents": 500}}]},
                                  {"content": None, "echo_tool_results": True}])
    env = world.env(cli)
    worker_env = {d: world.env(d, BILLING_OUTBOX=str(outbox)) for d in (first_dir, second_dir)}
    async with user_workers() as start:
        first = start(first_dir, worker_env[first_dir], "--tool-modules", "billing")
        await first.wait_ready()
        started = await rewind_json(cli, env, "start", "--task", "pay bob", "--model", f"script:{name}",
                                    "--run-id", "pay-1")
        assert started["run_id"] == "pay-1"
        view = await _until_waiting(cli, env, "pay-1")
        assert view["state"] == "waiting_for_approval"
        (waiting,) = view["status"]["pending_approvals"]
        assert (waiting["tool_name"], waiting["arguments"]) == ("wire", {"to": "bob", "amount_cents": 500})
        code, text, _ = await rewind(cli, env, "status", "pay-1")
        assert code == 0 and "approval" in text and f"rewind approve pay-1 {waiting['tool_call_id']}" in text
        listed = await rewind_json(cli, env, "pending")
        assert [(p["run_id"], p["tool_call_id"]) for p in listed["waiting"]] == [("pay-1", waiting["tool_call_id"])]

        # The worker dies while the run waits; a new one takes the run over from history.
        first.kill()
        second = start(second_dir, worker_env[second_dir], "--tool-modules", "billing")
        await second.wait_ready()
        still = await _until_waiting(cli, env, "pay-1")
        assert still["status"]["pending_approvals"][0]["tool_call_id"] == waiting["tool_call_id"]
        assert not outbox.exists()  # nothing ran while it waited

        # Refused decisions: one line each, nothing changes.
        code, _, err = await rewind(cli, env, "approve", "pay-1", "call_7_7", "--by", "ops")
        one_line_error(code, err, "no tool call 'call_7_7' is waiting", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "approve", "pay-1", waiting["tool_call_id"], "--args", "{nope")
        one_line_error(code, err, "--args is not valid JSON", prefix="rewind: ")
        assert code == 2
        code, _, err = await rewind(cli, env, "approve", "pay-1", waiting["tool_call_id"], "--args",
                                    json.dumps({"to": "bob", "amount_cents": "five"}))
        one_line_error(code, err, "fail the schema of wire", "amount_cents", prefix="rewind: ")

        decided = await rewind_json(cli, env, "approve", "pay-1", waiting["tool_call_id"], "--by", "ops",
                                    "--reason", "invoice 42", "--args", json.dumps({"to": "bob", "amount_cents": 450}))
        assert decided["verdict"] == "approved" and decided["by"] == "ops"
        assert decided["original_arguments"] == {"to": "bob", "amount_cents": 500}
        code, _, err = await rewind(cli, env, "reject", "pay-1", waiting["tool_call_id"], "--reason", "late")
        one_line_error(code, err, prefix="rewind: ")  # the run may have finished already
        assert "already decided" in err or "has ended (completed)" in err, err
        deadline = time.monotonic() + 60
        while (await _status(cli, env, "pay-1"))["state"] != "completed" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)

    sent = list(outbox.glob("wire-*.json"))
    assert len(sent) == 1 and json.loads(sent[0].read_text()) == {"to": "bob", "amount_cents": 450}
    shown = await rewind_json(cli, env, "show", "pay-1:main:1")
    (record,) = shown["tool_call_cache"]
    assert record["approval"]["by"] == "ops" and record["approval"]["reason"] == "invoice 42"
    assert record["approval"]["original_arguments"]["amount_cents"] == 500 and record["tool_input"]["amount_cents"] == 450
    code, text, _ = await rewind(cli, env, "show", "pay-1:main:1")
    assert code == 0 and "decision   wire call" in text and "approved by ops, edited" in text


async def test_reject_then_fork_and_a_rollback_that_reuses_the_invoice(world, tmp_path) -> None:
    outbox = tmp_path / "outbox"
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "billing.py").write_text(BILLING)
    env = world.env(cli)
    wire = "rej-" + world.queue
    world.model.add_script(wire, [{"tool_calls": [{"name": "wire", "arguments": {"to": "eve", "amount_cents": 99}}]},
                                  {"content": None, "echo_tool_results": True}])
    alt = "alt-" + world.queue
    world.model.add_script(alt, [{"content": "unused"}, {"content": "no transfer, then"}])
    bill = "bill-" + world.queue
    world.model.add_script(bill, [
        {"tool_calls": [{"name": "lookup", "arguments": {"customer": "acme"}}]},
        {"tool_calls": [{"name": "send_invoice", "arguments": {"customer": "acme", "amount_cents": 1200}}]},
        {"content": None, "echo_tool_results": True},
    ])
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, BILLING_OUTBOX=str(outbox)), "--tool-modules", "billing")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--task", "pay eve", "--model", f"script:{wire}", "--run-id", "rej-1")
        view = await _until_waiting(cli, env, "rej-1")
        call = view["status"]["pending_approvals"][0]["tool_call_id"]
        code, _, err = await rewind(cli, env, "reject", "rej-1", call)
        assert code == 2 and "--reason" in err
        decided = await rewind_json(cli, env, "reject", "rej-1", call, "--reason", "unknown payee", "--by", "risk")
        assert decided["verdict"] == "rejected"
        deadline = time.monotonic() + 60
        while (await _status(cli, env, "rej-1"))["state"] != "completed" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        final = (await _status(cli, env, "rej-1"))["status"]["final_answer"]
        assert "rejected by risk: unknown payee" in final
        # The rejected step is a fork point like any other.
        forked = await rewind_json(cli, env, "fork", "rej-1", "--step", "1", "--branch", "alt", "--model",
                                   f"script:{alt}", "--wait")
        assert forked["status"]["state"] == "completed", forked
        code, text, _ = await rewind(cli, env, "diff", "rej-1", "main", "alt")
        assert code == 0
        shown = await rewind_json(cli, env, "diff", "rej-1", "main", "alt")
        assert shown["fork_point"]["step_index"] == 1

        # A rollback past the invoice: the model sends it again, the customer gets one.
        done = await rewind_json(cli, env, "start", "--task", "bill acme", "--model", f"script:{bill}",
                                 "--run-id", "bill-1", "--wait")
        assert done["status"]["state"] == "completed"
        back = await rewind_json(cli, env, "rollback", "bill-1", "--step", "1", "--wait")
        assert back["status"]["state"] == "completed", back
        assert len(list(outbox.glob("invoice-*.json"))) == 1
        code, text, _ = await rewind(cli, env, "diff", "bill-1", "main.r0", "main")
        assert code == 0 and "[reused]" in text and "1 reused" in text, text
        code, text, _ = await rewind(cli, env, "show", "bill-1:main.r1:2")
        assert code == 0 and "reused     send_invoice" in text and "step 2 of main" in text, text
        # The same tree as a graph for docs: the rollback edge, the discarded steps dashed.
        code, text, _ = await rewind(cli, env, "tree", "bill-1", "--format", "mermaid")
        assert code == 0 and text.startswith("flowchart LR") and "-->|rollback|" in text and "dropped" in text, text
        code, text, _ = await rewind(cli, env, "tree", "rej-1", "--format", "dot")
        assert code == 0 and '"rej-1:main:1" -> "rej-1:alt:2" [label="fork", style=bold];' in text, text
        code, _, err = await rewind(cli, env, "tree", "rej-1", "--format", "dot", "--json")
        assert code == 2 and "choose one" in err
    assert not list(outbox.glob("wire-*.json"))


async def test_the_demo_with_approve_shows_how_to_decide(tmp_path) -> None:
    import re
    import subprocess

    from as_user import BIN, user_env

    env = user_env(tmp_path, REWIND_DEMO_FAILURE_RATE="0")
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "demo", "--approve", cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert "save_report waits for your approval" in text and "finished: completed" in text, text
    run_id = re.search(r"run (\S+) started", text).group(1)  # type: ignore[union-attr]
    assert re.search(rf"TEMPORAL_ADDRESS=\S+ rewind approve {run_id} call_\d+_0", text), text
    assert "the demo approves it as 'rewind demo'" in text
    assert len(list((tmp_path / ".rewind" / "outbox").glob("*.md"))) == 1
    tree = await rewind_json(tmp_path, env, "tree", run_id)
    last = tree["branches"]["main"][-1]["checkpoint_id"]
    shown = await rewind_json(tmp_path, env, "show", last)
    (report,) = [r for r in shown["tool_call_cache"] if r["tool_name"] == "save_report"]
    assert report["approval"]["verdict"] == "approved" and report["approval"]["by"] == "rewind demo"


async def test_the_demo_asks_on_its_terminal_and_a_rejection_saves_nothing(tmp_path) -> None:
    import os
    import pty

    from as_user import BIN, user_env

    env = user_env(tmp_path, REWIND_DEMO_FAILURE_RATE="0")
    controller, terminal = pty.openpty()  # the demo's stdin is a terminal: it asks there
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "demo", "--approve", cwd=tmp_path, env=env, stdin=terminal,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    os.close(terminal)
    seen = b""

    async def until(needle: bytes) -> None:
        # input() prompts on stdout (a pipe here); the answers go to the terminal.
        nonlocal seen
        while needle not in seen:
            chunk = await asyncio.wait_for(proc.stdout.read(256), 120)  # type: ignore[union-attr]
            assert chunk, f"the demo ended before asking {needle!r}: {seen.decode()[-2000:]}"
            seen += chunk

    try:
        await until(b"approve it here?")
        os.write(controller, b"n\n")
        await until(b"reason (the model receives it)")
        os.write(controller, b"over budget this quarter\n")
        rest, err = await asyncio.wait_for(proc.communicate(), 120)
        out = seen + rest
    finally:
        os.close(controller)
        if proc.returncode is None:
            proc.kill()
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert "rejected by" in text and "over budget this quarter" in text, text
    assert not list((tmp_path / ".rewind" / "outbox").glob("*.md"))
