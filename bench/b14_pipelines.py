"""14. Pipelines: your own code as a durable run, per step and per fork.

A pipeline of P pairs (`bench.pipelines.blob_pairs`: a model call, then one
`blob` tool call, per pair) against the same work per pair elsewhere, with
the scripted model at 0 ms:
  Rewind pipeline  PipelineWorkflow on an in-process worker (every call a step)
  Rewind loop      AgentWorkflow, one model call + one `blob` call per step
  bare floor       bench.bare_workflow: the same two activities per step, no Rewind code
  LangGraph        the functional API: an @entrypoint calling a model @task and a tool @task
                   per pair, checkpointed by SqliteSaver
  DBOS             the loop as a DBOS workflow with a step per call, on SQLite (own process)
Per-pair time: one model call's start to the next one's (Temporal runs: from history).

Then a fork at call F of a 2F-call pipeline: from the call to fork() to the
branch's first new checkpoint in the store, against one step of the run (the
median time between two of its calls being scheduled).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from temporalio.api.enums.v1 import EventType
from activities.code.pipelines import PipelineRegistry
from activities.tools.registry import ToolRegistry
from bench.b1_overhead import _bare, _dbos, _rewind
from bench.b4_fork import first_step, fork_floor
from bench.baselines import langgraph_available, langgraph_functional_pipeline
from bench.common import TOOLS_MODULE, Section, history_events, log, median, ms, rewind_worker
from bench.dbos_baseline import dbos_available
from bench.pipelines import LABEL
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.client import fork, pipeline_input, start_run
from rewind.temporal.timing import step_marks

SIZE = 256
# The branch's way to its first new checkpoint, as its history tells it (bench.b4_fork.first_step).
_FORK_MARKS = [
    ("workflow started", EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, None),
    ("describe_pipeline scheduled", EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "describe_pipeline"),
    ("describe_pipeline done (the record read)", EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, "describe_pipeline"),
    ("first call scheduled (the code ran again to it)", EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "call_llm"),
    ("first call done", EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, "call_llm"),
    # Its step rides on the next call (the pair's tool call), which writes it as it starts.
    ("next call scheduled (it writes the checkpoint)", EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "run_tool#1"),
]
STEP_TARGET_LOOP = 1.1
STEP_TARGET_FLOOR = 1.3
FORK_TARGET = 2.0


def _script(model) -> str:  # type: ignore[no-untyped-def]
    name = f"pairs-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {LABEL: [{"content": "ok"}]})
    return f"script:{name}"


def _worker(client, settings, model):  # type: ignore[no-untyped-def]
    return rewind_worker(client, settings, model, pipelines=PipelineRegistry.from_modules(["bench.pipelines"]))


async def _pipeline(client, settings, model, pairs: int, run_id: str | None = None) -> dict:  # type: ignore[no-untyped-def]
    inp = pipeline_input(settings, "blob_pairs", {"pairs": pairs, "size": SIZE}, model=_script(model),
                         run_id=run_id or f"bench-pipe-{uuid.uuid4().hex[:8]}")
    async with _worker(client, settings, model):
        t = time.perf_counter()
        handle = await start_run(client, settings, inp)
        result = await handle.result()
        wall = time.perf_counter() - t
    assert result.status.state == "completed" and result.status.step == 2 * pairs + 1, result.status
    events = await history_events(client, handle.id)
    marks = step_marks(events, "call_llm")
    return {"durations": [b - a for a, b in zip(marks, marks[1:])][:-1], "wall_s": wall, "run_id": inp.run_id,
            "events": events}


def _call_gaps(events) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds between consecutive model or tool calls being scheduled: one pipeline step each."""
    from temporalio.api.enums.v1 import EventType

    times = [e.event_time.ToDatetime().timestamp() for e in events
             if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
             and e.activity_task_scheduled_event_attributes.activity_type.name in ("call_llm", "run_tool")]
    return [b - a for a, b in zip(times, times[1:])]


async def _langgraph(suite, model, registry: ToolRegistry, pairs: int) -> dict:  # type: ignore[no-untyped-def]
    name = f"lg-{uuid.uuid4().hex[:8]}"
    model.add_script(name, [{"content": "ok"}])  # LangGraph sends no label: a plain script answers every call
    db = suite.tmp / f"pipelines-lg-{uuid.uuid4().hex[:6]}.sqlite"
    out = await asyncio.to_thread(langgraph_functional_pipeline, model.base_url, f"script:{name}", registry, pairs,
                                  SIZE, db)
    return {"durations": out["durations"][:-1], "wall_s": out["wall_s"]}


