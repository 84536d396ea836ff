"""8. A long run's step time, early and late, on a local folder and on S3.

One N-step run (N = 500; quick: 100) of the scripted model at 0 ms latency,
every step a 2 KB `blob` call, on one worker subprocess configured by
environment only (`python worker.py`), once with the checkpoint and payload
stores in a local folder and once with both on S3 (a moto_server process).
Step time = one model call's scheduling to the next one's, read from the
run's history; the figure is the median of the last 20 steps against the
median of steps 21-40. A step whose cost grows with the run (a mirror that
rereads, a listing, whole-conversation work) shows up as a ratio above 1.
Steps 1-20 are not the baseline: on the dev server the first dozen or so
steps of any workflow run faster (its workflow tasks are dispatched in ~2 ms,
later ones in ~35 ms); a bare Temporal workflow with the same activities
(bench.bare_workflow, 100 steps, in the same run) shows it, and its figures
are reported next to Rewind's.
"""

from __future__ import annotations

import uuid

from bench.common import (
    Section,
    WorkerProcess,
    blob_script,
    history_events,
    log,
    median,
    moto_process,
    save_figure,
    start_agent,
    wait_polling,
)
from rewind.temporal.timing import step_marks

TARGET = 1.2
WINDOW = 20
BLOB = 2048


async def _run(suite, client, server, model, label: str, steps: int, **stores: str) -> dict:  # type: ignore[no-untyped-def]
    settings = suite.settings(server, f"long-{label.split()[0].lower()}", **stores)
    worker = WorkerProcess(settings, model, suite.tmp / f"long-run-{label.split()[0].lower()}.log")
    try:
        await wait_polling(client, settings.task_queue, worker)
        name, _ = blob_script(model, steps, BLOB)
        log(f"long_run: {steps} steps, {label}")
        handle = await start_agent(client, settings, name, steps, task=f"long run {uuid.uuid4().hex[:6]}")
        result = await handle.result()
    finally:
        worker.stop()
    assert result.status.step == steps, result.status
    marks = step_marks(await history_events(client, handle.id), "call_llm")
    times = [b - a for a, b in zip(marks, marks[1:])][:-1]  # the last one is the final answer
    first, early, late = median(times[:WINDOW]), median(times[WINDOW:2 * WINDOW]), median(times[-WINDOW:])
    return {"label": label, "steps": steps, "first_s": first, "early_s": early, "late_s": late, "ratio": late / early,
            "ratio_from_first": late / first,
            "continued_as_new": result.status.continued_as_new,
            "curve": [(i + 1, t) for i, t in enumerate(times)][:: max(1, steps // 100)]}


async def _bare(client, model, steps: int) -> dict:  # type: ignore[no-untyped-def]
    """The dev server's warm phase, seen by a workflow without Rewind (same activities)."""
    from temporalio.worker import Worker

    from activities.tools import ToolRegistry
    from bench.bare_workflow import BareActivities, BareAgentWorkflow
    from bench.common import TOOLS_MODULE
    from workflows.contracts import DEFAULT_SYSTEM_PROMPT

    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    name, _ = blob_script(model, steps, 256)
    acts = BareActivities(model.base_url, registry)
    wid, queue = f"bare-long-{uuid.uuid4().hex[:8]}", f"bare-long-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[BareAgentWorkflow], activities=[acts.bare_llm, acts.bare_tool]):
        await client.execute_workflow(
            "BareAgentWorkflow", {"system_prompt": DEFAULT_SYSTEM_PROMPT, "task": "warm phase", "model": name,
                                  "tools": [s.openai_schema() for s in registry.specs()], "max_steps": steps + 5},
            id=wid, task_queue=queue)
    marks = step_marks(await history_events(client, wid), "bare_llm")
    times = [b - a for a, b in zip(marks, marks[1:])][:-1]
    return {"first_s": median(times[:WINDOW]), "early_s": median(times[WINDOW:2 * WINDOW]),
            "late_s": median(times[-WINDOW:]), "steps": steps}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    steps = 100 if suite.quick else 500
    sec = Section("long_run", f"8. A {steps}-step run, early and late steps",
                  __doc__.split("\n\n", 1)[1].replace("\n", " ").replace("N = 500; quick: 100", f"N = {steps}"))
    server = suite.start_temporal("long-run")
    client = await suite.client(server)
    model = suite.model(0)
    bare = await _bare(client, model, 100)
    results = [await _run(suite, client, server, model, "local folder", steps)]
    moto, endpoint = moto_process()
    try:
        import boto3

        bucket = f"long-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        results.append(await _run(suite, client, server, model, "S3 (moto_server)", steps,
                                  store_url=f"s3://{bucket}/checkpoints", payload_url=f"s3://{bucket}/rewind-payloads",
                                  s3_endpoint_url=endpoint))
    finally:
        moto.terminate()
        moto.wait(10)
        suite.stop_model(model)
        suite.stop_temporal(server)
    sec.data = {"steps": steps, "results": results, "bare": bare}
    sec.table(f"Step time (median ms): steps 1-{WINDOW}, {WINDOW + 1}-{2 * WINDOW} and the last {WINDOW}",
              ["run", "steps 1-20", "steps 21-40", "last 20", "last / 21-40", "last / 1-20", "continue-as-new"],
              [[r["label"], r["first_s"] * 1000, r["early_s"] * 1000, r["late_s"] * 1000, f"**{r['ratio']:.2f}x**",
                f"{r['ratio_from_first']:.2f}x", r["continued_as_new"]] for r in results]
              + [[f"(baseline) bare Temporal workflow, {bare['steps']} steps", bare["first_s"] * 1000,
                  bare["early_s"] * 1000, bare["late_s"] * 1000, f"{bare['late_s'] / bare['early_s']:.2f}x",
                  f"{bare['late_s'] / bare['first_s']:.2f}x", "–"]])
    for r in results:
        sec.headline.append(["8 long run", f"step time, last {WINDOW} / steps 21-40 of a {steps}-step run, {r['label']}",
                             f"{r['late_s'] * 1000:.0f} ms / {r['early_s'] * 1000:.0f} ms", f"**{r['ratio']:.2f}x**",
                             f"≤ {TARGET}x", "met" if r["ratio"] <= TARGET else "**not met**"])
    warm = bare["early_s"] / bare["first_s"]
    sec.verdicts.append(
        "; ".join(f"{r['label']}: a step at the end of the run takes {r['ratio']:.2f}x what it took at steps 21-40 "
                  f"({r['early_s'] * 1000:.0f} → {r['late_s'] * 1000:.0f} ms; {r['ratio_from_first']:.2f}x steps 1-20, "
                  f"{r['continued_as_new']} continue-as-new)" for r in results)
        + f". Steps 1-20 are faster for a reason outside Rewind: the bare Temporal workflow's steps 21-40 take "
        f"{warm:.1f}x its steps 1-20 ({bare['first_s'] * 1000:.0f} → {bare['early_s'] * 1000:.0f} ms) — the dev "
        "server hands the first workflow tasks of a run over faster.")
    def draw(axes):  # type: ignore[no-untyped-def]
        for r in results:
            xs, ys = zip(*r["curve"])
            axes[0].plot(xs, [y * 1000 for y in ys], label=r["label"], linewidth=0.8)
        axes[0].set(title=f"step time along a {steps}-step run", xlabel="step", ylabel="ms")

    save_figure(sec, "long_run", suite.quick, draw)
    return sec
