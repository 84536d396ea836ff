"""15. LangGraph graphs: a graph's node as a Rewind run's step, against LangGraph alone.

The benchmark graph (`bench.graphs`: one node run N times in a row, each time one ChatOpenAI call
to the scripted model at 0 ms and one LangChain tool call), the same graph three ways:
  Rewind graph run    `rewind start --graph bench.graphs:graph` on an in-process worker: each call
                      an activity, each super-step a checkpoint in the store
  SqliteSaver         LangGraph alone in this process, checkpointed by SqliteSaver
  temporalio-langgraph Temporal's LangGraph plugin alone: each node one activity, no checkpoints
Per-node time: the run's wall time (start to result) over its N nodes, median over repetitions.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from bench.common import TOOLS_MODULE, Section, log, median, ms

NODES_TARGET = None  # no target: the issue asks for the ratios
NODE_LEVEL_GRAPH = "bench.graphs:node_graph"


def _available() -> str | None:
    try:
        import langchain_openai  # noqa: F401
        import langgraph  # noqa: F401
    except ImportError as exc:
        return f"LangGraph or langchain-openai is not installed ({exc})"
    return None


def _plugin_available() -> str | None:
    try:
        import temporalio.langgraph  # noqa: F401
    except ImportError as exc:
        return f"temporalio-langgraph is not installed ({exc})"
    return None


async def _rewind(client, settings, model, nodes: int, graph: str = "bench.graphs:graph") -> float:  # type: ignore[no-untyped-def]
    from activities.code.graphs import find_langchain
    from activities.code.pipelines import PipelineRegistry
    from activities.tools.registry import ToolRegistry
    from rewind.client import graph_input, start_run
    from activities.model.llm import ModelEndpoint
    from worker import build_worker

    name = f"graph-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"work": [{"content": "ok"}], "work_at_once": [{"content": "ok"}]})
    _point_llm_at(model)  # a node-level node's ChatOpenAI is the module's own (its activity calls it)
    registry = ToolRegistry.from_modules([TOOLS_MODULE, "bench.graphs"], finders=[find_langchain])
    pipelines = PipelineRegistry.from_modules(["bench.graphs"])
    inp = graph_input(settings, graph, {"n": 0, "limit": nodes}, model=f"script:{name}",
                      run_id=f"bench-graph-{uuid.uuid4().hex[:8]}")
    async with build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="x"),
                            pipelines=pipelines):
        t = time.perf_counter()
        handle = await start_run(client, settings, inp)
        result = await handle.result()
        wall = time.perf_counter() - t
    assert result.status.state == "completed", result.status
    assert result.status.step == nodes + 1, result.status  # a step per node, then the result
    return wall / nodes


def _point_llm_at(model) -> str:  # type: ignore[no-untyped-def]
    """bench.graphs' ChatOpenAI, for the runs without Rewind: the scripted model (no label: one script)."""
    from langchain_openai import ChatOpenAI

    import bench.graphs as graphs

    name = f"plain-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [{"content": "ok"}])
    graphs.llm = ChatOpenAI(model=f"script:{name}", base_url=model.base_url, api_key="x", max_retries=0)
    return name


