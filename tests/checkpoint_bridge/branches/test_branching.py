"""Fork and rollback against the real dev server, worker, model and store."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from counting_objects import CountingObjects
from helpers import read_events, start_agent
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from rewind import compensate, fork, rollback
from workflows.vocabulary.errors import CheckpointNotUsableError
from checkpoint_bridge.checkpoints.lineage import StepNotFoundError, lineage
from checkpoint_bridge.projection.projector import chain_events
from checkpoint_bridge.checkpoints.store import CheckpointStore, open_checkpoint_store
from checkpoint_bridge.stores import open_object_store
from rewind.client import branch_workflows
from workflows.vocabulary.errors import InvalidIdError, RunExistsError, RunNotFoundError

TASK = "Research these companies: Acme, Globex, Initech."
TECH = "You are a research agent. Emphasize technical analysis (architecture, engineering) over business metrics."


async def _tool_activities(client, workflow_id: str) -> list[str]:
    """Tools executed by a workflow, across its continue-as-new chain."""
    names = []
    for e in await chain_events(client, workflow_id):
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "run_tool":
                (req,) = await client.data_converter.decode(attrs.input.payloads, [dict])
                names.append(req["tool_name"])
    return names


@pytest.fixture
async def store(settings):
    async with open_checkpoint_store(settings.store_url) as s:
        yield s


async def _research_run(client, settings) -> str:
    handle = await start_agent(client, settings, TASK)
    assert (await handle.result()).status.state == "completed"
    return handle.id


async def test_fork_with_new_system_prompt_reuses_answered_tool_calls(worker, client, settings, model, events_file, store):
    run = await _research_run(client, settings)
    result = await fork(client, settings, store, run, 1, branch="tech", system_prompt=TECH)
    outcome = await result.handle.result()
    assert outcome.status.state == "completed" and outcome.status.branch_id == "tech"
    assert "technical" in outcome.final_answer.lower()
    # The model saw the new system prompt from the fork on.
    fork_requests = [r for r in model.requests() if r["messages"][0]["content"] == TECH]
    assert len(fork_requests) == 2
    # No search from before the fork point ran again; the steps after it ran fresh.
    assert await _tool_activities(client, result.workflow_id) == ["save_report"]
    line = await lineage(store, run, "tech")
    assert [(s.branch_id, s.step_index) for s in line] == [("main", 0), ("main", 1), ("tech", 2), ("tech", 3)]
    assert line[2].parent_id == f"{run}:main:1"
    first = await store.load(line[2].checkpoint_id)
    assert first.messages[0]["content"] == TECH
    assert first.llm_cost_usd > (await store.load(f"{run}:main:1")).llm_cost_usd  # totals carried over
    assert len(list((events_file.parent / "outbox").glob("*.md"))) == 2  # main's report and the fork's


async def test_a_fork_lists_the_run_once(worker, client, settings, model, events_file):
    run = await _research_run(client, settings)
    counting = CountingObjects(open_object_store(settings.store_url))
    async with CheckpointStore(counting) as store:  # type: ignore[arg-type]
        result = await fork(client, settings, store, run, 1, branch="counted")
        # Where step 1 is, whether the name is taken and the checkpoint's rollback markers:
        # one listing of the run, read before anything starts (three listings before).
        assert counting.lists == 1
    assert (await result.handle.result()).status.state == "completed"


async def _first_task_activities(client, workflow_id: str) -> list[str]:
    """The activities a workflow scheduled before any of them completed: its first workflow task's."""
    names = []
    async for e in client.get_workflow_handle(workflow_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            break
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(e.activity_task_scheduled_event_attributes.activity_type.name)
    return sorted(names)


async def test_a_branch_that_keeps_its_tools_calls_the_model_while_it_describes_them(worker, client, settings, model,
                                                                                    events_file, store):
    run = await _research_run(client, settings)
    kept = await fork(client, settings, store, run, 1, branch="kept", system_prompt=TECH)
    outcome = await kept.handle.result()
    assert outcome.status.state == "completed" and "technical" in outcome.final_answer.lower()
    assert await _tool_activities(client, kept.workflow_id) == ["save_report"]
    # Seeded with the specs main was described: no round trip before the first model call.
    assert await _first_task_activities(client, kept.workflow_id) == ["call_llm", "describe_tools"]
    back = await rollback(client, settings, store, run, 1, branch="kept")
    assert (await back.continued.handle.result()).status.state == "completed"
    assert await _first_task_activities(client, back.continued.workflow_id) == ["call_llm", "describe_tools"]
    # Other tools: described first, as a new run's.
    lean = await fork(client, settings, store, run, 1, branch="lean", tools=["search_company"])
    assert (await lean.handle.result()).status.state == "completed"
    assert await _first_task_activities(client, lean.workflow_id) == ["describe_tools"]


async def test_rolling_a_fork_back_to_its_fork_point_keeps_its_system_prompt(worker, client, settings, model, events_file, store):
    run = await _research_run(client, settings)
    forked = await fork(client, settings, store, run, 1, branch="tech", system_prompt=TECH)
    await forked.handle.result()
    back = await rollback(client, settings, store, run, 1, branch="tech")  # step 1 is main's checkpoint
    outcome = await back.continued.handle.result()
    assert outcome.status.state == "completed" and "technical" in outcome.final_answer.lower()
    first = await store.load(f"{run}:tech.r1:2")
    assert first.messages[0]["content"] == TECH


async def test_fork_with_other_model_and_tools_and_fork_of_fork(worker, client, settings, model, events_file, store):
    run = await _research_run(client, settings)
    other = await fork(client, settings, store, run, 1, branch="mini", model="gpt-4.1-mini")
    assert (await other.handle.result()).status.model == "gpt-4.1-mini"
    assert {r["model"] for r in model.requests()[-2:]} == {"gpt-4.1-mini"}
    lean = await fork(client, settings, store, run, 1, branch="lean", tools=["search_company"])
    lean_result = await lean.handle.result()
    assert lean_result.status.state == "completed" and "saved" not in lean_result.final_answer.lower()
    assert await _tool_activities(client, lean.workflow_id) == []
    # A fork of the fork continues the numbering and links back through both branches.
    again = await fork(client, settings, store, run, 2, from_branch="mini", branch="mini2", system_prompt=TECH)
    assert (await again.handle.result()).status.state == "completed"
    line = await lineage(store, run, "mini2")
    assert [(s.branch_id, s.step_index) for s in line] == [("main", 0), ("main", 1), ("mini", 2), ("mini2", 3)]


async def test_fork_a_failed_run_from_its_last_good_step(worker, client, settings, model, events_file, store):
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "x"}}]},
        {"content": "recovered"},
    ])
    handle = await start_agent(client, settings, "will fail", model=f"script:{name}")
    await asyncio.sleep(0)  # first model call succeeds; the second is refused
    for _ in range(200):
        if any(r["status"] == 200 for r in model.requests()):
            break
        await asyncio.sleep(0.02)
    model.inject_fault(401, count=1)
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    steps = {s.step_index: s.status for s in await store.list_checkpoints(handle.id)}
    assert steps[2] == "failed"
    with pytest.raises(CheckpointNotUsableError, match="fork from step 1"):
        await fork(client, settings, store, handle.id, 2, branch="retry")
    result = await fork(client, settings, store, handle.id, 1, branch="retry")
    outcome = await result.handle.result()
    assert outcome.final_answer == "recovered"
    assert [e["kind"] for e in read_events(events_file)].count("lookup") == 1  # not run again


