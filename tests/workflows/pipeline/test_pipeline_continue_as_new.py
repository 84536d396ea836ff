"""A long pipeline continues as new: each run hands over once its calls in flight ended and
their steps are stored, and the next runs the code again against the record (as a fork
does), so no call runs twice, ctx.random() draws the same numbers and a slept ctx.sleep is
not slept again; the store holds one unbroken run that `rewind mirror` rebuilds."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError

from activities.code.pipelines import PipelineRegistry
from activities.tools.registry import ToolRegistry
from activities.model.llm import ModelEndpoint
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from helpers import chain_events, outputs_of, read_events
from rewind.client import pipeline_input, start_run
from workflows.vocabulary.status import RunLimits


async def test_a_long_pipeline_continues_as_new_without_running_a_call_twice(client, settings, model, tmp_path,
                                                                            events_file):
    from checkpoint_bridge.projection.mirror import mirror_run
    from worker import build_worker

    pairs = 24
    name = f"long-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"think": [{"content": "ok"}]})
    registry = ToolRegistry.from_modules(["agent_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    inp = pipeline_input(settings, "long_pairs", {"pairs": pairs}, model=f"script:{name}",
                         run_id=f"pipe-can-{uuid.uuid4().hex[:6]}", history_limit_bytes=30_000,
                         limits=RunLimits(max_steps=200))
    async with build_worker(client, settings, registry, endpoint,
                            pipelines=PipelineRegistry.from_modules(["agent_pipelines"])):
        handle = await start_run(client, settings, inp)
        result = await handle.result()
    status = result.status
    assert status.state == "completed" and status.final_answer == f"{pairs} turns", status
    assert status.continued_as_new >= 2, status
    assert status.step == 2 * pairs + 1 and status.llm_calls == pairs and status.tool_calls_done == pairs, status

    events = await chain_events(client, inp.run_id)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled.count("call_llm") == pairs and scheduled.count("run_tool") == pairs, scheduled
    slept = [e for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
             and e.timer_started_event_attributes.start_to_fire_timeout.ToSeconds() == 1]
    assert len(slept) == 1  # ctx.sleep(1), once: the runs after it skip it
    assert len([r for r in model.requests() if r.get("label") == "think"]) == pairs

    async with open_checkpoint_store(settings.store_url) as store:
        summaries = await store.list_checkpoints(inp.run_id)
        assert [s.step_index for s in summaries] == list(range(2 * pairs + 2))
        assert all(s.parent_id == (summaries[i - 1].checkpoint_id if i else None) for i, s in enumerate(summaries))
        last = await store.load_latest(inp.run_id)
        assert len(last.agent_variables["drawn"]) == pairs  # the state the code rebuilt, every draw the same
        labels = [s.step_label for s in summaries]
        assert labels == ["start", *["think", "blob"] * pairs, "result"], labels
        live = await store.raw_objects(inp.run_id)
    async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
        report = await mirror_run(client, rebuilt, inp.run_id, outputs=outputs_of(settings))
        assert report.checkpoints == 2 * pairs + 2
        assert await rebuilt.raw_objects(inp.run_id) == live


SHIFTING = '''
from activities.code.pipelines import pipeline

FIRST = "think"


@pipeline
async def shifting(ctx, pairs: int) -> str:
    for turn in range(pairs):
        await ctx.llm(FIRST if turn == 0 else "think", user=f"turn {{turn}}")
        await ctx.tool("blob", index=turn, size=1500)
        if turn == 6:
            await ctx.tool("gate", name=ctx.state.setdefault("gate", "{gate}"))
    return "done"
'''


async def test_code_changed_under_a_continued_run_stops_it_naming_the_call(client, settings, model, tmp_path,
                                                                          events_file, monkeypatch):
    """The next run of a continue-as-new imports today's code: a call it asks at a position this
    workflow recorded, other than the recorded one, ends the run in one line (not a live call)."""
    from worker import build_worker

    gate = f"g-{uuid.uuid4().hex[:6]}"
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("REWIND_TEST_GATE_DIR", str(gates))
    code = tmp_path / "code"
    code.mkdir()
    module = f"shifting_{uuid.uuid4().hex[:6]}"
    (code / f"{module}.py").write_text(SHIFTING.format(gate=gate))
    monkeypatch.syspath_prepend(str(code))
    name = f"shift-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"think": [{"content": "ok"}], "ponder": [{"content": "ok"}]})
    inp = pipeline_input(settings, "shifting", {"pairs": 20}, model=f"script:{name}",
                         run_id=f"pipe-shift-{uuid.uuid4().hex[:6]}", history_limit_bytes=30_000,
                         limits=RunLimits(max_steps=200))
    async with build_worker(client, settings, ToolRegistry.from_modules(["agent_tools"]),
                            ModelEndpoint(base_url=model.base_url, api_key="test-key"),
                            pipelines=PipelineRegistry.from_modules([module])):
        handle = await start_run(client, settings, inp)
        while not any(e.get("kind") == "gate_wait" for e in read_events(events_file)):
            await asyncio.sleep(0.05)
        # Deployed while the run waits: the first call is another one now.
        (code / f"{module}.py").write_text(SHIFTING.format(gate=gate).replace('FIRST = "think"', 'FIRST = "ponder"'))
        (gates / gate).touch()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    line = str(failed.value.cause)
    assert "the pipeline's code changed under the run: call 0 is llm call 'think'" in line, line
    assert "the code now makes llm call 'ponder'" in line, line
    assert "ponder" not in [r.get("label") for r in model.requests()]  # nothing ran live in its place
