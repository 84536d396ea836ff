"""16. Long pipelines and graph runs: history stays bounded by continue-as-new.

A pipeline of N model calls (`bench.pipelines.blob_pairs`: a model call and a `blob` tool call
per pair, N/2 pairs) and a graph run of N/2 nodes (`bench.graphs:graph`: a ChatOpenAI call and a
LangChain tool call per node), each on an in-process worker with the scripted model at 0 ms. A
run hands over to a new run (continue-as-new) when Temporal suggests it (about 4,000 events or
4 MB) or its history passes `history_limit_bytes` (4 MB by default): the figures are each run of
the chain's events and bytes against that bound, the number of runs, and that no call ran twice
(the scheduled model calls over the chain equal N/2 ... N).
"""

from __future__ import annotations

import time
import uuid

from temporalio.api.enums.v1 import EventType

from activities.code.graphs import find_langchain
from activities.code.pipelines import PipelineRegistry
from activities.tools.registry import ToolRegistry
from bench.common import TOOLS_MODULE, Section, log, rewind_worker
from rewind.client import graph_input, pipeline_input, start_run
from workflows.vocabulary.status import RunLimits

SUGGESTED_EVENTS = 4_000  # where Temporal's dev server suggests continue-as-new (TEMPORAL-NOTES.md)


async def _chain(client, workflow_id: str) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    """(events, bytes) of each run of the workflow's chain, oldest first."""
    runs = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        history = await handle.fetch_history()
        runs.append((execution.start_time, len(history.events), len(history.to_json().encode())))
    return [(events, size) for _, events, size in sorted(runs)]


def _scheduled(events, activity: str) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name == activity)


async def _pipeline(client, settings, model, calls: int) -> dict:  # type: ignore[no-untyped-def]
    name = f"long-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"think": [{"content": "ok"}]})
    inp = pipeline_input(settings, "blob_pairs", {"pairs": calls // 2, "size": 64}, model=f"script:{name}",
                         run_id=f"bench-long-pipe-{uuid.uuid4().hex[:6]}", limits=RunLimits(max_steps=calls + 10))
    async with rewind_worker(client, settings, model, pipelines=PipelineRegistry.from_modules(["bench.pipelines"])):
        t = time.perf_counter()
        result = await (await start_run(client, settings, inp)).result()
        wall = time.perf_counter() - t
    assert result.status.state == "completed", result.status
    return {"kind": "pipeline", "calls": calls, "wall_s": wall, "runs": await _chain(client, inp.run_id),
            "continued": result.status.continued_as_new, "run_id": inp.run_id,
            "model_calls": result.status.llm_calls, "limit": inp.history_limit_bytes}


async def _graph(client, settings, model, calls: int, deadline_s: float | None = None) -> dict:  # type: ignore[no-untyped-def]
    """The graph run of calls/2 nodes; with `deadline_s`, given that long, then stopped and measured
    as far as it got (a graph run past about 4,000 super-steps does not complete: docs/langgraph.md)."""
    import asyncio

    from rewind.client import run_view
    from worker import build_worker
    from activities.model.llm import ModelEndpoint

    name = f"long-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"work": [{"content": "ok"}]})
    nodes = calls // 2
    inp = graph_input(settings, "bench.graphs:graph", {"n": 0, "limit": nodes}, model=f"script:{name}",
                      run_id=f"bench-long-graph-{uuid.uuid4().hex[:6]}", limits=RunLimits(max_steps=calls + 10))
    registry = ToolRegistry.from_modules([TOOLS_MODULE, "bench.graphs"], finders=[find_langchain])
    async with build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="x"),
                            pipelines=PipelineRegistry.from_modules(["bench.graphs"])):
        t = time.perf_counter()
        handle = await start_run(client, settings, inp)
        try:
            result = await asyncio.wait_for(handle.result(), deadline_s)
        except asyncio.TimeoutError:
            view = await run_view(client, inp.run_id, "main")
            await client.get_workflow_handle(handle.id).terminate("the benchmark's deadline")
            return {"kind": "graph", "calls": calls, "wall_s": time.perf_counter() - t,
                    "runs": await _chain(client, inp.run_id), "run_id": inp.run_id, "limit": inp.history_limit_bytes,
                    "model_calls": view.status.llm_calls, "completed": False, "step": view.status.step,
                    "steps": nodes + 1}
        wall = time.perf_counter() - t
    assert result.status.state == "completed" and result.status.step == nodes + 1, result.status
    return {"kind": "graph", "calls": calls, "wall_s": wall, "runs": await _chain(client, inp.run_id),
            "continued": result.status.continued_as_new, "run_id": inp.run_id,
            "model_calls": result.status.llm_calls, "limit": inp.history_limit_bytes}