async def test_fork_a_continued_as_new_run(worker, client, settings, model, events_file, store):
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [{"tool_calls": [{"name": "blob", "arguments": {"index": i, "size": 1500}}]} for i in range(12)]
                     + [{"content": "done"}])
    handle = await start_agent(client, settings, "long", model=f"script:{name}", history_limit_bytes=30_000)
    result = await handle.result()
    assert result.status.continued_as_new >= 2
    forked = await fork(client, settings, store, handle.id, 3, branch="early")
    outcome = await forked.handle.result()
    assert outcome.status.state == "completed" and outcome.status.step == 13
    # Steps 4.. re-ran on the new branch; nothing before the fork point did.
    assert len(await _tool_activities(client, forked.workflow_id)) == 9


async def test_rollback_of_a_completed_run_keeps_everything(worker, client, settings, model, events_file, store):
    run = await _research_run(client, settings)
    before = await store.raw_objects(run)
    result = await rollback(client, settings, store, run, 1)
    assert result.stopped_workflow is None
    assert result.invalidated_steps == [f"{run}:main:2", f"{run}:main:3"]
    assert [(e.step, e.tool_name) for e in result.side_effects] == [(2, "save_report")]
    outcome = await result.continued.handle.result()
    assert outcome.status.state == "completed" and outcome.status.branch_id == "main.r1"
    after = await store.raw_objects(run)
    assert all(after.get(k) == v for k, v in before.items())  # nothing deleted or rewritten
    statuses = {(s.branch_id, s.step_index): s.status for s in await store.list_checkpoints(run)}
    assert statuses[("main", 2)] == statuses[("main", 3)] == "invalidated"
    assert statuses[("main.r1", 2)] == statuses[("main.r1", 3)] == "completed"
    line = await lineage(store, run, "main")
    assert [(s.branch_id, s.step_index) for s in line] == [("main", 0), ("main", 1), ("main.r1", 2), ("main.r1", 3)]


