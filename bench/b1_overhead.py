"""1. Durability overhead per agent step.

The same scripted loop (model call, then one `blob` tool call, every step),
with the scripted model at zero latency, four ways:
  Rewind       AgentWorkflow on an in-process worker from `worker.build_worker`
  (b) bare     bench.bare_workflow on its own worker: same activities, no bridge
  (a) asyncio  the openai client + in-process tools, nothing persisted
  (c) LangGraph the loop as a graph checkpointed by SqliteSaver
  (d) DBOS      the loop as a DBOS Transact workflow (steps in SQLite), in its
                own process (bench.dbos_baseline)
Per-step time = model call start to the next model call start (for Temporal
runs read from history: model activity scheduled to the next one scheduled).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid

from temporalio.worker import Worker

from activities.tools.registry import ToolRegistry
from bench.actions import billable_actions
from bench.bare_workflow import BareActivities, BareAgentWorkflow
from bench.baselines import asyncio_loop, langgraph_available, langgraph_loop
from bench.dbos_baseline import dbos_available
from bench.common import (
    REPO,
    TOOLS_MODULE,
    Section,
    activity_profile,
    blob_script,
    history_events,
    log,
    median,
    ms,
    percentile,
    rewind_worker,
    start_agent,
)
from rewind.temporal.timing import step_marks
from workflows.vocabulary.contracts import DEFAULT_SYSTEM_PROMPT

TOOL_BYTES = 256
TARGET = 1.20


async def _rewind(client, settings, model, steps: int, *, fast: bool = False) -> dict:  # type: ignore[no-untyped-def]
    name, _ = blob_script(model, steps, TOOL_BYTES)
    async with rewind_worker(client, settings, model):
        t = time.perf_counter()
        handle = await start_agent(client, settings, name, steps, fast=fast)
        result = await handle.result()
        wall = time.perf_counter() - t
    assert result.status.step == steps, result.status
    events = await history_events(client, handle.id)
    if fast:
        # Local activities leave no per-call events with their own times (their
        # results are recorded together): a step is the run's wall time / steps.
        return {"durations": [wall / steps] * (steps - 1), "wall_s": wall, "profile": activity_profile(events)}
    marks = step_marks(events, "call_llm")
    return {"durations": [b - a for a, b in zip(marks, marks[1:])][:-1], "wall_s": wall,
            "profile": {**activity_profile(events), "actions": billable_actions(events, "call_llm")}}


async def _bare(client, settings, model, registry: ToolRegistry, steps: int) -> dict:  # type: ignore[no-untyped-def]
    name, _ = blob_script(model, steps, TOOL_BYTES)
    queue = settings.task_queue + "-bare"
    acts = BareActivities(model.base_url, registry)
    wid = f"bare-{uuid.uuid4().hex[:10]}"
    async with Worker(client, task_queue=queue, workflows=[BareAgentWorkflow], activities=[acts.bare_llm, acts.bare_tool]):
        t = time.perf_counter()
        done = await client.execute_workflow(
            "BareAgentWorkflow",
            {"system_prompt": DEFAULT_SYSTEM_PROMPT, "task": "benchmark run", "model": name,
             "tools": [s.openai_schema() for s in registry.specs()], "max_steps": steps + 5},
            id=wid, task_queue=queue,
        )
        wall = time.perf_counter() - t
    assert done == steps, done
    events = await history_events(client, wid)
    marks = step_marks(events, "bare_llm")
    return {"durations": [b - a for a, b in zip(marks, marks[1:])][:-1], "wall_s": wall,
            "profile": {**activity_profile(events), "actions": billable_actions(events, "bare_llm")}}


async def _asyncio(model, registry: ToolRegistry, steps: int) -> dict:  # type: ignore[no-untyped-def]
    name, _ = blob_script(model, steps, TOOL_BYTES)
    t = time.perf_counter()
    durations = await asyncio_loop(model.base_url, name, registry, "benchmark run", steps + 5)
    return {"durations": durations[:-1], "wall_s": time.perf_counter() - t}


async def _langgraph(suite, model, registry: ToolRegistry, steps: int) -> dict:  # type: ignore[no-untyped-def]
    name, _ = blob_script(model, steps, TOOL_BYTES)
    db = suite.tmp / f"overhead-{uuid.uuid4().hex[:6]}.sqlite"
    out = await asyncio.to_thread(langgraph_loop, model.base_url, name, registry, "benchmark run", steps + 5, db)
    return {"durations": out["durations"][:-1], "wall_s": out["wall_s"]}


async def _dbos(suite, model, steps: int) -> dict:  # type: ignore[no-untyped-def]
    """One measured DBOS run (after a warm-up run in the same process)."""
    name, _ = blob_script(model, steps, TOOL_BYTES)
    db = suite.tmp / f"overhead-dbos-{uuid.uuid4().hex[:6]}.sqlite"
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bench.dbos_baseline", model.base_url, name, str(db), str(steps + 5), "2"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"DBOS baseline failed: {out.stderr[-2000:]}")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    measured = doc["runs"][-1]
    assert measured["steps"] == steps, measured
    return {"durations": measured["durations"][:-1], "wall_s": measured["wall_s"], "db_bytes": doc["db_bytes"],
            "recorded_steps": doc["recorded_steps"]}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    steps, reps = (30, 2) if suite.quick else (100, 3)
    sec = Section("overhead", "1. Durability overhead per agent step",
                  f"{steps}-step runs (model call + one {TOOL_BYTES} B `blob` tool call per step), scripted model at "
                  f"0 ms latency, {reps} runs per approach, interleaved; per-step medians over all steps of all runs. "
                  "Every approach runs in this one process (the workers in-process too), against one dev server.")
    server = suite.start_temporal("overhead")
    client = await suite.client(server)
    model = suite.model(0)
    settings = suite.settings(server, "overhead")
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    skip_lg = langgraph_available()
    skip_dbos = dbos_available()

    # Warm-up: imports, HTTP connections, the tokenizer's first load, the dev server's caches.
    await _rewind(client, settings, model, 4)
    await _rewind(client, settings, model, 4, fast=True)
    await _bare(client, settings, model, registry, 4)
    await _asyncio(model, registry, 4)
    if skip_lg is None:
        await _langgraph(suite, model, registry, 4)

    runs: dict[str, list[dict]] = {"rewind": [], "rewind_fast": [], "bare": [], "asyncio": [], "langgraph": [],
                                   "dbos": []}
    for rep in range(reps):
        log(f"overhead: repetition {rep + 1}/{reps}")
        runs["rewind"].append(await _rewind(client, settings, model, steps))
        runs["rewind_fast"].append(await _rewind(client, settings, model, steps, fast=True))
        runs["bare"].append(await _bare(client, settings, model, registry, steps))
        runs["asyncio"].append(await _asyncio(model, registry, steps))
        if skip_lg is None:
            runs["langgraph"].append(await _langgraph(suite, model, registry, steps))
        if skip_dbos is None:
            runs["dbos"].append(await _dbos(suite, model, steps))
    suite.stop_model(model)
    suite.stop_temporal(server)

    def stats(key: str) -> dict:
        rs = runs[key]
        if not rs:
            return {}
        d = [x for r in rs for x in r["durations"]]
        return {"median_ms": ms(median(d)), "p90_ms": ms(percentile(d, 90)),
                "wall_ms_per_step": ms(median([r["wall_s"] / steps for r in rs])), "n": len(d)}

    st = {k: stats(k) for k in runs}
    cut = 0.75 * st["bare"]["median_ms"] / 1000
    for k in runs:
        if st[k]:
            d = [x for r in runs[k] for x in r["durations"]]
            st[k]["fast_share"] = sum(1 for x in d if x < cut) / len(d)
    sec.data = {"steps": steps, "reps": reps, "stats": st,
                "profiles": {k: [r.get("profile") for r in runs[k]] for k in ("rewind", "bare")}}
    rw = st["rewind"]["median_ms"]
    labels = {"rewind": "**Rewind** (AgentWorkflow + bridge)",
              "rewind_fast": "**Rewind --fast** (local activities; per step: wall time / steps)",
              "bare": "(b) bare Temporal workflow, same activities",
              "asyncio": "(a) plain asyncio, no persistence", "langgraph": "(c) LangGraph + SqliteSaver",
              "dbos": "(d) DBOS Transact, SQLite (own process)"}
    rows = []
    for key, label in labels.items():
        s = st[key]
        if not s:
            rows.append([label, "skipped", "", "", "", ""])
            continue
        rows.append([label, s["median_ms"], s["p90_ms"], s["wall_ms_per_step"],
                     "1.00x" if key == "rewind" else f"**{rw / s['median_ms']:.2f}x**", s["n"], f"{s['fast_share']:.0%}"])
    sec.table("Per-step time (ms)", ["approach", "median", "p90", "wall time / step", "Rewind / this", "steps measured",
                                     f"steps under {cut * 1000:.0f} ms (¾ of (b)'s median)"], rows)

    # Where Rewind's time goes, against the bare workflow (medians over the measured runs).
    def prof(key: str, act: str, field: str) -> float | None:
        vals = [p["activities"].get(act, {}).get(field) for p in sec.data["profiles"][key] if p]
        vals = [v for v in vals if v is not None]
        return median(vals)

    def per_step(key: str, field: str) -> float | None:
        vals = [p[field] / steps for p in sec.data["profiles"][key] if p]
        return median(vals)

    def activities_per_step(key: str) -> float | None:
        return median([sum(a["count"] for a in p["activities"].values()) / steps for p in sec.data["profiles"][key] if p])

    def actions(key: str, part: str, per: int) -> float | None:
        return median([p["actions"][part] / per for p in sec.data["profiles"][key] if p and "actions" in p])

    brk = [
        ["model activity, start to close (ms)", prof("rewind", "call_llm", "run_ms"), prof("bare", "bare_llm", "run_ms")],
        ["tool activity, start to close (ms)", prof("rewind", "run_tool", "run_ms"), prof("bare", "bare_tool", "run_ms")],
        ["mirror activity, start to close (ms; off the critical path)", prof("rewind", "mirror_steps", "run_ms"), None],
        ["activities per step (all types)", activities_per_step("rewind"), activities_per_step("bare")],
        ["workflow tasks per step", per_step("rewind", "workflow_tasks"), per_step("bare", "workflow_tasks")],
        ["Temporal Cloud billable actions per step, estimated (bench/actions.py; the run's own included)",
         actions("rewind", "total", steps), actions("bare", "total", steps)],
        ["  of which inside the steps (first model call to the last one's completion), per step",
         actions("rewind", "in_steps", steps), actions("bare", "in_steps", steps)],
        ["  per run, outside the steps (start, describing tools, the last checkpoint)",
         actions("rewind", "per_run", 1), actions("bare", "per_run", 1)],
        ["workflow task, scheduled to completed (ms)", median([p["workflow_task_ms"] for p in sec.data["profiles"]["rewind"]]),
         median([p["workflow_task_ms"] for p in sec.data["profiles"]["bare"]])],
        ["  of which waiting for a worker to start it (ms)", median([p["workflow_task_wait_ms"] for p in sec.data["profiles"]["rewind"]]),
         median([p["workflow_task_wait_ms"] for p in sec.data["profiles"]["bare"]])],
        ["  of which the worker running it (ms)", median([p["workflow_task_run_ms"] for p in sec.data["profiles"]["rewind"]]),
         median([p["workflow_task_run_ms"] for p in sec.data["profiles"]["bare"]])],
        ["history events per step", per_step("rewind", "events"), per_step("bare", "events")],
        ["history bytes per step", per_step("rewind", "history_bytes"), per_step("bare", "history_bytes")],
    ]
    sec.table("Where the time goes: Rewind vs (b), from the runs' histories (medians)", ["", "Rewind", "(b) bare"], brk)

    bare, plain = st["bare"]["median_ms"], st["asyncio"]["median_ms"]
    r_b, r_a = rw / bare, rw / plain
    per_rep = [median(r["durations"]) / median(b["durations"]) for r, b in zip(runs["rewind"], runs["bare"])]
    sec.data["per_repetition_ratio"] = per_rep
    sec.headline = [
        ["1 overhead", "per-step median, Rewind / bare Temporal (b)", f"{rw:.1f} ms / {bare:.1f} ms", f"**{r_b:.2f}x**",
         f"≤ {TARGET:.2f}x", "met" if r_b <= TARGET else "**not met**"],
        ["1 overhead", "per-step median, Rewind / plain asyncio (a)", f"{rw:.1f} ms / {plain:.1f} ms", f"**{r_a:.2f}x**", "–", "–"],
    ]
    per_step_actions = [actions(k, "total", steps) for k in ("rewind", "bare")]
    if all(per_step_actions):
        act_rw, act_bare = per_step_actions
        sec.headline.append(["1 overhead", "estimated Temporal Cloud actions per step, Rewind / bare Temporal (b), "
                             f"{steps}-step runs", f"{act_rw:.2f} / {act_bare:.2f}", f"**{act_rw / act_bare:.2f}x**",
                             "–", "–"])
    if st["langgraph"]:
        lg = st["langgraph"]["median_ms"]
        lg_wall = st["langgraph"]["wall_ms_per_step"]
        fast_wall = st["rewind_fast"]["wall_ms_per_step"]
        sec.headline.append(["1 overhead", "per-step median, Rewind / LangGraph + SqliteSaver (c)",
                             f"{rw:.1f} ms / {lg:.1f} ms", f"**{rw / lg:.2f}x**", "≤ 1.5x",
                             "met" if rw / lg <= 1.5 else "**not met**"])
        sec.headline.append(["1 overhead", "wall time per step, Rewind --fast / LangGraph + SqliteSaver (c)",
                             f"{fast_wall:.1f} ms / {lg_wall:.1f} ms", f"**{fast_wall / lg_wall:.2f}x**", "≤ 1.0x",
                             "met" if fast_wall / lg_wall <= 1.0 else "**not met**"])
    else:
        sec.notes.append(f"(c) skipped: {skip_lg}")
    if st["dbos"]:
        db, db_wall = st["dbos"]["median_ms"], st["dbos"]["wall_ms_per_step"]
        fast_wall = st["rewind_fast"]["wall_ms_per_step"]
        sec.headline.append(["1 overhead", "per-step median, Rewind / DBOS Transact + SQLite (d)",
                             f"{rw:.1f} ms / {db:.1f} ms", f"**{rw / db:.2f}x**", "–", "–"])
        sec.headline.append(["1 overhead", "wall time per step, Rewind --fast / DBOS Transact + SQLite (d)",
                             f"{fast_wall:.1f} ms / {db_wall:.1f} ms", f"**{fast_wall / db_wall:.2f}x**", "–", "–"])
        recorded = runs["dbos"][-1]["recorded_steps"]
        sec.notes.append(
            f"(d) records every step (model call and tool call) in its SQLite system database before the workflow "
            f"goes on ({recorded} step outputs in the last run's database, two runs of {steps} steps); like (c) it "
            "needs no server; on SQLite a run lives in one machine's file (DBOS takes Postgres for several).")
    else:
        sec.notes.append(f"(d) skipped: {skip_dbos}")

    row = {r[0]: (r[1] or 0, r[2] or 0) for r in brk}
    llm_r, llm_b = row["model activity, start to close (ms)"]
    tool_r, tool_b = row["tool activity, start to close (ms)"]
    wft_r, wft_b = row["workflow tasks per step"]
    wait_r, wait_b = row["  of which waiting for a worker to start it (ms)"]
    run_r, run_b = row["  of which the worker running it (ms)"]
    hb_r, hb_b = row["history bytes per step"]
    act_r, act_b = row["activities per step (all types)"]
    bill_r, bill_b = row[brk[5][0]]
    run_own_r, run_own_b = row[brk[7][0]]
    rest_r, rest_b = rw - llm_r - tool_r, bare - llm_b - tool_b
    verdict = (f"Target (Rewind ≤ {TARGET:.2f}x the bare workflow): **{'met' if r_b <= TARGET else 'not met'}** — "
               f"{rw:.1f} ms vs {bare:.1f} ms per step ({(r_b - 1) * 100:+.0f}%; per repetition "
               f"{min(per_rep):.2f}x–{max(per_rep):.2f}x). ")
    fast_r, fast_b = st["rewind"]["fast_share"], st["bare"]["fast_share"]
    effect = fast_r - fast_b > 0.10
    tool_diff = "the same" if abs(tool_r - tool_b) < 0.05 else f"{tool_r - tool_b:+.1f} ms"
    verdict += (f"From the histories: Rewind's model activity takes {llm_r - llm_b:.1f} ms longer than the bare one "
                f"({llm_r:.1f} vs {llm_b:.1f} ms: it reads and appends the transcript in the payload store, an fsync'd "
                f"file write, and counts the tokens of the whole conversation for the context window, on every call); "
                f"the tool activity: {tool_diff}. The rest of a step is workflow tasks and dispatch: {rest_r:.1f} ms for "
                f"Rewind against {rest_b:.1f} ms for (b). Rewind runs {wft_r:.2f} workflow tasks per step against "
                f"{wft_b:.2f}" + (" (a mirror completion wakes the workflow once more)" if wft_r - wft_b > 0.3 else "")
                + f"; a workflow task takes {run_r:.1f} ms of "
                f"worker time in Rewind against {run_b:.1f} ms in (b), and waits {wait_r:.1f} ms against {wait_b:.1f} ms "
                "to be handed to the worker")
    if effect:
        verdict += (f" — {fast_r:.0%} of Rewind's steps finish under {cut * 1000:.0f} ms against {fast_b:.0%} of (b)'s, "
                    "a dev-server scheduling effect this suite does not trace further")
    verdict += (f". Temporal actions: {act_r:.2f} activities per step against {act_b:.2f}, and an estimated "
                f"{bill_r:.2f} Temporal Cloud billable actions per step against {bill_b:.2f} ({bill_r / bill_b:.2f}x; "
                f"{run_own_r:.0f} and {run_own_b:.0f} of them per run, outside the steps)" if bill_b else "")
    verdict += (f". (b) carries the whole conversation in every model call's input: {hb_b:,.0f} history bytes per step "
                f"against Rewind's {hb_r:,.0f}. ")
    added = (bare + llm_r - llm_b + tool_r - tool_b) / bare
    verdict += (f"What the bridge adds ({llm_r - llm_b + tool_r - tool_b:.0f} ms of activity time per step"
                + (f", {wft_r - wft_b:.2f} extra workflow tasks" if wft_r > wft_b else "")
                + f"), added on top of (b)'s step, comes to {added:.2f}x"
                + (" — within the target" if added <= TARGET else f" — over the {TARGET:.2f}x target")
                + (" even without the scheduling effect. " if effect else ". "))
    if r_b > TARGET or added > TARGET:
        verdict += ("The model activity's extra work does not depend on Temporal: caching per-message token counts "
                    "across calls and keeping the transcript in memory would remove most of it.")
    sec.verdicts.append(verdict)
    fixed = rw - plain
    sec.notes.append(
        f"Both Temporal variants pay two activity dispatches and at least two workflow tasks per step through the "
        f"dev server (sqlite), which is why they sit at ~{bare:.0f} ms against {plain:.1f} ms for the in-process "
        f"loop: Rewind / (a) = {r_a:.1f}x measures Temporal far more than the bridge. With a real model that fixed "
        f"~{fixed:.0f} ms per step is {fixed / (fixed + 1000):.0%} of a step whose model call takes 1 s, "
        f"{fixed / (fixed + 5000):.0%} at 5 s.")
    return sec
