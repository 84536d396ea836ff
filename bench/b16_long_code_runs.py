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


async def _graph(client, settings, model, calls: int) -> dict:  # type: ignore[no-untyped-def]
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
        result = await (await start_run(client, settings, inp)).result()
        wall = time.perf_counter() - t
    assert result.status.state == "completed" and result.status.step == nodes + 1, result.status
    return {"kind": "graph", "calls": calls, "wall_s": wall, "runs": await _chain(client, inp.run_id),
            "continued": result.status.continued_as_new, "run_id": inp.run_id,
            "model_calls": result.status.llm_calls, "limit": inp.history_limit_bytes}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    calls = 400 if suite.quick else 20_000
    # A graph run completes up to about 4,000 super-steps (docs/langgraph.md; its note says how the
    # full size fails): a 6,000-call graph (3,000 nodes) to its end.
    measures = [(_pipeline, calls), (_graph, 400 if suite.quick else 6_000)]
    sec = Section("long_code_runs", "16. Long pipelines and graph runs: bounded history",
                  f"A pipeline of {calls:,} calls (a model call and a tool call per pair) and a graph run of "
                  f"{measures[1][1] // 2:,} nodes (a ChatOpenAI call and a "
                  "LangChain tool call per node), each on an in-process worker, the scripted model at 0 ms; each "
                  "hands over to a new run (continue-as-new) when Temporal suggests it or its history passes its "
                  "bound. One dev server.")
    server = suite.start_temporal("long")
    client = await suite.client(server)
    model = suite.model(0)
    rows, data = [], []
    for measure, size in measures:
        log(f"long code runs: {measure.__name__.strip('_')} of {size:,} calls")
        found = await measure(client, suite.settings(server, "long"), model, size)
        events = [e for e, _ in found["runs"]]
        sizes = [b for _, b in found["runs"]]
        rows.append([found["kind"], f"{size:,}", str(len(found["runs"])), f"{max(events):,}",
                     f"{max(sizes) / 1e6:.2f} MB", f"{max(events) / SUGGESTED_EVENTS:.2f}x",
                     f"{max(sizes) / found['limit']:.2f}x", f"{found['model_calls']:,}", f"{found['wall_s']:.0f} s"])
        data.append({k: v for k, v in found.items()})
    suite.stop_model(model)
    suite.stop_temporal(server)
    sec.data = {"calls": calls, "runs": data}
    sec.table("History per run of the chain", ["run", "calls", "runs in the chain", "most events in one run",
                                               "largest history", "events / 4,000 (suggested)",
                                               "bytes / history_limit_bytes", "model calls made", "wall"], rows)
    for row in rows:
        sec.headline.append(["16 long runs", f"largest history of a {row[1]}-call {row[0]}, over its bound",
                             row[4], f"**{row[6]}**", "< 1.00x", "met" if float(row[6][:-1]) < 1.0 else "not met"])
    if not suite.quick:
        sec.headline.append(["16 long runs", f"a {calls:,}-call graph run completes", "no (see section 16)", "–",
                             "completes", "**not met**"])
    sec.notes.append("Each continued run runs the code (the graph) again with every call before it answered from "
                     "the record, so no call is made twice: the model calls made equal the calls asked for.")
    if not suite.quick:
        sec.notes.append(f"A graph run of {calls:,} calls does not complete. A continued graph run runs the graph "
                         "again through the whole record (its recorded super-steps answered from it, the run "
                         "breathing on a 1 ms timer every 100 of them), so each continued run has more to go through "
                         "before its first new super-step than the one before; tried here (10,000 nodes), a "
                         "continued run going through the record failed its workflow task on Temporal's deadlock detector "
                         "([TMPRL1101] workflow didn't yield within 2 seconds), and the worker could not evict it "
                         "(so the benchmark no longer runs it). What would lift it: a continued run seeded with "
                         "LangGraph's own checkpoint of its last super-step instead of running through the record.")
    return sec