async def _sqlite(suite, model, nodes: int) -> float:  # type: ignore[no-untyped-def]
    """In this process's own event loop: langchain-openai keeps one HTTP client per endpoint,
    bound to the loop that first used it (the plugin's activities run in this loop too)."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    import bench.graphs as graphs

    _point_llm_at(model)
    db = suite.tmp / f"graphs-{uuid.uuid4().hex[:6]}.sqlite"
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        app = graphs.builder().compile(checkpointer=saver)
        t = time.perf_counter()
        out = await app.ainvoke({"n": 0, "limit": nodes}, {"configurable": {"thread_id": "bench"}})
        wall = time.perf_counter() - t
    assert out["n"] == nodes
    return wall / nodes


async def _plugin(client, settings, model, nodes: int) -> float:  # type: ignore[no-untyped-def]
    from temporalio.common import RetryPolicy
    from temporalio.langgraph import LangGraphPlugin
    from temporalio.worker import Worker

    import bench.graphs as graphs
    from bench.graph_plugin import GRAPH, PluginGraphWorkflow

    _point_llm_at(model)
    queue = f"plugin-{uuid.uuid4().hex[:6]}"
    plugin = LangGraphPlugin(graphs={GRAPH: graphs.builder({
        "execute_in": "activity", "start_to_close_timeout": timedelta(seconds=60),
        "retry_policy": RetryPolicy(maximum_attempts=3)})})
    async with Worker(client, task_queue=queue, workflows=[PluginGraphWorkflow], plugins=[plugin]):
        t = time.perf_counter()
        done = await client.execute_workflow(PluginGraphWorkflow.run, nodes, id=f"bench-plugin-{uuid.uuid4().hex[:8]}",
                                             task_queue=queue)
        wall = time.perf_counter() - t
    assert done == nodes
    return wall / nodes


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    nodes, reps = (10, 1) if suite.quick else (100, 3)
    sec = Section("langgraph_graphs", "15. LangGraph graphs: a node as a durable step",
                  f"The benchmark graph (`bench/graphs.py`: one node run {nodes} times, each a ChatOpenAI call to "
                  f"the scripted model at 0 ms and a LangChain tool call), {reps} runs each way, interleaved: as a "
                  "Rewind graph run (in-process worker, file store), on LangGraph alone with SqliteSaver, and on "
                  "Temporal's LangGraph plugin alone (temporalio-langgraph: a node per activity). One dev server.")
    skipped = _available()
    if skipped is not None:
        sec.notes.append(f"skipped: {skipped}")
        return sec
    plugin_skipped = _plugin_available()
    server = suite.start_temporal("graphs")
    client = await suite.client(server)
    model = suite.model(0)
    settings = suite.settings(server, "graphs")
    await _rewind(client, settings, model, 2)  # warm-ups: imports, the sandboxes, connections
    await _rewind(client, settings, model, 2, NODE_LEVEL_GRAPH)
    await _sqlite(suite, model, 2)
    if plugin_skipped is None:
        await _plugin(client, settings, model, 2)
    times: dict[str, list[float]] = {"rewind": [], "node": [], "sqlite": [], "plugin": []}
    for rep in range(reps):
        log(f"langgraph graphs: repetition {rep + 1}/{reps}")
        times["rewind"].append(await _rewind(client, settings, model, nodes))
        times["node"].append(await _rewind(client, settings, model, nodes, NODE_LEVEL_GRAPH))
        times["sqlite"].append(await _sqlite(suite, model, nodes))
        if plugin_skipped is None:
            times["plugin"].append(await _plugin(client, settings, model, nodes))
    suite.stop_model(model)
    suite.stop_temporal(server)
    per = {k: median(v) for k, v in times.items() if v}
    sec.data = {"nodes": nodes, "reps": reps, "per_node_ms": {k: ms(v) for k, v in per.items()}}
    rewind = per["rewind"]
    labels = {"rewind": "**Rewind graph run, call-level** (each call an activity, a checkpoint per super-step)",
              "node": "**Rewind graph run, node-level** (the node one activity, a checkpoint per super-step)",
              "sqlite": "LangGraph alone + SqliteSaver, one process",
              "plugin": "temporalio-langgraph alone (a node per activity, no checkpoints)"}
    rows = []
    for key, label in labels.items():
        if key not in per:
            rows.append([label, "skipped", ""])
            continue
        rows.append([label, ms(per[key]), "1.00x" if key == "rewind" else f"**{rewind / per[key]:.2f}x**"])
    sec.table(f"Time per node, {nodes}-node run (ms)", ["approach", "median", "Rewind / this"], rows)
    for key, name in (("sqlite", "LangGraph + SqliteSaver"), ("plugin", "temporalio-langgraph")):
        if key in per:
            sec.headline.append(["15 langgraph", f"per-node time, Rewind graph run / {name}",
                                 f"{rewind * 1000:.1f} ms / {per[key] * 1000:.1f} ms",
                                 f"**{rewind / per[key]:.2f}x**", "–", "–"])
    if "plugin" in per:
        node = per["node"]
        sec.headline.append(["15 langgraph", "per-node time, Rewind node-level node / temporalio-langgraph's node",
                             f"{node * 1000:.1f} ms / {per['plugin'] * 1000:.1f} ms", f"**{node / per['plugin']:.2f}x**",
                             "≤ 1.00x", "met" if node <= per["plugin"] else "not met"])
    if plugin_skipped is not None:
        sec.notes.append(f"temporalio-langgraph skipped: {plugin_skipped}")
    sec.notes.append(
        "The node-level node is one activity that makes both calls inside it (as the plugin's), and its step's "
        "checkpoint rides on the next node's activity, which writes it as it starts (no mirror activity of its own). "
        "A call-level Rewind node is two activities (the model call and the tool call, each retried and recorded on its own) "
        "plus its checkpoint; the plugin's node is one activity that makes both calls inside it (a crash inside it "
        "runs both again), and writes no checkpoint; SqliteSaver runs everything in one process and writes a "
        "checkpoint per super-step to a local file.")
    return sec
