"""Approval gates and effects of the lineage, against the real dev server, worker and model.

A side-effecting call that needs approval waits in the workflow until a
decision arrives through the `decide_tool_call` update; a refused decision
changes nothing. A call that repeats an effect its branch's lineage already
caused (before a fork point, or in steps a rollback discarded) follows its
tool's `on_repeat`, and sibling branches are not lineage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import datetime, timezone

import pytest
from helpers import read_events, scripted, start_agent

from checkpoint_bridge.checkpoints.lineage import lineage
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind import approve, fork, pending_approvals, reject, rollback
from workflows.vocabulary.contracts import AgentStatus
from workflows.vocabulary.errors import DecisionRefusedError

INVOICE = {"customer": "acme", "amount_cents": 1200}
UNUSED = {"content": "(a turn before the fork point: never asked for)"}


@pytest.fixture
async def store(settings):
    async with open_checkpoint_store(settings.store_url) as s:
        yield s


async def waiting_calls(handle, count: int = 1, timeout_s: float = 60.0) -> AgentStatus:
    """The run's status once `count` calls wait for a decision."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = await handle.query("status", result_type=AgentStatus)
        except Exception:  # noqa: BLE001 - not started yet
            status = None
        if status is not None and len(status.pending_approvals) >= count:
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} call(s) did not start waiting for approval within {timeout_s:.0f} s")


def effects(events_file, kind: str) -> list[dict]:
    return [e for e in read_events(events_file) if e["kind"] == kind]


def tool_messages(model, model_name: str) -> list[str]:
    """Tool results the model saw, in the last request of a script."""
    requests = [r for r in model.requests() if r["model"] == model_name]
    return [m["content"] for m in requests[-1]["messages"] if m.get("role") == "tool"]


async def records(store, run_id: str, branch: str = "main") -> list:
    """The tool records of the branch's newest live checkpoint (its current revision)."""
    line = await lineage(store, run_id, branch)
    return (await store.load(line[-1].checkpoint_id)).tool_call_cache


async def test_a_call_waits_for_its_approval_then_runs_once(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [{"name": "wire_money", "arguments": {"to": "bob", "amount_cents": 500}}]},
                            {"content": "wired"}])
    handle = await start_agent(client, settings, "pay bob", model=name)
    status = await waiting_calls(handle)
    assert status.state == "waiting_for_approval"
    (waiting,) = status.pending_approvals
    assert (waiting.tool_name, waiting.arguments, waiting.step) == ("wire_money", {"to": "bob", "amount_cents": 500}, 1)
    assert waiting.idempotency_key and waiting.idempotency_key.startswith("idem-")
    await asyncio.sleep(0.5)
    assert effects(events_file, "wire_money") == []  # nothing ran while it waits
    listed = await pending_approvals(client)
    assert [p.tool_call_id for p in listed.waiting if p.run_id == status.run_id] == [waiting.tool_call_id]

    record = await approve(client, status.run_id, waiting.tool_call_id, by="alice", reason="known payee")
    assert (record.verdict, record.by, record.reason) == ("approved", "alice", "known payee")
    result = await handle.result()
    assert result.status.state == "completed" and result.status.pending_approvals == []
    assert len(effects(events_file, "wire_money")) == 1
    (tool,) = await records(store, status.run_id)
    assert tool.approval["verdict"] == "approved" and tool.approval["by"] == "alice"
    assert tool.approval["requested_at"] <= tool.approval["decided_at"]
    assert tool.idempotency_key == waiting.idempotency_key

    # A decision on a call that no longer waits, once the run has ended, is refused.
    with pytest.raises(DecisionRefusedError, match="has ended"):
        await approve(client, status.run_id, waiting.tool_call_id, by="alice")