GRAPH_DEADLINE_S = 900.0  # how long the full-size graph run is given (it does not complete: see its note)


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    calls = 400 if suite.quick else 20_000
    # A graph run completes up to about 4,000 super-steps (docs/langgraph.md): a 6,000-call graph
    # (3,000 nodes) to its end, then the full size given GRAPH_DEADLINE_S and measured as far as it got.
    measures = [(_pipeline, calls, None), (_graph, 400 if suite.quick else 6_000, None)]
    if not suite.quick:
        measures.append((_graph, calls, GRAPH_DEADLINE_S))
    sec = Section("long_code_runs", "16. Long pipelines and graph runs: bounded history",
                  f"A pipeline of {calls:,} calls (a model call and a tool call per pair) and graph runs of "
                  f"{', '.join(f'{c // 2:,}' for m, c, _ in measures if m is _graph)} nodes (a ChatOpenAI call and a "
                  "LangChain tool call per node), each on an in-process worker, the scripted model at 0 ms; each "
                  "hands over to a new run (continue-as-new) when Temporal suggests it or its history passes its "
                  "bound. One dev server.")
    server = suite.start_temporal("long")
    client = await suite.client(server)
    model = suite.model(0)
    rows, data = [], []
    for measure, size, deadline in measures:
        log(f"long code runs: {measure.__name__.strip('_')} of {size:,} calls")
        found = await (measure(client, suite.settings(server, "long"), model, size, deadline) if deadline
                       else measure(client, suite.settings(server, "long"), model, size))
        events = [e for e, _ in found["runs"]]
        sizes = [b for _, b in found["runs"]]
        ended = ("completed" if found.get("completed", True)
                 else f"stopped after {found['wall_s']:.0f} s at step {found['step']:,} of {found['steps']:,}")
        rows.append([found["kind"], f"{size:,}", ended, str(len(found["runs"])), f"{max(events):,}",
                     f"{max(sizes) / 1e6:.2f} MB", f"{max(events) / SUGGESTED_EVENTS:.2f}x",
                     f"{max(sizes) / found['limit']:.2f}x", f"{found['model_calls']:,}", f"{found['wall_s']:.0f} s"])
        data.append({k: v for k, v in found.items()})
    suite.stop_model(model)
    suite.stop_temporal(server)
    sec.data = {"calls": calls, "runs": data}
    sec.table("History per run of the chain", ["run", "calls", "end", "runs in the chain", "most events in one run",
                                               "largest history", "events / 4,000 (suggested)",
                                               "bytes / history_limit_bytes", "model calls made", "wall"], rows)
    for row in rows:
        done = row[2] == "completed"
        sec.headline.append(["16 long runs", f"largest history of a {row[1]}-call {row[0]}, over its bound"
                             + ("" if done else f" ({row[2]})"), row[5], f"**{row[7]}**", "< 1.00x, completed",
                             "met" if done and float(row[7][:-1]) < 1.0 else "**not met**"])
    sec.notes.append("Each continued run runs the code (the graph) again with every call before it answered from "
                     "the record, so no call is made twice: the model calls made equal the calls asked for.")
    if not suite.quick:
        sec.notes.append("A graph run continued as new runs the graph again through the whole record (its "
                         "recorded super-steps answered from it, LangGraph's in-memory checkpointer growing with "
                         "them), so each continued run has more to go through before its first new super-step than "
                         "the one before: past about 4,000 super-steps the run no longer completes (the full-size "
                         "graph row says how far it got in its time). What would lift it: a continued run seeded "
                         "with LangGraph's own checkpoint of its last super-step (serialized in the step record) "
                         "instead of running through the record.")
    return sec
