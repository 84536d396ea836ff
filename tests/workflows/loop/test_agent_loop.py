"""The agent loop against a real dev server, worker and scripted model."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from helpers import final_transcript, read_events, scripted, start_agent
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError

from rewind.client import run_view, start_run
from workflows.vocabulary.contracts import AgentInput, LlmTuning, LoopState, RunLimits, ToolSpec
from workflows.vocabulary.errors import UsageError


async def test_research_agent_end_to_end(worker, client, settings, model, events_file, tmp_path):
    task = "Research these companies: Acme, Globex and Initech."
    handle = await start_agent(client, settings, task)
    result = await handle.result()
    assert result.status.state == "completed"
    assert result.status.step == 3
    assert "saved to" in result.final_answer
    # Step 1 asked for three searches at once; all ran, none from cache.
    assert result.status.tool_calls_done == 4 and result.status.tool_cache_hits == 0
    transcript = await final_transcript(settings, handle.id)
    assistant = [m for m in transcript if m["role"] == "assistant"]
    first_calls = assistant[0]["tool_calls"]
    assert [c["function"]["name"] for c in first_calls] == ["search_company"] * 3
    # Each tool call is answered by a tool message with exactly its id.
    replies = transcript[3:6]
    assert [r["tool_call_id"] for r in replies] == [c["id"] for c in first_calls]
    # The assistant message is kept verbatim as the API returned it.
    raw = [r["response"]["choices"][0]["message"] for r in model.requests() if r["status"] == 200]
    assert assistant == raw
    reports = list((tmp_path / "outbox").glob("*.md"))
    assert len(reports) == 1 and "Acme" in reports[0].read_text()
    assert result.status.total_tokens > 0 and result.status.cost_usd > 0


async def test_bad_model_output_becomes_tool_messages(worker, client, settings, model, events_file):
    model_name = scripted(model, [
        {"tool_calls": [
            {"name": "lookup", "arguments": '{"term": '},
            {"name": "no_such_tool", "arguments": {}},
            {"name": "lookup", "arguments": {"wrong": 1}},
            {"name": "lookup", "arguments": "[1, 2]"},
            {"name": "always_fails", "arguments": {}},
            {"name": "refuses", "arguments": {"item": "x"}},
        ]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "misbehave", model=model_name)
    result = await handle.result()
    assert result.status.state == "completed"
    answer = result.final_answer
    assert "not valid JSON" in answer
    assert "unknown tool 'no_such_tool'" in answer and "available tools" in answer
    assert "invalid arguments for lookup" in answer and "term" in answer
    assert "must be a JSON object" in answer
    assert "always_fails failed after retries" in answer and "deliberate failure" in answer
    assert "cannot handle 'x'" in answer
    kinds = [e["kind"] for e in read_events(events_file)]
    assert kinds.count("lookup") == 0  # nothing ran with bad arguments
    assert kinds.count("always_fails") == 2  # its max_attempts, then the error went to the model
    assert kinds.count("refuses") == 1  # ToolError is not retried
    assert result.status.last_error is not None


async def test_rate_limit_is_retried_with_retry_after(worker, client, settings, model, events_file):
    model.inject_fault(429, count=2, retry_after=0.2)
    task = "Research these companies: Acme."
    handle = await start_agent(client, settings, task)
    result = await handle.result()
    assert result.status.state == "completed"
    statuses = [r["status"] for r in model.requests()]
    assert statuses[:2] == [429, 429] and statuses.count(429) == 2
    attempts = [
        e.activity_task_started_event_attributes.attempt
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert 3 in attempts  # the first model call succeeded on its third attempt


async def test_a_provider_failing_longer_than_ten_attempts_costs_the_run_nothing(worker, client, settings, model,
                                                                                  events_file):
    """Found by the soak (seed 2512): a model answering 500 for longer than ten attempts' backoff
    failed the run. Transient failures are retried for a time (LlmTuning.retry_for_s), not a count."""
    model.inject_fault(500, count=14, retry_after=0.05)
    handle = await start_agent(client, settings, "Research these companies: Acme.")
    result = await handle.result()
    assert result.status.state == "completed"
    assert [r["status"] for r in model.requests()].count(500) == 14
    attempts = [
        e.activity_task_started_event_attributes.attempt
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert 15 in attempts  # the first model call succeeded on its fifteenth attempt


async def test_a_provider_down_past_retry_for_s_fails_the_run_saying_so(worker, client, settings, model, events_file):
    model.inject_fault(503, count=10_000, retry_after=0.2)
    handle = await start_agent(client, settings, "Research these companies: Acme.",
                               llm=LlmTuning(retry_for_s=3.0, timeout_s=2.0))
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    reason = str(info.value.cause)
    # The reason names the provider's answer or, when Temporal's own "not enough time to
    # schedule next retry" ended the retries (a busy machine: the attempts took longer), that
    # the call's time ran out, with the last attempt's answer when Temporal keeps it as the cause.
    assert "model call of step" in reason and ("503" in reason or "ScheduleToClose" in reason), reason
    view = await run_view(client, handle.id)
    assert view.status is not None and view.status.state == "failed", view.status
    model.reset()


async def test_unauthorized_ends_the_run_with_a_clear_reason(worker, client, settings, model, events_file):
    model.inject_fault(401, count=5)
    handle = await start_agent(client, settings, "Research these companies: Acme.")
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    reason = str(info.value.cause)
    assert "401" in reason and "OPENAI_API_KEY" in reason
    assert len(model.requests()) == 1  # not retried
    view = await run_view(client, handle.id)
    assert view.workflow_status == "failed"
    assert view.status is not None and view.status.state == "failed"
    assert "401" in (view.status.last_error or "")


async def test_parallel_tool_calls_overlap(worker, client, settings, model, events_file):
    model_name = scripted(model, [
        {"tool_calls": [{"name": "slow", "arguments": {"label": f"t{i}", "seconds": 1.0}} for i in range(3)]},
        {"content": "done"},
    ])
    result = await (await start_agent(client, settings, "in parallel", model=model_name)).result()
    assert result.status.state == "completed"
    events = read_events(events_file)
    starts = [e["at"] for e in events if e["kind"] == "slow_start"]
    ends = [e["at"] for e in events if e["kind"] == "slow_end"]
    assert len(starts) == 3 and len(ends) == 3
    assert max(starts) < min(ends)  # every call started before any finished


async def test_read_only_calls_are_served_from_the_run_cache(worker, client, settings, model, events_file):
    model_name = scripted(model, [
        {"tool_calls": [
            {"name": "lookup", "arguments": {"term": "x"}},
            {"name": "lookup", "arguments": {"term": "x"}},
            {"name": "tagged", "arguments": {"tags": ["b", "a"]}},
        ]},
        {"tool_calls": [
            {"name": "lookup", "arguments": '{"term":   "x"}'},
            {"name": "tagged", "arguments": {"tags": ["a", "b"]}},
        ]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "cache me", model=model_name)
    result = await handle.result()
    kinds = [e["kind"] for e in read_events(events_file)]
    assert kinds.count("lookup") == 1 and kinds.count("tagged") == 1
    assert result.status.tool_cache_hits == 3
    assert "definition of x" in result.final_answer and "a,b" in result.final_answer
    scheduled = [
        e async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "run_tool"
    ]
    assert len(scheduled) == 2  # cache hits never schedule an activity
    async with open_checkpoint_store(settings.store_url) as store:
        log = [r.model_dump() for r in (await store.load_latest(handle.id)).tool_call_cache]
    assert sum(1 for entry in log if entry["served_from_cache"]) == 3


async def test_side_effect_tools_get_distinct_stable_keys(worker, client, settings, model, events_file):
    model_name = scripted(model, [
        {"tool_calls": [
            {"name": "send_email", "arguments": {"to": "a@x", "body": "1"}},
            {"name": "send_email", "arguments": {"to": "a@x", "body": "1"}},
        ]},
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "a@x", "body": "1"}}]},
        {"content": "ok"},
    ])
    await (await start_agent(client, settings, "mail", model=model_name)).result()
    await (await start_agent(client, settings, "mail", model=model_name)).result()
    effects = [e for e in read_events(events_file) if e["kind"] == "send_email_effect"]
    # Side-effecting calls are never cached: 3 calls per run, 2 runs, all distinct keys.
    assert len(effects) == 6 and len({e["key"] for e in effects}) == 6


async def test_tools_missing_on_worker_fail_the_run(worker, client, settings, model, events_file):
    # Refused before anything is created while workers run and none has the tool...
    with pytest.raises(UsageError, match="not_registered"):
        await start_agent(client, settings, "x", tools=["lookup", "not_registered"])
    # ...and a run that gets past that (its workers went away) fails naming it.
    handle = await start_run(client, settings, AgentInput(run_id=f"t-{uuid.uuid4().hex[:8]}", task="x",
                             tools=["lookup", "not_registered"], tool_wait_s=1), verify_tools=False)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert "not_registered" in str(info.value.cause) and "--tool-modules" in str(info.value.cause)


async def test_a_seeded_run_whose_tool_no_worker_has_still_fails_naming_it(worker, client, settings, model, events_file):
    # A fork or rollback that keeps its tools sends its first model call with the specs its
    # source was described, while it describes them again; a tool no worker offers any more
    # still fails the run, naming it, before any tool call runs.
    seed = LoopState(unsent=[{"role": "system", "content": "s"}, {"role": "user", "content": "x"}],
                     tool_specs=[ToolSpec(name="lookup"), ToolSpec(name="not_registered")])
    handle = await start_run(client, settings, AgentInput(run_id=f"t-{uuid.uuid4().hex[:8]}", task="x", resume=seed,
                             tools=["lookup", "not_registered"], tool_wait_s=1), verify_tools=False)
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert "not_registered" in str(info.value.cause) and "--tool-modules" in str(info.value.cause)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name async for e in handle.fetch_history_events()
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled.count("call_llm") == 1 and "describe_tools" in scheduled and "run_tool" not in scheduled


async def test_budgets_stop_the_run_before_the_step_that_would_exceed_them(worker, client, settings, model, events_file):
    loop_name = scripted(model, [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i}"}}]} for i in range(10)])
    result = await (await start_agent(
        client, settings, "loop", model=loop_name, limits=RunLimits(max_steps=2, budget_pause_s=0)
    )).result()
    assert result.status.state == "budget_exceeded" and result.status.step == 2
    assert result.status.budget_reason.startswith("max_steps")
    result = await (await start_agent(
        client, settings, "Research these companies: Acme.", limits=RunLimits(max_cost_usd=1e-9, budget_pause_s=0)
    )).result()
    # The first step cost more than the whole budget; the second would too.
    assert result.status.state == "budget_exceeded" and result.status.step == 1
    assert result.status.budget_reason.startswith("max_cost")


async def test_budget_pause_then_continue_with_a_raised_budget(worker, client, settings, model, events_file):
    name = scripted(model, [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i}"}}]} for i in range(4)] + [{"content": "done"}])
    handle = await start_agent(client, settings, "budgeted", model=name, limits=RunLimits(max_tokens=150))
    view = None
    for _ in range(200):
        view = await run_view(client, handle.id)
        if view.status and view.status.state == "budget_exceeded":
            break
        await asyncio.sleep(0.05)
    assert view.status.state == "budget_exceeded" and view.status.budget_reason.startswith("max_tokens")
    paused_at = view.status.step
    assert view.workflow_status == "running"  # paused, resumable
    await handle.signal("raise_limits", RunLimits(max_tokens=100_000))
    result = await handle.result()
    assert result.status.state == "completed" and result.status.step == 5 > paused_at
    # The run's totals are the sum of its steps' usage, in the checkpoints too.
    from checkpoint_bridge.checkpoints.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        cps = [await store.load(s.checkpoint_id) for s in await store.list_checkpoints(handle.id)]
    steps = [cp.ledger["step"] for cp in cps]
    assert sum(s["total_tokens"] for s in steps) == result.status.total_tokens == cps[-1].llm_tokens_used
    assert sum(s["cost_usd"] for s in steps) == pytest.approx(result.status.cost_usd)
    assert sum(s["tool_calls"] for s in steps) == result.status.tool_calls_done == 4
    assert cps[-1].ledger["branch"]["total_tokens"] == result.status.total_tokens