async def test_a_rejection_reaches_the_model_and_nothing_runs(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [{"name": "wire_money", "arguments": {"to": "mallory", "amount_cents": 9}}]},
                            {"content": None, "echo_tool_results": True}])
    handle = await start_agent(client, settings, "pay mallory", model=name)
    status = await waiting_calls(handle)
    call = status.pending_approvals[0].tool_call_id
    with pytest.raises(DecisionRefusedError, match="needs a reason"):
        await reject(client, status.run_id, call, by="bob", reason=" ")
    await reject(client, status.run_id, call, by="bob", reason="unknown payee")
    result = await handle.result()
    assert result.status.state == "completed"
    assert effects(events_file, "wire_money") == []
    (seen,) = tool_messages(model, name)
    assert "rejected by bob: unknown payee" in seen
    (tool,) = await records(store, status.run_id)
    assert tool.approval["verdict"] == "rejected" and tool.approval["reason"] == "unknown payee"
    assert result.status.tool_calls_done == 0


async def test_edited_arguments_run_and_both_versions_are_recorded(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [{"name": "wire_money", "arguments": {"to": "bob", "amount_cents": 90000}}]},
                            {"content": "done"}])
    handle = await start_agent(client, settings, "pay bob a lot", model=name)
    status = await waiting_calls(handle)
    call = status.pending_approvals[0].tool_call_id

    # Refused decisions leave the call waiting with its original arguments.
    with pytest.raises(DecisionRefusedError, match="fail the schema of wire_money.*amount_cents"):
        await approve(client, status.run_id, call, by="carol", arguments={"to": "bob", "amount_cents": "lots"})
    with pytest.raises(DecisionRefusedError, match="no tool call 'call_9_9' is waiting.*waiting: " + call):
        await approve(client, status.run_id, "call_9_9", by="carol")
    still = await waiting_calls(handle)
    assert still.pending_approvals[0].arguments == {"to": "bob", "amount_cents": 90000}

    record = await approve(client, status.run_id, call, by="carol", arguments={"to": "bob", "amount_cents": 9000})
    assert record.original_arguments == {"to": "bob", "amount_cents": 90000}
    # Refused either way: by the run (still running: "already decided") or, when the approved
    # call and the run's last step were quicker than this second decision, because it has ended.
    with pytest.raises(DecisionRefusedError, match="already decided|has ended"):
        await reject(client, status.run_id, call, by="dave", reason="too late")
    await handle.result()
    (ran,) = effects(events_file, "wire_money")
    assert ran["amount_cents"] == 9000
    (tool,) = await records(store, status.run_id)
    assert tool.tool_input == {"to": "bob", "amount_cents": 9000}
    assert tool.approval["original_arguments"] == {"to": "bob", "amount_cents": 90000}


async def test_a_rule_on_the_arguments_decides_which_calls_wait(worker, client, settings, model, events_file, store):
    name = scripted(model, [
        {"tool_calls": [{"name": "refund", "arguments": {"customer": "acme", "amount_cents": 5000}}]},
        {"tool_calls": [{"name": "refund", "arguments": {"customer": "acme", "amount_cents": 50000}}]},
        {"content": "refunded"},
    ])
    handle = await start_agent(client, settings, "refunds", model=name)
    status = await waiting_calls(handle)
    assert status.step == 2 and status.pending_approvals[0].arguments["amount_cents"] == 50000
    assert [e["amount_cents"] for e in effects(events_file, "refund")] == [5000]  # the small one did not wait
    await approve(client, status.run_id, status.pending_approvals[0].tool_call_id, by="erin")
    await handle.result()
    assert [e["amount_cents"] for e in effects(events_file, "refund")] == [5000, 50000]
    small, large = await records(store, status.run_id)
    assert small.approval is None and large.approval["by"] == "erin"


async def test_parallel_calls_each_wait_for_their_own_decision(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [
        {"name": "wire_money", "arguments": {"to": "first", "amount_cents": 1}},
        {"name": "wire_money", "arguments": {"to": "second", "amount_cents": 2}},
    ]}, {"content": "both"}])
    handle = await start_agent(client, settings, "two payments", model=name)
    status = await waiting_calls(handle, 2)
    first, second = status.pending_approvals
    await approve(client, status.run_id, second.tool_call_id, by="frank")
    deadline = time.monotonic() + 30
    while not effects(events_file, "wire_money") and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    # The approved call ran while the other still waits.
    assert [e["customer"] for e in effects(events_file, "wire_money")] == ["second"]
    still = await waiting_calls(handle)
    assert [p.tool_call_id for p in still.pending_approvals] == [first.tool_call_id]
    await reject(client, status.run_id, first.tool_call_id, by="frank", reason="duplicate")
    result = await handle.result()
    assert result.status.state == "completed"
    assert [e["customer"] for e in effects(events_file, "wire_money")] == ["second"]