async def test_a_rollback_interrupted_before_its_continuation_started_finishes_on_retry(
        worker, client, settings, model, events_file, store):
    """Found by the seeded soak: a rollback wrote its markers, then Temporal restarted
    before the continuation's workflow started; every retry answered "nothing to roll
    back" (the markers already hid the steps) and the branch stayed without a workflow."""
    run = await _research_run(client, settings)
    # What the interrupted rollback left: the branch's markers, no continuation.
    await store.invalidate_after(run, "main", 1, "rolled back to step 1 by rewind rollback")
    assert [s.step_index for s in await lineage(store, run, "main")] == [0, 1]
    result = await rollback(client, settings, store, run, 1)  # the retry
    assert result.invalidated_steps == [f"{run}:main:2", f"{run}:main:3"]
    # The effects of the steps it undoes are known to the continuation, as on the first try.
    assert [(e.step, e.tool_name) for e in result.side_effects] == [(2, "save_report")]
    outcome = await result.continued.handle.result()
    assert outcome.status.state == "completed" and outcome.status.branch_id == "main.r1"
    assert [h.id for _, h in await branch_workflows(client, run, "main")][-1] == result.continued.workflow_id
    line = await lineage(store, run, "main")
    assert [(s.branch_id, s.step_index) for s in line] == [("main", 0), ("main", 1), ("main.r1", 2), ("main.r1", 3)]
    # Retried once more, it is a rollback of the continuation's own steps, not a second resume.
    with pytest.raises(CheckpointNotUsableError, match="nothing to roll back"):
        await rollback(client, settings, store, run, 3)


async def test_rollback_of_a_running_run_stops_it_and_compensates_once(worker, client, settings, model, events_file, store):
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}]},
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "cfo@example.com", "body": "numbers"}}]},
        {"tool_calls": [{"name": "slow", "arguments": {"label": "long", "seconds": 30}}]},
        {"content": "done"},
    ])
    handle = await start_agent(client, settings, "running rollback", model=f"script:{name}")
    for _ in range(600):
        if any(e["kind"] == "slow_start" for e in read_events(events_file)):
            break
        await asyncio.sleep(0.05)
    result = await rollback(client, settings, store, handle.id, 1, compensate=True)
    assert result.stopped_workflow == handle.id
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert [(e.step, e.tool_name) for e in result.side_effects] == [(2, "send_email")]
    assert [c["status"] for c in result.compensations] == ["compensated"]
    # Exactly one workflow of the branch runs: the continuation.
    running = [h for _, h in await branch_workflows(client, handle.id, "main")
               if (await h.describe()).status == WorkflowExecutionStatus.RUNNING]
    assert [h.id for h in running] == [result.continued.workflow_id]
    await result.continued.handle.cancel()
    # Compensating the same effects again runs nothing twice.
    again = await compensate(client, settings, handle.id, "main", 1, result.side_effects)
    assert [c["status"] for c in again] == ["compensated"]
    assert [e["kind"] for e in read_events(events_file)].count("recall_email") == 1
    statuses = {(s.branch_id, s.step_index): s.status for s in await store.list_checkpoints(handle.id)}
    assert statuses[("main", 2)] == "invalidated" and statuses[("main", 1)] == "completed"


async def test_bad_input_changes_nothing(worker, client, settings, model, events_file, store):
    run = await _research_run(client, settings)
    await fork(client, settings, store, run, 1, branch="taken")
    before = await store.raw_objects(run)
    workflows_before = [h.id for _, h in await branch_workflows(client, run, "main")]
    cases = [
        (fork(client, settings, store, "no-such-run", 1, branch="b1"), RunNotFoundError, "no checkpoints"),
        (fork(client, settings, store, run, 99, branch="b2"), StepNotFoundError, "out of range"),
        (fork(client, settings, store, run, 1, branch="taken"), RunExistsError, "already has a branch"),
        (fork(client, settings, store, run, 1, branch="../x"), InvalidIdError, "branch id"),
        (fork(client, settings, store, run, 1, branch="main.r3"), InvalidIdError, "reserves"),
        (fork(client, settings, store, run, 1, branch="b3", from_branch="nope"), RunNotFoundError, "no branch 'nope'"),
        (rollback(client, settings, store, run, 42), StepNotFoundError, "out of range"),
        (rollback(client, settings, store, "no-such-run", 1), RunNotFoundError, "no checkpoints"),
        (rollback(client, settings, store, run, 3), CheckpointNotUsableError, "nothing to roll back"),
        (rollback(client, settings, store, "a/b", 1), InvalidIdError, "run id"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text):
            await call
    await asyncio.sleep(0.5)  # the taken branch's fork finishes its mirror
    after = await store.raw_objects(run)
    assert {k: v for k, v in after.items() if "/taken/" not in k} == before | {}
    assert [h.id for _, h in await branch_workflows(client, run, "main")] == workflows_before
    assert [b for b in await store.branches(run)] == ["main", "taken"]