async def _fork(suite, server, client, settings, model, pairs: int, reps: int) -> dict:  # type: ignore[no-untyped-def]
    """A 2*pairs-call pipeline, forked at call `pairs` `reps` times: seconds to the branch's first
    new checkpoint (medians), and the floor of such a fork (bench.b4_fork.fork_floor: read the
    fork point as one JSON object, start a bare workflow, one model call, a no-op 'checkpoint')."""
    source = await _pipeline(client, settings, model, pairs)
    run_id, point = source["run_id"], pairs
    returned, first, floors, marks = [], [], [], []
    for _ in range(reps):
        branch = f"fork-{uuid.uuid4().hex[:6]}"
        async with _worker(client, settings, model), open_checkpoint_store(settings.store_url) as store:
            wall0, t0 = time.time(), time.perf_counter()
            result = await fork(client, settings, store, run_id, point, branch=branch)
            returned.append(time.perf_counter() - t0)
            async with open_checkpoint_store(settings.store_url) as watcher:
                while point + 1 not in await watcher.existing_steps(run_id, branch):
                    if time.perf_counter() - t0 > 300:
                        raise TimeoutError(f"the fork of {run_id} made no new checkpoint in 300 s")
                    await asyncio.sleep(0.005)
            first.append(time.perf_counter() - t0)
            final = await result.handle.result()
        assert final.status.state == "completed", final.status
        marks.append(first_step(await history_events(client, result.handle.id), wall0, _FORK_MARKS))
        plain = f"floor-{uuid.uuid4().hex[:8]}"
        model.add_script(plain, [{"content": "ok"}])
        floors.append(await fork_floor(suite, server, model, settings.store_url, f"{run_id}:main:{point}",
                                       {"model": f"script:{plain}", "tools": [], "max_steps": 1, "noop_at_end": True,
                                        "system_prompt": "", "task": f"turn {pairs // 2}"}, conversation=False))
    step = median(_call_gaps(source["events"]))
    floor = median([f["stored"] for f in floors])
    return {"calls": 2 * pairs, "point": point, "fork_returns_s": median(returned), "first_checkpoint_s": median(first),
            "step_s": step, "ratio": median(first) / step, "floor_s": floor, "floor_ratio": floor / step,
            "over_floor": median(first) / floor, "reps": reps,
            "timeline": {label: median([m[label] for m in marks if label in m]) for label, _, _ in _FORK_MARKS
                         if any(label in m for m in marks)}}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    pairs, reps, fork_pairs = (10, 1, 20) if suite.quick else (50, 3, 500)
    sec = Section("pipelines", "14. Pipelines: your own code, per step and per fork",
                  f"A pipeline of {pairs} pairs (model call + one {SIZE} B `blob` tool call) against the same work "
                  f"per pair elsewhere, scripted model at 0 ms, {reps} runs each, interleaved; then a fork at call "
                  f"{fork_pairs} of a {2 * fork_pairs}-call pipeline. Workers in-process, one dev server.")
    server = suite.start_temporal("pipelines")
    client = await suite.client(server)
    model = suite.model(0)
    settings = suite.settings(server, "pipelines")
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    skip_lg, skip_dbos = langgraph_available(), dbos_available()

    await _pipeline(client, settings, model, 3)  # warm-up: imports, the sandbox, connections
    await _rewind(client, settings, model, 4)
    await _bare(client, settings, model, registry, 4)
    runs: dict[str, list[dict]] = {"pipeline": [], "loop": [], "bare": [], "langgraph": [], "dbos": []}
    for rep in range(reps):
        log(f"pipelines: repetition {rep + 1}/{reps}")
        runs["pipeline"].append(await _pipeline(client, settings, model, pairs))
        runs["loop"].append(await _rewind(client, settings, model, pairs))
        runs["bare"].append(await _bare(client, settings, model, registry, pairs))
        if skip_lg is None:
            runs["langgraph"].append(await _langgraph(suite, model, registry, pairs))
        if skip_dbos is None:
            runs["dbos"].append(await _dbos(suite, model, pairs))
    log(f"pipelines: fork at call {fork_pairs} of {2 * fork_pairs}")
    forked = await _fork(suite, server, client, settings, model, fork_pairs, reps)
    suite.stop_model(model)
    suite.stop_temporal(server)

    st = {k: {"median_ms": ms(median([x for r in v for x in r["durations"]])), "n": sum(len(r["durations"]) for r in v)}
          for k, v in runs.items() if v}
    sec.data = {"pairs": pairs, "reps": reps, "stats": st,
                "fork": {k: v for k, v in forked.items()}}
    labels = {"pipeline": "**Rewind pipeline** (PipelineWorkflow, every call a step)",
              "loop": "Rewind loop (AgentWorkflow, one model + one tool call per step)",
              "bare": "bare floor (the same two activities, no Rewind code)",
              "langgraph": "LangGraph functional API (@entrypoint + @task) + SqliteSaver",
              "dbos": "DBOS Transact (@workflow + a @step per call), SQLite, own process"}
    pipe = st["pipeline"]["median_ms"]
    rows = []
    for key, label in labels.items():
        if key not in st:
            rows.append([label, "skipped", "", ""])
            continue
        rows.append([label, st[key]["median_ms"], "1.00x" if key == "pipeline" else f"**{pipe / st[key]['median_ms']:.2f}x**",
                     st[key]["n"]])
    sec.table("Time per model + tool pair (ms)", ["approach", "median", "pipeline / this", "pairs measured"], rows)
    sec.table(f"Fork of a pipeline (ms; medians of {forked['reps']}), and its floor with no Rewind code (read the fork "
              "point stored as one JSON object, start a bare workflow, one model call, a no-op activity where Rewind "
              "writes the checkpoint)",
              ["calls", "fork at call", "fork() returns", "first new checkpoint", "one step", "ratio", "floor",
               "floor / one step", "Rewind / floor"],
              [[forked["calls"], forked["point"], ms(forked["fork_returns_s"]), ms(forked["first_checkpoint_s"]),
                ms(forked["step_s"]), f"**{forked['ratio']:.1f}x**", ms(forked["floor_s"]),
                f"**{forked['floor_ratio']:.1f}x**", f"**{forked['over_floor']:.2f}x**"]])
    timeline = forked["timeline"]
    sec.table("The branch's way to its first new checkpoint, from its history (ms after the call to fork(); medians)",
              ["fork() returns", *timeline], [[ms(forked["fork_returns_s"]), *(ms(v) for v in timeline.values())]])
    loop, bare = st["loop"]["median_ms"], st["bare"]["median_ms"]
    sec.headline = [
        ["14 pipelines", "per-pair median, pipeline / the loop's step", f"{pipe:.1f} ms / {loop:.1f} ms",
         f"**{pipe / loop:.2f}x**", f"≤ {STEP_TARGET_LOOP}x", "met" if pipe / loop <= STEP_TARGET_LOOP else "**not met**"],
        ["14 pipelines", "per-pair median, pipeline / bare floor", f"{pipe:.1f} ms / {bare:.1f} ms",
         f"**{pipe / bare:.2f}x**", f"≤ {STEP_TARGET_FLOOR}x", "met" if pipe / bare <= STEP_TARGET_FLOOR else "**not met**"],
        ["14 pipelines", f"fork at call {forked['point']} of {forked['calls']} → first new checkpoint / one step",
         f"{forked['first_checkpoint_s'] * 1000:.0f} ms / {forked['step_s'] * 1000:.0f} ms", f"**{forked['ratio']:.1f}x**",
         f"≤ {FORK_TARGET}x", "met" if forked["ratio"] <= FORK_TARGET else "**not met**"],
        ["14 pipelines", f"floor (no Rewind code): fork at call {forked['point']} → first step stored, / one step",
         f"{forked['floor_s'] * 1000:.0f} ms / {forked['step_s'] * 1000:.0f} ms", f"**{forked['floor_ratio']:.1f}x**",
         "–", "–"],
    ]
    for key, name in (("langgraph", "LangGraph functional API + SqliteSaver"), ("dbos", "DBOS + SQLite")):
        if key in st:
            sec.headline.append(["14 pipelines", f"per-pair median, pipeline / {name}",
                                 f"{pipe:.1f} ms / {st[key]['median_ms']:.1f} ms",
                                 f"**{pipe / st[key]['median_ms']:.2f}x**", "–", "–"])
    if skip_lg is not None:
        sec.notes.append(f"LangGraph skipped: {skip_lg}")
    if skip_dbos is not None:
        sec.notes.append(f"DBOS skipped: {skip_dbos}")
    sec.notes.append(
        "A pipeline pair is two steps (two checkpoints) where the loop's step is one. Each step's record rides "
        "on the next call (the model call carries the tool call's step, the read-only tool call the model "
        "call's), so a pair is two activities, as the loop's step; what it costs more is the second step record "
        "and the code's own bookkeeping per call (its position, the digest of what it asked). The fork reads its record once, in the activity that "
        "describes the pipeline to the branch, as a load of the fork point reads its chain (the packs' merged "
        "blocks list the calls they hold: a few reads, not one per recorded step), then answers every recorded "
        "call in memory; what still grows with the fork point is decoding that record and running the code "
        "again through its answered calls, in the branch's second workflow task.")
    return sec
