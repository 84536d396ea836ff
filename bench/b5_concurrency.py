"""5. Concurrency: many runs on one worker, of one process and of two.

R concurrent runs of S steps (model call + one 1 KB `blob` call per step)
against the scripted model at 200 ms latency, all on ONE worker subprocess
(`python worker.py --tool-modules bench.tools`, file store), then the same batch
on a worker of two processes (REWIND_WORKER_PROCESSES=2), each on a fresh dev server. Measured: steps per
second over the whole batch, per-step latency from the runs' histories,
mirror lag (checkpoint created_at, the workflow time the step ended, to its
file's mtime), CPU and memory of the worker (and of the dev server and of
this process, which hosts the model server) sampled from /proc.
Baseline: the model latency. While the batch runs, py-spy samples the
worker (bench.profile): where its CPU goes. The floor: the same batch on the
bare workflow's worker (bench.bare_worker: model call, tool call and a no-op
third activity per step, no Rewind code), what the Temporal SDK and the
openai client alone cost for this shape on this machine.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from typing import Any
from itertools import zip_longest as _zip_longest
from pathlib import Path

from temporalio.api.enums.v1 import TimeoutType

from bench.common import (
    wait_floor_polling,
    REPO,
    TOOLS_MODULE,
    ProcSampler,
    Section,
    WorkerProcess,
    activity_profile,
    blob_script,
    file_store_root,
    history_events,
    log,
    percentile,
    start_agent,
    wait_polling,
)
from temporalio.client import Client

from activities.tools.registry import ToolRegistry
from bench.actions import add_up, billable_actions
from bench.profile import Profiler, profile_note
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.temporal.timing import step_marks
from workflows.vocabulary.contracts import DEFAULT_SYSTEM_PROMPT

LATENCY_MS = 200.0
TOOL_BYTES = 1024
CPU_TARGET_MS = 10.0  # worker CPU per step
LATENCY_TARGET = 3.0  # step latency p50 / model latency
PROCESSES = (1, 2)  # worker processes per batch: one, then `--processes 2`


async def _mirror_lags(settings, run_id: str) -> list[float]:  # type: ignore[no-untyped-def]
    root = file_store_root(settings)
    async with open_checkpoint_store(settings.store_url) as store:
        summaries = await store.list_checkpoints(run_id)
    lags = []
    for s in summaries:
        path = root / "runs" / run_id / "branches" / s.branch_id / "steps" / f"{s.step_index:08d}.json"
        lags.append(path.stat().st_mtime - s.created_at.timestamp())
    return lags


def _step_figures(events: list[Any], model_activity: str) -> tuple[list[float], int, int, dict[str, Any]]:
    """One run's step durations (model call to model call; the last one, which includes the
    final mirror drain, left out), activities, workflow tasks and estimated billable actions
    (bench.actions), from its history."""
    marks = step_marks(events, model_activity)
    prof = activity_profile(events)
    return ([b - a for a, b in zip(marks, marks[1:])][:-1],
            sum(a["count"] for a in prof["activities"].values()), prof["workflow_tasks"],
            billable_actions(events, model_activity))


async def _batch(suite, runs: int, steps: int, processes: int, sandbox: bool = False,  # type: ignore[no-untyped-def]
                 tree: Path | None = None) -> dict:  # type: ignore[type-arg]
    """One batch of `runs` × `steps` on a fresh dev server and one `rewind worker` of
    `processes` processes (REWIND_WORKER_PROCESSES), without the workflow sandbox (the
    default) or with it (REWIND_WORKFLOW_SANDBOX=1); `tree`: the worker of another
    checkout (REWIND_BENCH_BEFORE), with its own defaults. Its figures."""
    tag = f"concurrency-p{processes}" + ("-sandbox" if sandbox else "") + ("-before" if tree else "")
    server = suite.start_temporal(tag)
    client = await suite.client(server)
    model = suite.model(LATENCY_MS)
    settings = suite.settings(server, tag)
    worker = WorkerProcess(settings, model, suite.tmp / f"{tag}-worker.log",
                           extra_env={"REWIND_WORKER_PROCESSES": str(processes),
                                      **({} if tree else {"REWIND_WORKFLOW_SANDBOX": "1" if sandbox else "0"})},
                           **({"repo": tree} if tree else {}))
    try:
        pids = await wait_polling(client, settings.task_queue, worker, processes)
        warm, _ = blob_script(model, 2, TOOL_BYTES)
        for _ in range(processes):  # imports, tokenizer, connections, in each process (the queue spreads them)
            await (await start_agent(client, settings, warm, 2)).result()
        name, _ = blob_script(model, steps, TOOL_BYTES)
        samplers = {f"worker process {i + 1}" if processes > 1 else "worker": ProcSampler(pid).start()
                    for i, pid in enumerate(pids)}
        samplers.update({"dev server": ProcSampler(server.process.pid).start(),
                         "bench process (client + model server)": ProcSampler(os.getpid()).start()})
        profiler = Profiler(pids[0], suite.tmp / f"{tag}-worker.pyspy.txt").start()
        log(f"concurrency: {runs} runs × {steps} steps, {processes} worker process(es)")
        t0 = time.monotonic()
        handles = await asyncio.gather(*(start_agent(client, settings, name, steps) for _ in range(runs)))
        results = await asyncio.gather(*(h.result() for h in handles))
        t1 = time.monotonic()
        for s in samplers.values():
            s.stop()
        profiler.stop()
    finally:
        worker.stop()
    bad = [r.status for r in results if r.status.state != "completed" or r.status.step != steps]
    assert not bad, bad[:3]
    durations, lags, retries, errors = [], [], 0, []
    retry_kinds: dict[str, int] = {}
    activities = wfts = 0
    actions = []
    for h, r in zip(handles, results):
        events = await history_events(client, h.id)
        steps_s, n_activities, n_wfts, n_actions = _step_figures(events, "call_llm")
        actions.append(n_actions)
        durations += steps_s
        activities += n_activities
        wfts += n_wfts
        names: dict[int, str] = {}
        for e in events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            elif e.HasField("activity_task_started_event_attributes") and e.activity_task_started_event_attributes.attempt > 1:
                attrs = e.activity_task_started_event_attributes
                failure = attrs.last_failure
                cause = (failure.application_failure_info.type if failure.HasField("application_failure_info")
                         else TimeoutType.Name(failure.timeout_failure_info.timeout_type).replace("TIMEOUT_TYPE_", "").lower()
                         + " timeout" if failure.HasField("timeout_failure_info") else failure.message[:40])
                key = f"{names.get(attrs.scheduled_event_id, '?')}: {cause}"
                retry_kinds[key] = retry_kinds.get(key, 0) + attrs.attempt - 1
                retries += attrs.attempt - 1
        lags += await _mirror_lags(settings, h.id)
        if r.status.mirror_error:
            errors.append(r.status.mirror_error)
    suite.stop_model(model)
    suite.stop_temporal(server)
    wall = t1 - t0
    usage = {k: s.summary(t0, t1) for k, s in samplers.items()}
    worker_pct = sum(u["cpu_avg_pct"] or 0 for k, u in usage.items() if k.startswith("worker"))
    return {"processes": processes, "sandbox": sandbox, "before": tree is not None, "wall": wall, "durations": durations, "lags": lags, "retries": retries,
            "retry_kinds": retry_kinds, "errors": errors, "activities": activities, "wfts": wfts, "usage": usage,
            "actions": add_up(actions), "activities_per_step": activities / (runs * steps),
            "wfts_per_step": wfts / (runs * steps),
            "profile": profiler.summary(), "profile_skipped": profiler.skipped, "worker_cpu_pct": worker_pct,
            "steps_per_s": runs * steps / wall, "p50": percentile(durations, 50), "p99": percentile(durations, 99),
            "cpu_ms_per_step": worker_pct / 100 * wall / (runs * steps) * 1000}


async def _floor_batch(suite, runs: int, steps: int) -> dict:  # type: ignore[type-arg]
    """The same batch on the bare workflow's worker (bench.bare_worker): model call and tool
    call per step and a no-op activity at the run's end, no Rewind code. Its worker's CPU per step
    is what the SDK and the openai client cost for Rewind's shape on this machine."""
    server = suite.start_temporal("concurrency-floor")
    client = await Client.connect(server.address)
    model = suite.model(LATENCY_MS)
    queue = f"bench-floor-{uuid.uuid4().hex[:6]}"
    log_path = suite.tmp / "concurrency-floor-worker.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.bare_worker", server.address, queue, model.base_url],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        await wait_floor_polling(client, queue, proc, log_path)
        tools = [s.openai_schema() for s in ToolRegistry.from_modules([TOOLS_MODULE]).specs()]

        async def start(name: str, n: int) -> Any:
            return await client.start_workflow(
                "BareAgentWorkflow", {"system_prompt": DEFAULT_SYSTEM_PROMPT, "task": "benchmark run", "model": name,
                                      "tools": tools, "max_steps": n + 5, "noop_at_end": True},
                id=f"floor-{uuid.uuid4().hex[:10]}", task_queue=queue)

        warm, _ = blob_script(model, 2, TOOL_BYTES)
        await (await start(warm, 2)).result()
        name, _ = blob_script(model, steps, TOOL_BYTES)
        sampler = ProcSampler(proc.pid).start()
        log(f"concurrency: {runs} runs × {steps} steps, the bare workflow's worker (the floor)")
        t0 = time.monotonic()
        handles = await asyncio.gather(*(start(name, steps) for _ in range(runs)))
        done = await asyncio.gather(*(h.result() for h in handles))
        t1 = time.monotonic()
        sampler.stop()
    finally:
        proc.terminate()
        proc.wait(10)
    assert all(d == steps for d in done), done[:3]
    durations: list[float] = []
    activities = wfts = 0
    actions = []
    for h in handles:
        steps_s, n_activities, n_wfts, n_actions = _step_figures(await history_events(client, h.id), "bare_llm")
        actions.append(n_actions)
        durations += steps_s
        activities += n_activities
        wfts += n_wfts
    suite.stop_model(model)
    suite.stop_temporal(server)
    wall = t1 - t0
    usage = sampler.summary(t0, t1)
    return {"wall": wall, "steps_per_s": runs * steps / wall, "p50": percentile(durations, 50),
            "p99": percentile(durations, 99), "worker_cpu_pct": usage["cpu_avg_pct"] or 0,
            "cpu_ms_per_step": (usage["cpu_avg_pct"] or 0) / 100 * wall / (runs * steps) * 1000,
            "activities_per_step": activities / (runs * steps), "wfts_per_step": wfts / (runs * steps),
            "actions": add_up(actions)}