async def test_a_wait_that_runs_out_takes_the_tools_default(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [{"name": "post_update", "arguments": {"text": "hello"}}]}, {"content": "posted"}])
    handle = await start_agent(client, settings, "post", model=name)
    status = await waiting_calls(handle)
    assert status.pending_approvals[0].deadline is not None and status.pending_approvals[0].on_timeout == "approve"
    result = await handle.result()
    assert result.status.state == "completed"
    assert len(effects(events_file, "post_update")) == 1
    (tool,) = await records(store, status.run_id)
    assert tool.approval["timed_out"] is True and tool.approval["by"] == "timeout"


# -- effects of the lineage ---------------------------------------------------------

def _invoice_script(tool_name: str) -> list[dict]:
    return [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "acme"}}]},
        {"tool_calls": [{"name": tool_name, "arguments": INVOICE}]},
        {"content": None, "echo_tool_results": True},
    ]


async def _run_then_roll_back(client, settings, store, model, tool_name: str):
    name = scripted(model, _invoice_script(tool_name))
    handle = await start_agent(client, settings, f"invoice with {tool_name}", model=name)
    first = await handle.result()
    assert first.status.state == "completed"
    # Step 1 is the lookup: the invoice of step 2 is discarded, and the model sends it again.
    back = await rollback(client, settings, store, first.status.run_id, 1)
    assert [e.tool_name for e in back.side_effects] == [tool_name]
    return first.status.run_id, back, name


async def test_after_a_rollback_a_repeated_effect_is_reused_not_run_again(worker, client, settings, model, events_file, store):
    run_id, back, name = await _run_then_roll_back(client, settings, store, model, "send_invoice")
    result = await back.continued.handle.result()
    assert result.status.state == "completed"
    assert len(effects(events_file, "send_invoice")) == 1  # the customer got one invoice
    *_, again = await records(store, run_id, "main")
    assert again.reused is not None and again.reused["origin"] == "discarded" and again.reused["step"] == 2
    assert again.tool_output.startswith("invoice acme 1200 sent (idem-")
    assert again.reused["idempotency_key"] in again.tool_output  # the first call's result, its key inside
    assert again.idempotency_key != again.reused["idempotency_key"]


async def test_after_a_rollback_ask_waits_and_run_runs_again(worker, client, settings, model, events_file, store):
    run_id, back, _ = await _run_then_roll_back(client, settings, store, model, "send_invoice_ask")
    status = await waiting_calls(back.continued.handle)
    (waiting,) = status.pending_approvals
    assert waiting.repeat_of is not None and waiting.repeat_of.step == 2 and waiting.repeat_of.origin == "discarded"
    await approve(client, run_id, waiting.tool_call_id, by="gina", reason="send it again")
    await back.continued.handle.result()
    assert len(effects(events_file, "send_invoice_ask")) == 2

    run_id, back, _ = await _run_then_roll_back(client, settings, store, model, "send_invoice_again")
    await back.continued.handle.result()
    ran = effects(events_file, "send_invoice_again")
    assert len(ran) == 2 and ran[0]["key"] != ran[1]["key"]


