"""8. A long run's step time, early and late, beside the floor's.

One N-step run (N = 500; quick: 100) of the scripted model at 0 ms latency,
every step a 2 KB `blob` call, on one worker subprocess configured by
environment only (`python worker.py`), once with the checkpoint and payload
stores in a local folder and once with both on S3 (a moto_server process).
Step time = one model call's scheduling to the next one's, read from the
run's history; the figure is the median of the last 20 steps against the
median of steps 21-40. Part of a late step's extra time is the model request's
own growth: every call posts the whole conversation (2 KB more each step),
which the client encodes and the model server parses. The floor takes it out:
the same N steps on the bare workflow (bench.bare_workflow with `held`, on a
worker process of plain temporalio, bench.bare_worker): its model activity
posts the same growing conversation to the same model server, its tool
returns the same 2 KB, and no Rewind code runs. Rewind's part of the slowdown
is Rewind's late/early ratio divided by the floor's. Rewind's runs set the
model's context window (`llm.context_tokens`) above the conversation, so that
Rewind too sends it whole at every step (past ~124 K tokens, step ~280 here,
the default 128 K window would have it send a shortened view instead: a
smaller request than the floor's, not the same one). Each step's time is split
from history into the model activity (for Rewind, with the previous step's
checkpoint written beside the call), the tool activity, the workflow tasks and
the rest; the worker's, the dev server's (and moto's) CPU per step are read
from /proc at the windows' edges, and the carried checkpoint writes' time
from the worker's own metrics. Steps 1-20 are not the baseline: on the dev server the first dozen or so steps of any workflow run
faster (its workflow tasks are dispatched in ~2 ms, later ones in ~35 ms), the
floor's included.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path
from statistics import fmean
from typing import Any

from temporalio.client import Client

from bench.common import (
    wait_floor_polling,
    MAX_REQUEST_BYTES,
    REPO,
    TOOLS_MODULE,
    Section,
    WorkerProcess,
    before_name,
    blob_script,
    history_events,
    log,
    median,
    moto_process,
    save_figure,
    start_agent,
    wait_polling,
)
from bench.step_pieces import PIECES, step_pieces
from rewind.temporal.dev_server import free_port
from rewind.worker.scripted_model import ScriptedModelServer
from rewind.write_latency import write_latency
from workflows.vocabulary.contracts import LlmTuning
from workflows.vocabulary.wire import CALL_LLM, RUN_TOOL

TARGET = 1.2
WINDOW = 20
BLOB = 2048
# Above a 500-step conversation of 2 KB tool results (~220 K tokens): never shortened.
CONTEXT_TOKENS = 1_000_000


class SizedModelServer(ScriptedModelServer):
    """The scripted model, noting each request's size and keeping none of its body.

    TimedModelServer keeps every body it got: over a 500-step run of whole
    conversations that would be hundreds of MB of parsed JSON held in this
    process (the model server's thread), for nothing this section reads."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sizes: dict[str, list[int]] = {}  # model -> bytes of each request, in order

    async def start(self) -> str:
        url = await super().start()
        assert self._runner is not None
        self._runner.app._client_max_size = MAX_REQUEST_BYTES  # a whole 500-step conversation is ~1.2 MB
        return url

    async def _completions(self, request):  # type: ignore[no-untyped-def]
        response = await super()._completions(request)
        with self._lock:
            entry = self._log.pop()
            self.sizes.setdefault(str(entry.get("model")), []).append(request.content_length or 0)
        return response


def _raw(events: list[Any], model_activity: str, tool_activity: str, sizes: list[int], watched: dict) -> dict:  # type: ignore[type-arg]
    pieces, continued = step_pieces(events, model_activity, tool_activity)
    # The last step is the final answer (no tool call).
    return {"pieces": pieces[:-1], "continued_at": continued, "sizes": sizes, "watched": watched}


def _pooled(label: str, rounds: list[dict]) -> dict:  # type: ignore[type-arg]
    """One run's figures from its rounds (the same run made again later in the session: the
    machine is shared, and a round's 20-step windows can fall on a busy moment): the medians
    and means of every round's steps in each window together, CPU averaged over rounds."""
    def window(a: int, b: int | None) -> list[dict[str, float]]:
        return [p for r in rounds for p in r["pieces"][a:b]]

    def mean_pieces(chosen: list[dict[str, float]]) -> dict[str, float]:
        return {k: fmean(p[k] for p in chosen) for k in (*PIECES, "total")}

    first, early, late = (median([p["total"] for p in window(a, b)])
                          for a, b in ((0, WINDOW), (WINDOW, 2 * WINDOW), (-WINDOW, None)))
    watched = {k: fmean(v for r in rounds if (v := r["watched"].get(k)) is not None)
               for k in {k for r in rounds for k in r["watched"]}
               if any(r["watched"].get(k) is not None for r in rounds)}
    sizes = rounds[0]["sizes"]
    times = [p["total"] for p in rounds[0]["pieces"]]
    each = [median([p["total"] for p in r["pieces"][-WINDOW:]]) / median([p["total"] for p in r["pieces"][WINDOW:2 * WINDOW]])
            for r in rounds]
    return {"label": label, "rounds": len(rounds), "round_ratios": each, "first_s": first, "early_s": early, "late_s": late,
            "ratio": late / early,  # type: ignore[operator]
            "early_pieces": mean_pieces(window(WINDOW, 2 * WINDOW)), "late_pieces": mean_pieces(window(-WINDOW, None)),
            "request_early_kb": fmean(sizes[WINDOW:2 * WINDOW]) / 1024,
            "request_late_kb": fmean(sizes[-WINDOW - 1:-1]) / 1024,
            "continued_at": rounds[0]["continued_at"], "watched": watched,
            "curve": [(i + 1, t) for i, t in enumerate(times)][:: max(1, len(times) // 100)]}


def _cpu_s(pid: int) -> float:
    """utime + stime of a process so far (Linux /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _watch(pids: dict[str, int], metrics_url: str | None, model: SizedModelServer, name: str, steps: int,
                 done: asyncio.Future) -> dict:  # type: ignore[type-arg]
    """CPU per step of each process in `pids` (the worker, the dev server) during steps 21-40
    and the last 20, and the mean ms of the checkpoint writes that model calls carried then
    (the worker's own histogram), read as the run passes each window's edges (a model
    request's arrival)."""
    edges = [WINDOW + 1, 2 * WINDOW + 1, steps - WINDOW + 1, steps]
    seen: list[tuple[int, dict[str, float], Any]] = []
    while edges and not done.done():
        arrived = len(model.sizes.get(name, []))
        if arrived >= edges[0]:
            writes = (await write_latency([metrics_url])).checkpoint_write if metrics_url else None
            seen.append((arrived, {k: _cpu_s(pid) for k, pid in pids.items()}, writes))
            edges.pop(0)
        await asyncio.sleep(0.005)
    if len(seen) < 4:
        return {}

    def write_ms(a, b) -> float | None:  # type: ignore[no-untyped-def]
        return (b.sum_ms - a.sum_ms) / (b.count - a.count) if a and b and b.count > a.count else None

    (n0, c0, w0), (n1, c1, w1), (n2, c2, w2), (n3, c3, w3) = seen
    out: dict[str, float | None] = {"write_early_ms": write_ms(w0, w1), "write_late_ms": write_ms(w2, w3)}
    for k in pids:
        out[f"{k}_cpu_early_ms"] = (c1[k] - c0[k]) / (n1 - n0) * 1000
        out[f"{k}_cpu_late_ms"] = (c3[k] - c2[k]) / (n3 - n2) * 1000
    return out


async def _rewind(suite, client, server, model: SizedModelServer, label: str, steps: int, tree: Path = REPO,  # type: ignore[no-untyped-def]
                  moto_pid: int | None = None, **stores: str) -> dict:
    slug = label.split()[0].lower() + ("-before" if tree != REPO else "")
    settings = suite.settings(server, f"long-{slug}", **stores)
    port = free_port()
    worker = WorkerProcess(settings, model, suite.tmp / f"long-run-{slug}.log", repo=tree,
                           extra_env={"REWIND_METRICS_PORT": str(port)})
    try:
        await wait_polling(client, settings.task_queue, worker)
        name, _ = blob_script(model, steps, BLOB)
        log(f"long_run: {steps} steps, {label}")
        handle = await start_agent(client, settings, name, steps, task=f"long run {uuid.uuid4().hex[:6]}",
                                   llm=LlmTuning(context_tokens=CONTEXT_TOKENS))
        result_task = asyncio.ensure_future(handle.result())
        pids = {"worker": worker.pid, "server": server.process.pid, **({"moto": moto_pid} if moto_pid else {})}
        watched = await _watch(pids, f"http://127.0.0.1:{port}/metrics", model, name, steps, result_task)
        result = await result_task
    finally:
        worker.stop()
    assert result.status.step == steps, result.status
    return _raw(await history_events(client, handle.id), CALL_LLM, RUN_TOOL, model.sizes[name], watched)


async def _floor(suite, server, model: SizedModelServer, steps: int, continue_as_new: bool) -> dict:  # type: ignore[no-untyped-def]
    """The same run on the bare workflow's worker: the request's own growth, without Rewind
    (continued as new on Rewind's rule, or never)."""
    from activities.tools.registry import ToolRegistry
    from workflows.vocabulary.contracts import DEFAULT_SYSTEM_PROMPT

    client = await Client.connect(server.address)
    queue = f"bench-long-floor-{uuid.uuid4().hex[:6]}"
    log_path = suite.tmp / "long-run-floor-worker.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "bench.bare_worker", server.address, queue, model.base_url],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    tools = [s.openai_schema() for s in ToolRegistry.from_modules([TOOLS_MODULE]).specs()]

    async def run(n: int, task: str, name: str | None = None) -> str:
        name = name or blob_script(model, n, BLOB)[0]
        wid = f"long-floor-{uuid.uuid4().hex[:8]}"
        await client.execute_workflow(
            "BareAgentWorkflow", {"system_prompt": DEFAULT_SYSTEM_PROMPT, "task": task, "model": name,
                                  "tools": tools, "max_steps": n + 5, "held": True,
                                  "continue_as_new": continue_as_new}, id=wid, task_queue=queue)
        return wid

    try:
        await wait_floor_polling(client, queue, proc, log_path)
        await run(2, "warm up")  # the worker's first calls build its clients
        log(f"long_run: {steps} steps, the floor (bare workflow{'' if continue_as_new else ', no continue-as-new'})")
        name, _ = blob_script(model, steps, BLOB)
        running = asyncio.ensure_future(run(steps, f"long run {uuid.uuid4().hex[:6]}", name))
        watched = await _watch({"worker": proc.pid, "server": server.process.pid}, None, model, name, steps, running)
        wid = await running
    finally:
        proc.terminate()
        proc.wait(10)
    return _raw(await history_events(client, wid), "bare_llm", "bare_tool", model.sizes[name], watched)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    steps, rounds = (100, 1) if suite.quick else (500, 3)
    sec = Section("long_run", f"8. A {steps}-step run, early and late steps, beside the floor",
                  __doc__.split("\n\n", 1)[1].replace("\n", " ").strip().replace("N = 500; quick: 100", f"N = {steps}")
                  + (f" Full mode makes the floor's run and each of Rewind's {rounds} times, alternating, and pools "
                     "their windows' steps." if rounds > 1 else ""))
    server = suite.start_temporal("long-run")
    client = await suite.client(server)
    model = SizedModelServer()
    model.start_in_thread()
    before_tree = os.environ.get("REWIND_BENCH_BEFORE")
    folder, s3 = "local folder", "S3 (moto_server)"
    before_label = f"local folder, {before_name(before_tree)}" if before_tree else ""
    raw: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    moto = None
    try:
        moto, endpoint = moto_process()
        import boto3

        for _ in range(rounds):
            raw.setdefault("floor", []).append(await _floor(suite, server, model, steps, continue_as_new=True))
            raw.setdefault(folder, []).append(await _rewind(suite, client, server, model, folder, steps))
            if before_tree:
                raw.setdefault(before_label, []).append(await _rewind(
                    suite, client, server, model, before_label, steps, tree=Path(before_tree).resolve()))
            bucket = f"long-{uuid.uuid4().hex[:8]}"
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
            raw.setdefault(s3, []).append(await _rewind(
                suite, client, server, model, s3, steps, moto_pid=moto.pid, store_url=f"s3://{bucket}/checkpoints",
                payload_url=f"s3://{bucket}/rewind-payloads", s3_endpoint_url=endpoint))
        unbroken = _pooled("the floor, never continued as new",
                           [await _floor(suite, server, model, steps, continue_as_new=False)])
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(10)
        model.stop_thread()
        suite.stop_temporal(server)
    floor = _pooled("the floor (bare workflow)", raw.pop("floor"))
    results = [_pooled(label, r) for label, r in raw.items()]
    for r in results:
        r["part"] = r["ratio"] / floor["ratio"]
        # What Rewind adds to a step late, beyond what it adds early: its own growth.
        r["growth_ms"] = _ms(r["late_s"] - r["early_s"] - (floor["late_s"] - floor["early_s"]))
        r["above_floor_ms"] = {k: (r["late_pieces"][k] - floor["late_pieces"][k]) * 1000 for k in (*PIECES, "total")}
    sec.data = {"steps": steps, "rounds": rounds, "results": results, "floor": floor,
                "floor_never_continued": unbroken, "context_tokens": CONTEXT_TOKENS}
    _tables(sec, steps, floor, unbroken, results, suite.quick)
    return sec


def _cpu_growth(r: dict, floor: dict) -> float | None:  # type: ignore[type-arg]
    """Worker CPU per step, late minus early, beyond the floor's (ms)."""
    w, f = r["watched"], floor["watched"]
    try:
        return (w["worker_cpu_late_ms"] - w["worker_cpu_early_ms"]) - (f["worker_cpu_late_ms"] - f["worker_cpu_early_ms"])
    except KeyError:
        return None


def _tables(sec: Section, steps: int, floor: dict, unbroken: dict, results: list[dict], quick: bool) -> None:  # type: ignore[type-arg]
    last = f"last {WINDOW}"
    sec.table(f"Step time (median ms): steps 1-{WINDOW}, {WINDOW + 1}-{2 * WINDOW} and the {last}; Rewind's part = "
              "its late/early ratio ÷ the floor's; Rewind's own growth = (its late − its early) − (the floor's late − "
              "the floor's early), in step time and in its worker's CPU per step",
              ["run", "rounds", "steps 1-20", "steps 21-40", last, "last / 21-40", "Rewind's part (÷ floor)",
               "Rewind's own growth (ms)", "worker CPU ms/step, 21-40 → last 20", "its own growth (CPU ms)",
               "request KB, 21-40 → last 20", "continue-as-new (at step)"],
              [[r["label"], r["rounds"], _ms(r["first_s"]), _ms(r["early_s"]), _ms(r["late_s"]), f"{r['ratio']:.2f}x",
                f"**{r['part']:.2f}x**" if "part" in r else "–", r.get("growth_ms", "–"),
                f"{r['watched'].get('worker_cpu_early_ms', 0):.1f} → {r['watched'].get('worker_cpu_late_ms', 0):.1f}",
                _cpu_growth(r, floor) if "part" in r else "–",
                f"{r['request_early_kb']:.0f} → {r['request_late_kb']:.0f}",
                ", ".join(str(s) for s in r["continued_at"]) or "–"] for r in [floor, unbroken, *results]])
    names = {"model queue": "model activity: schedule → start", "model run": "model activity: start → close "
             "(Rewind: with the previous step's checkpoint written beside the call)",
             "tool queue": "tool activity: schedule → start", "tool run": "tool activity: start → close",
             "workflow tasks": "workflow tasks: schedule → complete", "rest": "the rest (server hops between them, "
             "continue-as-new)", "total": "the step"}
    rows = [[names[k], _ms(floor["early_pieces"][k]), _ms(floor["late_pieces"][k]),
             *[x for r in results for x in (_ms(r["early_pieces"][k]), _ms(r["late_pieces"][k]), r["above_floor_ms"][k])]]
            for k in (*PIECES, "total")]
    rows.insert(2, ["  of which the carried checkpoint write (worker metric, mean; concurrent with the call)", "–", "–",
                    *[x for r in results for x in (r["watched"].get("write_early_ms"), r["watched"].get("write_late_ms"), "")]])
    for proc, what in (("worker", "the worker process"), ("server", "the Temporal dev server"), ("moto", "moto_server")):
        rows.append([f"CPU per step of {what} (ms, from /proc)", floor["watched"].get(f"{proc}_cpu_early_ms"),
                     floor["watched"].get(f"{proc}_cpu_late_ms"),
                     *[x for r in results for x in (r["watched"].get(f"{proc}_cpu_early_ms"),
                                                   r["watched"].get(f"{proc}_cpu_late_ms"),
                                                   _minus(r["watched"].get(f"{proc}_cpu_late_ms"),
                                                          floor["watched"].get(f"{proc}_cpu_late_ms", 0.0)))]])
    sec.table(f"Where a step's time goes (mean ms per step, from each run's history): steps 21-40 and the {last}, "
              f"and the late step above the floor's",
              ["piece", "floor 21-40", f"floor {last}",
               *[h for r in results for h in (f"{r['label']} 21-40", f"{r['label']} {last}", "late − floor's late")]],
              rows)
    for r in results:
        sec.headline.append(["8 long run", f"step time, last {WINDOW} / steps 21-40 of a {steps}-step run, {r['label']}, "
                             f"÷ the floor's (the same run on the bare workflow: {floor['ratio']:.2f}x)",
                             f"{_ms(r['late_s']):.0f} ms / {_ms(r['early_s']):.0f} ms ({r['ratio']:.2f}x)",
                             f"**{r['part']:.2f}x**", f"≤ {TARGET}x", "met" if r["part"] <= TARGET else "**not met**"])
    sec.verdicts.append(
        f"The floor (no Rewind code, the same growing request: {floor['request_early_kb']:.0f} → "
        f"{floor['request_late_kb']:.0f} KB) goes from {_ms(floor['early_s']):.0f} to {_ms(floor['late_s']):.0f} ms "
        f"a step ({floor['ratio']:.2f}x): that much of a long run's slowdown is the model request's own growth. "
        + "; ".join(f"{r['label']}: {_ms(r['early_s']):.0f} → {_ms(r['late_s']):.0f} ms ({r['ratio']:.2f}x), Rewind's "
                    f"part {r['part']:.2f}x ({'met' if r['part'] <= TARGET else 'not met'}), its own growth "
                    f"{r['growth_ms']:+.0f} ms a step (worker CPU {_cpu_growth(r, floor) or 0:+.1f} ms)"
                    for r in results) + ".")
    sec.verdicts.append(
        "Rewind's part is a ratio of ratios: Rewind's early step is longer than the floor's (a checkpoint, a "
        "transcript segment and more workflow work per step), so the same added milliseconds late make a smaller "
        "ratio. The additive figures (its own growth, in step time and in worker CPU) say what grows in Rewind.")
    if results[0]["continued_at"] or floor["continued_at"]:
        sec.verdicts.append(
            f"Continue-as-new: Rewind continues the run as new at step "
            f"{', '.join(str(s) for s in results[0]['continued_at']) or '–'} (Temporal suggests it near 4 K events), "
            f"and so does the floor, on the same rule (at {', '.join(str(s) for s in floor['continued_at']) or '–'}). "
            f"The floor that never continues as new goes {_ms(unbroken['early_s']):.0f} → "
            f"{_ms(unbroken['late_s']):.0f} ms ({unbroken['ratio']:.2f}x, against {floor['ratio']:.2f}x; worker CPU "
            f"{unbroken['watched'].get('worker_cpu_early_ms', 0):.1f} → {unbroken['watched'].get('worker_cpu_late_ms', 0):.1f} "
            f"ms a step, dev server {unbroken['watched'].get('server_cpu_early_ms', 0):.1f} → "
            f"{unbroken['watched'].get('server_cpu_late_ms', 0):.1f}).")
    else:
        sec.verdicts.append(f"No run continued as new in {steps} steps (Temporal suggests it near 4 K events, about "
                            "step 340 of this run): both floors are the same run here.")
    if floor["rounds"] > 1:
        sec.verdicts.append(
            "On a shared 2-core machine a 20-step window can fall on a busy moment; each round's late/early ratio: "
            + "; ".join(f"{r['label']} " + ", ".join(f"{x:.2f}x" for x in r["round_ratios"]) for r in [floor, *results])
            + f". Hence the {floor['rounds']} rounds pooled; the CPU per step (from /proc) moves much less and is the "
            "figure to watch for work that grows.")

    def draw(axes):  # type: ignore[no-untyped-def]
        for r in [floor, unbroken, *results]:
            xs, ys = zip(*r["curve"])
            axes[0].plot(xs, [y * 1000 for y in ys], label=r["label"], linewidth=0.8)
        axes[0].set(title=f"step time along a {steps}-step run", xlabel="step", ylabel="ms")

    save_figure(sec, "long_run", quick, draw)