def _actions_table(sec: Section, runs: int, steps: int, one: dict, before: dict | None,  # type: ignore[type-arg]
                   floor: dict) -> list[list[str]]:  # type: ignore[type-arg]
    """Activities, workflow tasks and estimated Temporal Cloud actions per step (bench.actions):
    this tree, the checkout before (REWIND_BENCH_BEFORE) and the floor, from the same batch.
    Returns its headline rows."""
    def row(label: str, batch: dict) -> list[Any]:  # type: ignore[type-arg]
        a = batch["actions"]
        kinds = ", ".join(f"{k} {v / (runs * steps):.2f}" for k, v in sorted(a["by_kind"].items(), key=lambda kv: -kv[1]))
        return [label, batch["activities_per_step"], batch["wfts_per_step"], a["total"] / (runs * steps),
                a["in_steps"] / (runs * steps), a["per_run"] / runs,
                f"**{a['total'] / floor['actions']['total']:.2f}x**", kinds]
    rows = [row("Rewind (this tree)", one)]
    if before is not None:
        rows.append(row("Rewind before (REWIND_BENCH_BEFORE)", before))
    rows.append(row("the floor (bare workflow)", floor))
    sec.table(f"Temporal actions per step ({runs} runs × {steps} steps, from the runs' histories; billable actions "
              "estimated as Temporal Cloud counts them, bench/actions.py: heartbeats none, the calls end before the "
              "first beat)",
              ["worker", "activities per step", "workflow tasks per step", "billable actions per step (run's own "
               "included)", "of which inside the steps", "per run, outside the steps", "total / the floor's",
               "by kind, per step"], rows)
    per_step = one["actions"]["total"] / (runs * steps)
    headline = [["5 concurrency", "estimated Temporal Cloud actions per step, Rewind / the floor",
                 f"{per_step:.2f} / {floor['actions']['total'] / (runs * steps):.2f}",
                 f"**{one['actions']['total'] / floor['actions']['total']:.2f}x**", "–", "–"]]
    if before is not None:
        headline.append(["5 concurrency", "estimated Temporal Cloud actions per step, this tree / before "
                             "(REWIND_BENCH_BEFORE)", f"{per_step:.2f} / {before['actions']['total'] / (runs * steps):.2f}",
                             f"**{one['actions']['total'] / before['actions']['total']:.2f}x**", "–", "–"])
    sec.data["actions"] = {"rewind": one["actions"], "before": before["actions"] if before else None,
                           "floor": floor["actions"]}
    return headline


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    runs, steps = (20, 10) if suite.quick else (100, 20)
    sec = Section("concurrency", "5. Concurrency",
                  f"{runs} concurrent runs × {steps} steps (model call + one {TOOL_BYTES} B `blob` call per step), "
                  f"scripted model at {LATENCY_MS:.0f} ms latency, file checkpoint store; the same batch on one "
                  f"worker process, then on `REWIND_WORKER_PROCESSES=2` (`rewind worker --processes 2`), each on a "
                  f"fresh dev server; the dev server, the worker and this process (client + model server) share "
                  f"the machine's {os.cpu_count()} cores.")
    batches = [await _batch(suite, runs, steps, n) for n in PROCESSES]
    # Full mode only (CI's time is short): one process with the workflow sandbox; and with
    # REWIND_BENCH_BEFORE, one process of that checkout's worker.
    sandboxed = None if suite.quick else await _batch(suite, runs, steps, 1, sandbox=True)
    before_tree = os.environ.get("REWIND_BENCH_BEFORE")
    before = await _batch(suite, runs, steps, 1, tree=Path(before_tree).resolve()) if before_tree else None
    # Every mode: the floor, the same batch with no Rewind code (a few seconds in quick mode).
    floor = await _floor_batch(suite, runs, steps)
    one = batches[0]
    wall, durations, lags, retries, errors = one["wall"], one["durations"], one["lags"], one["retries"], one["errors"]
    retry_kinds, activities, wfts, usage, profile = (one["retry_kinds"], one["activities"], one["wfts"], one["usage"],
                                                     one["profile"])
    total = runs * steps
    sps, p50, p99, cpu_ms_per_step = one["steps_per_s"], one["p50"], one["p99"], one["cpu_ms_per_step"]
    lag50, lag99, lagmax = percentile(lags, 50), percentile(lags, 99), max(lags)
    sec.data = {"runs": runs, "steps": steps, "wall_s": wall, "steps_per_s": sps, "step_p50_s": p50, "step_p99_s": p99,
                "mirror_lag_p50_s": lag50, "mirror_lag_p99_s": lag99, "mirror_lag_max_s": lagmax,
                "activities_per_s": activities / wall, "workflow_tasks_per_s": wfts / wall, "retried_attempts": retries,
                "retry_kinds": retry_kinds,
                "mirror_errors": errors, "usage": usage, "worker_cpu_ms_per_step": cpu_ms_per_step,
                "worker_profile": profile, "profile_skipped": one["profile_skipped"],
                "by_processes": [{k: b[k] for k in ("processes", "sandbox", "before", "wall", "steps_per_s", "p50", "p99",
                                                    "cpu_ms_per_step", "worker_cpu_pct", "retries")}
                                 for b in [*batches, *([sandboxed] if sandboxed else []), *([before] if before else [])]],
                "floor": floor}
    ideal = 1000 / LATENCY_MS * runs  # steps/s if every step took exactly the model latency
    sec.table("Throughput and latency", ["figure", "value", "ratio to baseline"], [
        ["steps per second (whole batch)", sps, f"**{sps / ideal:.2f}x** of {ideal:.0f}/s (all {runs} runs at one model latency per step)"],
        ["wall time for the batch (s)", wall, ""],
        ["step latency p50 (ms)", p50 * 1000, f"**{p50 * 1000 / LATENCY_MS:.2f}x** the model latency"],
        ["step latency p99 (ms)", p99 * 1000, f"**{p99 * 1000 / LATENCY_MS:.2f}x** the model latency"],
        ["mirror lag p50 (ms)", lag50 * 1000, f"{lag50 * 1000 / LATENCY_MS:.2f}x the model latency"],
        ["mirror lag p99 (ms)", lag99 * 1000, f"**{lag99 * 1000 / LATENCY_MS:.2f}x** the model latency"],
        ["mirror lag max (ms)", lagmax * 1000, ""],
        ["activities per second (all types)", activities / wall, ""],
        ["workflow tasks per second", wfts / wall, ""],
        ["activity attempts that were retries", retries, ""],
    ])
    sec.table(f"One worker process, `--processes {PROCESSES[-1]}`"
              + ("" if sandboxed is None else " and one process with `REWIND_WORKFLOW_SANDBOX=1`")
              + ", the same batch (each on a fresh dev server)",
              ["worker processes", "steps per second", "ratio to 1 process", "step latency p50 (ms)",
               "p50 / model latency", "step latency p99 (ms)", "worker CPU per step (ms, all processes)",
               "worker CPU avg (% of a core, all processes)", "retried attempts"],
              [[f"{b['processes']}" + (", sandbox on" if b["sandbox"] else "") + (", before (REWIND_BENCH_BEFORE)" if b["before"] else ""), b["steps_per_s"],
                f"**{b['steps_per_s'] / sps:.2f}x**", b["p50"] * 1000,
                f"**{b['p50'] * 1000 / LATENCY_MS:.2f}x**", b["p99"] * 1000, b["cpu_ms_per_step"], b["worker_cpu_pct"],
                b["retries"]] for b in [*batches, *([sandboxed] if sandboxed else []), *([before] if before else [])]])
    sec.table("The floor: the same batch on the bare workflow's worker (model call and tool call per step as plain "
              "Temporal activities, and a no-op activity at the run's end where Rewind writes its last checkpoint; "
              "no Rewind code; bench.bare_worker), on a fresh dev server",
              ["worker", "steps per second", "step latency p50 (ms)", "p50 / model latency", "step latency p99 (ms)",
               "worker CPU per step (ms)", "worker CPU avg (% of a core)", "activities per step",
               "workflow tasks per step"],
              [["Rewind, 1 process", sps, p50 * 1000, f"**{p50 * 1000 / LATENCY_MS:.2f}x**", p99 * 1000,
                cpu_ms_per_step, one["worker_cpu_pct"], activities / total, wfts / total],
               ["the floor (bare workflow)", floor["steps_per_s"], floor["p50"] * 1000,
                f"**{floor['p50'] * 1000 / LATENCY_MS:.2f}x**", floor["p99"] * 1000, floor["cpu_ms_per_step"],
                floor["worker_cpu_pct"], floor["activities_per_step"], floor["wfts_per_step"]],
               ["Rewind / the floor", f"{sps / floor['steps_per_s']:.2f}x", f"{p50 / floor['p50']:.2f}x", "",
                f"{p99 / floor['p99']:.2f}x", f"**{cpu_ms_per_step / floor['cpu_ms_per_step']:.2f}x**", "", "", ""]])
    actions_headline = _actions_table(sec, runs, steps, one, before, floor)
    sec.table("Resources of the one-process batch, averaged over the batch (CPU % of one core; 100% = one core busy)",
              ["process", "CPU avg %", "CPU peak % (1 s windows)", "RSS peak (MB)", "RSS high-water mark (MB)"],
              [[k, u["cpu_avg_pct"], u["cpu_peak_pct"], u["rss_peak_mb"], u["rss_hwm_mb"]] if not k.startswith("bench")
               # This process's memory holds earlier benchmarks' data: only its CPU is meaningful here.
               else [k, u["cpu_avg_pct"], u["cpu_peak_pct"], "–", "–"] for k, u in usage.items()])
    w = usage["worker"]
    sec.headline = [
        ["5 concurrency", f"step latency p50 / model latency ({runs} runs × {steps} steps)",
         f"{p50 * 1000:.0f} ms / {LATENCY_MS:.0f} ms", f"**{p50 * 1000 / LATENCY_MS:.2f}x**", f"≤ {LATENCY_TARGET:.0f}x",
         "met" if p50 * 1000 / LATENCY_MS <= LATENCY_TARGET else "**not met**"],
        ["5 concurrency", "step latency p99 / model latency", f"{p99 * 1000:.0f} ms / {LATENCY_MS:.0f} ms",
         f"**{p99 * 1000 / LATENCY_MS:.2f}x**", "–", "–"],
        ["5 concurrency", "steps per second / ideal (every step = one model latency)", f"{sps:.1f} / {ideal:.0f}",
         f"**{sps / ideal:.2f}x**", "–", "–"],
        ["5 concurrency", "mirror lag p99 / step latency p50", f"{lag99 * 1000:.0f} ms / {p50 * 1000:.0f} ms",
         f"**{lag99 / p50:.2f}x**", "≤ 1x (one step)", "met" if lag99 <= p50 else "**not met**"],
        ["5 concurrency", "worker CPU per step (CPU time / steps)", f"{cpu_ms_per_step:.1f} ms",
         f"**{cpu_ms_per_step / CPU_TARGET_MS:.2f}x** the target", f"≤ {CPU_TARGET_MS:.0f} ms",
         "met" if cpu_ms_per_step <= CPU_TARGET_MS else "**not met**"],
        ["5 concurrency", "worker CPU per step, Rewind / the floor (bare workflow of the same shape, no Rewind code)",
         f"{cpu_ms_per_step:.1f} ms / {floor['cpu_ms_per_step']:.1f} ms",
         f"**{cpu_ms_per_step / floor['cpu_ms_per_step']:.2f}x**", "–", "–"],
        ["5 concurrency", "the floor's worker CPU per step (no Rewind code) / the target",
         f"{floor['cpu_ms_per_step']:.1f} ms / {CPU_TARGET_MS:.0f} ms",
         f"**{floor['cpu_ms_per_step'] / CPU_TARGET_MS:.2f}x**", "–", "–"],
        ["5 concurrency", "the floor's step latency p50 / model latency (no Rewind code)",
         f"{floor['p50'] * 1000:.0f} ms / {LATENCY_MS:.0f} ms", f"**{floor['p50'] * 1000 / LATENCY_MS:.2f}x**", "–", "–"],
        ["5 concurrency", "worker CPU avg, RSS peak", f"{w['cpu_avg_pct']:.0f}% of a core, {w['rss_peak_mb']:.0f} MB", "–", "–", "–"],
    ]
    many = batches[-1]
    sec.headline += [
        ["5 concurrency", f"`--processes {many['processes']}`: step latency p50 / model latency",
         f"{many['p50'] * 1000:.0f} ms / {LATENCY_MS:.0f} ms", f"**{many['p50'] * 1000 / LATENCY_MS:.2f}x**",
         f"≤ {LATENCY_TARGET:.0f}x", "met" if many["p50"] * 1000 / LATENCY_MS <= LATENCY_TARGET else "**not met**"],
        ["5 concurrency", f"`--processes {many['processes']}`: steps per second / one process",
         f"{many['steps_per_s']:.1f} / {sps:.1f}", f"**{many['steps_per_s'] / sps:.2f}x**", "–", "–"],
        ["5 concurrency", f"`--processes {many['processes']}`: worker CPU per step (all processes)",
         f"{many['cpu_ms_per_step']:.1f} ms", f"**{many['cpu_ms_per_step'] / CPU_TARGET_MS:.2f}x** the target",
         f"≤ {CPU_TARGET_MS:.0f} ms", "met" if many["cpu_ms_per_step"] <= CPU_TARGET_MS else "**not met**"],
    ]
    sec.headline += actions_headline
    if before is not None:
        sec.headline.append(
            ["5 concurrency", "worker CPU per step, this tree / before (REWIND_BENCH_BEFORE, the same batch)",
             f"{cpu_ms_per_step:.1f} ms / {before['cpu_ms_per_step']:.1f} ms",
             f"**{cpu_ms_per_step / before['cpu_ms_per_step']:.2f}x**", "–", "–"])
        sec.headline.append(
            ["5 concurrency", "steps per second, this tree / before (REWIND_BENCH_BEFORE, the same batch)",
             f"{sps:.1f} / {before['steps_per_s']:.1f}", f"**{sps / before['steps_per_s']:.2f}x**", "–", "–"])
    if sandboxed is not None:
        sec.headline.append(
            ["5 concurrency", "worker CPU per step, default (no sandbox) / `REWIND_WORKFLOW_SANDBOX=1`",
             f"{cpu_ms_per_step:.1f} ms / {sandboxed['cpu_ms_per_step']:.1f} ms",
             f"**{cpu_ms_per_step / sandboxed['cpu_ms_per_step']:.2f}x**", "–", "–"])
        sec.verdicts.append(
            f"With the workflow sandbox (`REWIND_WORKFLOW_SANDBOX=1`, one process) the worker used "
            f"{sandboxed['cpu_ms_per_step']:.1f} ms of CPU per step against {cpu_ms_per_step:.1f} ms without it, the "
            f"default ({cpu_ms_per_step / sandboxed['cpu_ms_per_step']:.2f}x), step latency p50 "
            f"{sandboxed['p50'] * 1000:.0f} ms against {p50 * 1000:.0f} ms: the sandbox runs a compiled snippet "
            f"for every payload a workflow task decodes or encodes (the SDK's serialization-context lookups), "
            f"besides the activation itself.")
    if profile:
        sec.table(f"Where the worker's CPU goes (py-spy, {profile['samples']:,} samples during the batch; share of samples)",
                  ["on the CPU: package (innermost frame)", "share", "on the CPU: function", "share",
                   "inside Rewind module (any frame)", "share"],
                  [[a[0] if a else "", f"{a[1]:.1%}" if a else "", b[0] if b else "", f"{b[1]:.1%}" if b else "",
                    c[0] if c else "", f"{c[1]:.1%}" if c else ""]
                   for a, b, c in _zip_longest(profile["self_by_package"], profile["self_by_function"],
                                               profile["inside_rewind_module"])])
    sec.notes.append(profile_note(profile, one["profile_skipped"]))
    srv = usage["dev server"]
    busy = (w["cpu_avg_pct"] or 0) + (srv["cpu_avg_pct"] or 0) + (usage["bench process (client + model server)"]["cpu_avg_pct"] or 0)
    sec.verdicts.append(
        f"No target was set. Each step took {p50 * 1000:.0f} ms at the median against the model's {LATENCY_MS:.0f} ms "
        f"({(p50 * 1000 - LATENCY_MS):.0f} ms of Temporal, tool and bridge work per step with {runs} runs in flight); "
        f"the batch ran at {sps:.1f} steps/s, {sps / ideal:.0%} of the {ideal:.0f}/s a zero-overhead loop would reach. "
        f"The worker averaged {w['cpu_avg_pct']:.0f}% of one core (peak {w['cpu_peak_pct']:.0f}%), the dev server "
        f"{srv['cpu_avg_pct']:.0f}%, and all processes together {busy:.0f}% of the {os.cpu_count()} cores' "
        f"{os.cpu_count() * 100}%. "
        + (f"The worker is the bottleneck: its Python code runs on one event loop under one GIL, so it gets about "
           f"one core (the SDK's Rust core and the I/O threads add a little: {w['cpu_peak_pct']:.0f}% peak), and it "
           f"averaged {w['cpu_avg_pct']:.0f}%; most of each step above the model latency is waiting for a turn on "
           f"that loop. More worker processes would add throughput as far as idle CPU allows (here "
           f"{max(os.cpu_count() * 100 - busy, 0):.0f}% of a core)." if (w["cpu_avg_pct"] or 0) > 70 else
           "The machine's cores are saturated, so the per-step overhead is queueing for a core."
           if busy > 0.8 * os.cpu_count() * 100 else
           "Neither the worker nor the machine is CPU-bound, so the per-step overhead is latency: task dispatch "
           "round trips through the dev server."))
    sec.verdicts.append(
        f"The floor: the bare workflow (b) of the overhead benchmark, with a no-op activity at the run's end where "
        f"Rewind writes its last checkpoint, on a worker process of its own (plain temporalio, no sandbox, no payload store), under "
        f"the same {runs} runs × {steps} steps, used {floor['cpu_ms_per_step']:.1f} ms of worker CPU per step "
        f"({floor['activities_per_step']:.2f} activities and {floor['wfts_per_step']:.2f} workflow tasks per step) "
        f"and reached a step latency p50 of {floor['p50'] * 1000 / LATENCY_MS:.2f}x the model's; Rewind used "
        f"{cpu_ms_per_step:.1f} ms ({cpu_ms_per_step / floor['cpu_ms_per_step']:.2f}x the floor; "
        f"{activities / total:.2f} activities, {wfts / total:.2f} workflow tasks per step) and reached "
        f"{p50 * 1000 / LATENCY_MS:.2f}x. "
        + (f"The floor is above the {CPU_TARGET_MS:.0f} ms target: on this machine the Temporal SDK's work for one "
           f"model call and one tool call as activities (its Rust core, payload conversion, activation and "
           f"completion, the thread hand-offs) and the openai client cost more than the target allows, before any "
           f"of Rewind's own work." if floor["cpu_ms_per_step"] > CPU_TARGET_MS else
           f"The floor is within the {CPU_TARGET_MS:.0f} ms target: Rewind's own work is what exceeds it.")
        + (f" Nor does the floor's step latency come within {LATENCY_TARGET:.0f}x of the model's: with "
           f"{runs} runs in flight on {os.cpu_count()} cores shared with the dev server, steps queue for CPU."
           if floor["p50"] * 1000 / LATENCY_MS > LATENCY_TARGET else ""))
    mu = many["usage"]
    many_busy = many["worker_cpu_pct"] + sum(mu[k]["cpu_avg_pct"] or 0 for k in mu if not k.startswith("worker"))
    sec.verdicts.append(
        f"With `--processes {many['processes']}` the same batch ran at {many['steps_per_s']:.1f} steps/s "
        f"({many['steps_per_s'] / sps:.2f}x one process), step latency p50 {many['p50'] * 1000:.0f} ms "
        f"({many['p50'] * 1000 / LATENCY_MS:.2f}x the model's latency; one process: {p50 * 1000 / LATENCY_MS:.2f}x); "
        f"its processes used {many['worker_cpu_pct']:.0f}% of a core together "
        f"({many['cpu_ms_per_step']:.1f} ms of CPU per step; one process: {cpu_ms_per_step:.1f} ms) and all processes "
        f"{many_busy:.0f}% of the {os.cpu_count()} cores' {os.cpu_count() * 100}%. "
        + ("A second process gains as far as idle cores allow: here the dev server and the model server take the "
           "rest of the machine." if many_busy > 0.8 * os.cpu_count() * 100 else
           "The machine had idle CPU left, so the remaining per-step time is not CPU."))
    kinds = ", ".join(f"{v} × {k}" for k, v in sorted(retry_kinds.items(), key=lambda kv: -kv[1])) or "none"
    parent_waits = sum(v for k, v in retry_kinds.items() if "ParentNotMirrored" in k)
    sec.verdicts.append(
        f"Mirror lag (step end to checkpoint file) p50 {lag50 * 1000:.0f} ms, p99 {lag99 * 1000:.0f} ms, max "
        f"{lagmax * 1000:.0f} ms: a step's checkpoint is written by the next step's model call (the run's last by "
        f"the mirror activity), which queues on the same worker as everything else, so the lag "
        f"follows the worker's backlog (step latency p50 {p50 * 1000:.0f} ms). Retried activity attempts: {retries} "
        f"({kinds})"
        + (f"; {parent_waits} of them are a step's mirror running before its parent's was stored "
           "(ParentNotMirrored) and retried by the mirror's retry policy, which stretches the lag's tail."
           if parent_waits else ".")
        + (f" Mirror errors at the end of runs: {'; '.join(errors[:2])}." if errors else ""))
    timed_out = {k: v for k, v in retry_kinds.items() if "timeout" in k and not k.startswith("mirror_step")}
    if timed_out:
        model_calls = sum(v for k, v in timed_out.items() if k.startswith("call_llm"))
        sec.verdicts.append(
            f"Under this load some calls ran twice: {', '.join(f'{v} × {k}' for k, v in timed_out.items())}. The "
            f"worker's event loop was busy enough ({w['cpu_avg_pct']:.0f}% of a core on average) that an activity it "
            + ("had accepted did not heartbeat within the 5 s heartbeat timeout"
               if any("heartbeat" in k for k in timed_out) else "had accepted did not finish within its timeout")
            + f", so Temporal declared it lost and scheduled it again: {model_calls} model call(s) ran (and would be "
            "paid) twice. The heartbeat timeout assumes a responsive worker; capping the worker's concurrent activities to what its CPU can serve would keep "
            "overload from turning into duplicate calls.")
    return sec