async def test_forks_of_forks_reuse_the_lineages_effect_and_siblings_do_not(worker, client, settings, model, events_file, store):
    invoice = {"tool_calls": [{"name": "send_invoice", "arguments": {**INVOICE, "memo": "again"}}]}
    main = scripted(model, [{"tool_calls": [{"name": "send_invoice", "arguments": INVOICE}]},
                            {"tool_calls": [{"name": "lookup", "arguments": {"term": "x"}}]}, {"content": "sent"}])
    handle = await start_agent(client, settings, "fork invoices", model=main)
    run_id = (await handle.result()).status.run_id

    # A fork after the invoice asks for it again (a new call id, a different memo: the
    # tool's effect_key is the customer and the amount): reused.
    child_model = scripted(model, [UNUSED, invoice, {"content": "child done"}])
    child = await fork(client, settings, store, run_id, 1, branch="child", model=child_model)
    await child.handle.result()
    grandchild_model = scripted(model, [UNUSED, UNUSED, invoice, {"content": "grandchild done"}])
    grandchild = await fork(client, settings, store, run_id, 2, from_branch="child", branch="grandchild",
                            model=grandchild_model)
    await grandchild.handle.result()
    assert len(effects(events_file, "send_invoice")) == 1
    child_call = (await records(store, run_id, "child"))[-1]
    grandchild_call = (await records(store, run_id, "grandchild"))[-1]
    assert child_call.reused["origin"] == "ancestor" and grandchild_call.reused["origin"] == "ancestor"
    assert child_call.reused["idempotency_key"] == grandchild_call.reused["idempotency_key"]

    # Two forks from before the invoice are siblings of main's step 2: each sends its own.
    start = await start_agent(client, settings, "siblings", model=scripted(model, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "y"}}]},
        {"tool_calls": [{"name": "send_invoice", "arguments": INVOICE}]}, {"content": "main sent"}]))
    sib_run = (await start.result()).status.run_id
    for branch in ("a", "b"):
        forked = await fork(client, settings, store, sib_run, 1, branch=branch, model=scripted(model, [
            UNUSED, {"tool_calls": [{"name": "send_invoice", "arguments": INVOICE}]}, {"content": f"{branch} sent"}]))
        await forked.handle.result()
    assert len(effects(events_file, "send_invoice")) == 1 + 3  # main's, then the sibling run's main, a and b
    assert (await records(store, sib_run, "a"))[-1].reused is None
    assert (await records(store, sib_run, "b"))[-1].reused is None


async def test_a_compensated_effect_is_no_longer_reused(worker, client, settings, model, events_file, store):
    name = scripted(model, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "q"}}]},
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "ceo@example.com", "body": "report"}}]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "email then roll back", model=name)
    run_id = (await handle.result()).status.run_id
    back = await rollback(client, settings, store, run_id, 1, compensate=True)
    assert [c["status"] for c in back.compensations] == ["compensated"]
    await back.continued.handle.result()
    # Recalled, so not an effect of the lineage any more: the repeat sends again.
    assert len(effects(events_file, "send_email_effect")) == 2
    assert (await records(store, run_id))[-1].reused is None


async def test_diff_compares_the_decisions_of_two_branches(worker, client, settings, model, events_file, store):
    from rewind import diff
    from checkpoint_bridge.views.diff import diff_text

    pay = {"tool_calls": [{"name": "wire_money", "arguments": {"to": "bob", "amount_cents": 700}}]}
    main = scripted(model, [{"tool_calls": [{"name": "lookup", "arguments": {"term": "bob"}}]}, pay, {"content": "paid"}])
    handle = await start_agent(client, settings, "pay after a lookup", model=main)
    status = await waiting_calls(handle)
    await approve(client, status.run_id, status.pending_approvals[0].tool_call_id, by="alice")
    await handle.result()
    other = await fork(client, settings, store, status.run_id, 1, branch="careful",
                       model=scripted(model, [UNUSED, pay, {"content": "not paid"}]))
    waiting = await waiting_calls(other.handle)
    await reject(client, status.run_id, waiting.pending_approvals[0].tool_call_id, branch="careful", by="bob",
                 reason="needs a second look")
    await other.handle.result()
    result = await diff(store, status.run_id, "main", "careful")
    (a,), (b,) = result.a.tool_calls, result.b.tool_calls
    assert (a.decision, b.decision) == ("approved by alice", "rejected by bob: needs a second look")
    assert (result.a.tool_calls_executed, result.b.tool_calls_executed, result.b.tool_calls_rejected) == (1, 0, 1)
    text = diff_text(result, width=160)
    assert "[approved by alice]" in text and "[rejected by bob: needs a second look]" in text and "1 rejected" in text



