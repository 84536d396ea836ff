"""A long graph run continues as new between super-steps, as a pipeline does between calls: the
next run runs the graph again with every call (a model call, a tool call, a node-level node)
answered from the record, so nothing runs twice; a fork from a step of an earlier run of the
chain runs nothing before its point either."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType

from activities.code.graphs import find_langchain
from activities.code.pipelines import PipelineRegistry
from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from checkpoint_bridge.projection.mirror import mirror_run
from helpers import chain_events, outputs_of
from rewind.client import graph_input, start_run

LOOP = '''
import os
from pathlib import Path
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

LOG = Path({log!r})
llm = ChatOpenAI(model="gpt-4o-mini", api_key="unused")


class State(TypedDict):
    n: int
    limit: int
    notes: list


@tool
async def blob(index: int) -> str:
    """A tool result."""
    return ("x" * 1500) + str(index)


async def work(state):
    await llm.ainvoke([HumanMessage(f"turn {{state['n']}}")])
    await blob.ainvoke({{"index": state["n"]}})
    return {{"n": state["n"] + 1}}


def note(state):
    with open(LOG, "a") as f:  # its own I/O: a node-level node
        f.write(f"note {{state['n']}}\\n")
    return {{"notes": [*state.get("notes", []), state["n"]]}}


def route(state):
    return "work" if state["n"] < state["limit"] else END


builder = StateGraph(State)
builder.add_node("work", work)
builder.add_node("note", note)
builder.add_edge(START, "work")
builder.add_edge("work", "note")
builder.add_conditional_edges("note", route, {{"work": "work", END: END}})
graph = builder.compile()
'''


async def test_a_long_graph_continues_as_new_without_running_a_call_or_node_twice(client, settings, model, tmp_path,
                                                                                  monkeypatch):
    from rewind.client import fork
    from worker import build_worker

    turns = 16
    code = tmp_path / "code"
    code.mkdir()
    log = tmp_path / "notes.txt"
    module = f"loop_{uuid.uuid4().hex[:6]}"
    (code / f"{module}.py").write_text(LOOP.format(log=str(log)))
    monkeypatch.syspath_prepend(str(code))
    name = f"loop-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"work": [{"content": "ok"}]})
    registry = ToolRegistry.from_modules([module], finders=[find_langchain])
    inp = graph_input(settings, f"{module}:graph", {"n": 0, "limit": turns}, model=f"script:{name}",
                      run_id=f"graph-can-{uuid.uuid4().hex[:6]}", history_limit_bytes=30_000)
    async with build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="test-key"),
                            pipelines=PipelineRegistry.from_modules([module])):
        handle = await start_run(client, settings, inp)
        result = await handle.result()
        status = result.status
        assert status.state == "completed", status
        assert status.continued_as_new >= 2, status
        assert status.step == 2 * turns + 1, status
        events = await chain_events(client, inp.run_id)
        scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                     if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
        assert scheduled.count("call_llm") == turns and scheduled.count("run_tool") == turns, scheduled
        assert scheduled.count("run_graph_node") == turns, scheduled
        assert log.read_text().splitlines() == [f"note {n}" for n in range(1, turns + 1)]
        assert len([r for r in model.requests() if r.get("label") == "work"]) == turns
        async with open_checkpoint_store(settings.store_url) as store:
            summaries = await store.list_checkpoints(inp.run_id)
            assert [s.step_index for s in summaries] == list(range(2 * turns + 2))
            assert [s.step_label for s in summaries] == ["start", *["work", "note"] * turns, "result"]
            live = await store.raw_objects(inp.run_id)
        # `rewind mirror` rebuilds the same objects from history (steps carried by node-level nodes too).
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            report = await mirror_run(client, rebuilt, inp.run_id, outputs=outputs_of(settings))
            assert report.checkpoints == 2 * turns + 2
            assert await rebuilt.raw_objects(inp.run_id) == live
        # A fork from a step the chain's first run recorded: nothing before it runs again.
        async with open_checkpoint_store(settings.store_url) as store:
            forked = await fork(client, settings, store, inp.run_id, 4, branch="early")
            done = await forked.handle.result()
        assert done.status.state == "completed", done.status
    assert log.read_text().splitlines()[turns:] == [f"note {n}" for n in range(3, turns + 1)]
    assert len([r for r in model.requests() if r.get("label") == "work"]) == 2 * turns - 2
