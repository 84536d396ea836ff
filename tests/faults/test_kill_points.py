"""Issue 7, item 1: SIGKILL of the worker at each point of a step.

A scripted run goes through a model call, a slow tool (with a fast sibling
in the same step), the next model call and more tools. The worker process is
SIGKILLed either while a model call is in flight, while a tool is running,
or after a tool completed and before the next model call answered. A standby
worker then finishes the run, and the conversation in the checkpoint store
must be exactly the one of the same script run undisturbed: no repeated
model turn, no repeated tool result, unique tool call ids.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState

from fault_helpers import (
    add_script,
    assert_chain,
    assert_same_transcript,
    assert_well_formed,
    pending_activities,
    wait_for_event,
    wait_until,
)
from helpers import final_transcript, read_events, start_agent, turns_seen

SCRIPT = [
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}]},
    {"tool_calls": [
        {"name": "slow", "arguments": {"label": "work", "seconds": 2}},
        {"name": "lookup", "arguments": {"term": "beta"}},
    ]},
    {"tool_calls": [
        {"name": "lookup", "arguments": {"term": "gamma"}},
        {"name": "lookup", "arguments": {"term": "delta"}},
    ]},
    {"content": "all four terms looked up"},
]
LAST_STEP = len(SCRIPT)  # step 0 is the start, then one step per model turn
SLOW_DELAY_S = 4.0  # how long the model takes to answer turn 2, the call after the slow tool
STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED

POINTS = ["model_call", "tool", "after_tool_before_model"]
TASK = "look up four terms, slowly"
_BASELINE: dict[str, list[dict]] = {}  # computed by whichever kill point runs first


async def _kill_during_model_call(handle, events_file, model, run_id) -> str:
    await wait_for_event(events_file, "slow_start", run=run_id)
    model.inject_fault(200, delay_s=SLOW_DELAY_S)  # the next model call (turn 2) answers slowly
    await wait_for_event(events_file, "slow_end", run=run_id)
    await wait_until(
        lambda: _has(handle, "call_llm", STARTED), "the model call after the slow tool to start", 30,
    )
    await asyncio.sleep(1.0)  # well inside the model's 4 s answer
    return "model call of step 3 in flight"


async def _kill_during_tool(handle, events_file, model, run_id) -> str:
    await wait_for_event(events_file, "slow_start", run=run_id)
    # The fast sibling of the same step has finished, and the server has its
    # completion: only the slow tool is still running.
    await wait_for_event(events_file, "lookup", run=run_id, term="beta")
    await wait_until(
        lambda: _only_tool_running(handle), "the sibling lookup's completion to reach the server", 10,
    )
    await asyncio.sleep(0.3)
    return "slow tool of step 2 running"


async def _kill_after_tool(handle, events_file, model, run_id) -> str:
    await wait_for_event(events_file, "slow_start", run=run_id)
    model.inject_fault(200, delay_s=SLOW_DELAY_S)  # the next model call answers slowly
    await wait_for_event(events_file, "slow_end", run=run_id)
    # The tool's end event is written just before the activity returns: wait
    # (a few ms) until the server has its completion, then kill at once.
    pending = await wait_until(
        lambda: _tool_done(handle), "the slow tool's completion to reach the server", 10, poll_s=0.002,
    )
    return f"slow tool completed, pending then: {pending[1] or 'nothing'}"


async def _has(handle, activity: str, state: int) -> bool:
    return any(a == activity and s == state for a, s, _ in await pending_activities(handle))


async def _only_tool_running(handle) -> bool:
    return [a for a, _, _ in await pending_activities(handle) if a == "run_tool"] == ["run_tool"]


async def _tool_done(handle):
    pending = await pending_activities(handle)
    if any(a == "run_tool" for a, _, _ in pending):
        return None
    return True, [a for a, _, _ in pending]


RESUME_BOUND_S = {"tool": 10.0, "model_call": 15.0, "after_tool_before_model": 20.0}
KILLERS = {"model_call": _kill_during_model_call, "tool": _kill_during_tool, "after_tool_before_model": _kill_after_tool}


async def _standby_resume(handle, dead_identity: str, killed_at: float) -> tuple[float, str]:
    """Seconds from the SIGKILL to the first task the standby worker started, and what it was."""
    for event in [e async for e in handle.fetch_history_events()]:
        attrs, what = None, ""
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            what = f"activity attempt {attrs.attempt}"
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            attrs, what = event.workflow_task_started_event_attributes, "workflow task"
        if attrs is None or attrs.identity == dead_identity or not attrs.identity:
            continue
        at = event.event_time.seconds + event.event_time.nanos / 1e9
        if at >= killed_at - 0.5:
            return at - killed_at, what
    raise AssertionError("the standby worker never started a task of the run")


@pytest.mark.parametrize("point", POINTS)
async def test_sigkill_at_point_of_step_resumes_with_same_transcript(
    point, client, settings, model, events_file, spawn_worker
):
    model_name = add_script(model, SCRIPT)
    first = spawn_worker()
    if "transcript" not in _BASELINE:
        # The same script undisturbed, on the same kind of worker: the expected
        # conversation (the same for every kill point: answers are a function
        # of the request, so the model name and run id do not enter it).
        baseline = await start_agent(client, settings, TASK, model=model_name)
        assert (await asyncio.wait_for(baseline.result(), 60)).status.state == "completed"
        _BASELINE["transcript"] = await final_transcript(settings, baseline.id)
    expected = _BASELINE["transcript"]
    assert_well_formed(expected)
    task = TASK
    requests_before = len(model.requests())

    handle = await start_agent(client, settings, task, model=model_name)
    run_id = handle.id
    where = await KILLERS[point](handle, events_file, model, run_id)
    first.kill()
    killed_at = time.time()
    dead_identity = f"{first.process.pid}@{socket.gethostname()}"
    standby = spawn_worker()
    result = await asyncio.wait_for(handle.result(), 120)
    finished_at = time.time()

    assert result.status.state == "completed", result.status
    assert result.status.mirror_pending == 0 and result.status.mirror_error is None
    transcript = await final_transcript(settings, run_id)
    assert_well_formed(transcript)
    assert_same_transcript(transcript, expected)

    # Every checkpoint of the run is there and chained, as in the baseline.
    from checkpoint_bridge.checkpoints.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        await assert_chain(store, run_id, LAST_STEP)

    events = [e for e in read_events(events_file) if e["run"] == run_id]
    lookups = sorted(e["term"] for e in events if e["kind"] == "lookup")
    slow_attempts = [e["attempt"] for e in events if e["kind"] == "slow_start"]
    turns = sorted(turns_seen(model.requests()[requests_before:], task))
    # A completed tool call never runs again (read-only ones are cached, so
    # each term is looked up exactly once even across the crash).
    assert lookups == ["alpha", "beta", "delta", "gamma"], lookups
    if point == "tool":
        # The interrupted tool ran again on the standby worker, once.
        assert slow_attempts == [1, 2], slow_attempts
        assert [e["pid"] for e in events if e["kind"] == "slow_start"][1] == standby.process.pid
        assert turns == [0, 1, 2, 3], turns
    elif point == "model_call":
        assert slow_attempts == [1], slow_attempts
        # Only the interrupted model call (turn 2) was asked again.
        assert turns == [0, 1, 2, 2, 3], turns
    else:
        assert slow_attempts == [1], slow_attempts
        assert turns in ([0, 1, 2, 3], [0, 1, 2, 2, 3]), turns

    resume_s, what = await _standby_resume(handle, dead_identity, killed_at)
    # Heartbeats, not the calls' whole timeouts (120 s), let the standby take over:
    # tool heartbeat 2 s, model-call heartbeat 5 s, a workflow task 10 s (+1 s retry backoff).
    assert resume_s < RESUME_BOUND_S[point], f"standby took over only after {resume_s:.1f}s"
    print(f"\n[kill point {point}] killed with {where}; standby's first task ({what}) "
          f"{resume_s:.2f}s after SIGKILL; run finished {finished_at - killed_at:.2f}s after SIGKILL; "
          f"model turns asked: {turns}")