async def test_a_wait_that_runs_out_is_rejected_by_default(worker, client, settings, model, events_file, store):
    name = scripted(model, [{"tool_calls": [{"name": "drop_table", "arguments": {"name": "users"}}]},
                            {"content": None, "echo_tool_results": True}])
    handle = await start_agent(client, settings, "drop", model=name)
    result = await handle.result()
    assert effects(events_file, "drop_table") == []
    assert "drop_table was not run: rejected by timeout: no decision within 1 s" in result.final_answer
    (tool,) = await records(store, result.status.run_id)
    assert tool.approval["verdict"] == "rejected" and tool.approval["timed_out"] is True


async def test_pending_names_the_open_runs_that_cannot_answer(worker, client, settings, model):
    orphan = dataclasses.replace(settings, task_queue=settings.task_queue + "-nobody-polls")
    handle = await start_agent(client, orphan, "never picked up", model=scripted(model, [{"content": "x"}]))
    try:
        # Temporal's visibility lists a new workflow a moment after it starts (its
        # visibility task runs behind the start; on a loaded machine, seconds behind).
        deadline = time.monotonic() + 60
        listed = await pending_approvals(client)
        while handle.id not in listed.unanswered and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            listed = await pending_approvals(client)
        assert handle.id in listed.unanswered
        assert all(p.run_id != handle.id for p in listed.waiting)
    finally:
        await handle.terminate(reason="test over")


async def test_repeats_and_edits_are_compared_on_validated_values(worker, client, settings, model, events_file, store):
    main = scripted(model, [{"tool_calls": [{"name": "send_invoice", "arguments": INVOICE}]}, {"content": "sent"}])
    handle = await start_agent(client, settings, "spelled differently", model=main)
    run_id = (await handle.result()).status.run_id
    # The fork's model spells the amount as a string: the same effect for the tool's validator.
    child = await fork(client, settings, store, run_id, 1, branch="spelled", model=scripted(model, [
        UNUSED, {"tool_calls": [{"name": "send_invoice", "arguments": {"customer": "acme", "amount_cents": "1200"}}]},
        {"content": "child"}]))
    await child.handle.result()
    assert len(effects(events_file, "send_invoice")) == 1
    assert (await records(store, run_id, "spelled"))[-1].reused is not None

    name = scripted(model, [{"tool_calls": [{"name": "wire_money", "arguments": {"to": "bob", "amount_cents": 500}}]},
                            {"content": "done"}])
    handle = await start_agent(client, settings, "edit as text", model=name)
    status = await waiting_calls(handle)
    record = await approve(client, status.run_id, status.pending_approvals[0].tool_call_id, by="ann",
                           arguments={"to": "bob", "amount_cents": "450"})
    await handle.result()
    assert record.original_arguments == {"to": "bob", "amount_cents": 500}
    (tool,) = await records(store, status.run_id)
    assert tool.tool_input == {"to": "bob", "amount_cents": 450}  # as the validator read it, as it ran


async def test_a_decision_no_worker_takes_is_not_confirmed(client, settings, model, events_file, spawn_worker):
    from checkpoint_bridge.branches.decisions import decide
    from workflows.vocabulary.contracts import ApprovalDecision

    name = scripted(model, [{"tool_calls": [{"name": "wire_money", "arguments": {"to": "zoe", "amount_cents": 3}}]},
                            {"content": "done"}])
    first = spawn_worker()
    handle = await start_agent(client, settings, "no worker", model=name)
    try:
        status = await waiting_calls(handle)
        first.kill()  # its polls stay listed for a while: the decision is sent, and nobody takes it
        decision = ApprovalDecision(tool_call_id=status.pending_approvals[0].tool_call_id, verdict="approve", by="kim",
                                    decided_at=datetime.now(timezone.utc))
        with pytest.raises(DecisionRefusedError, match="is not confirmed .no worker took it within 3 s.*rewind status"):
            await decide(client, status.run_id, decision, timeout_s=3)
        assert effects(events_file, "wire_money") == []
    finally:
        await handle.terminate(reason="test over")
