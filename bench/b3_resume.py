"""3. Resume after a worker crash (SIGKILL), with the timeouts the project ships.

Each trial: worker A (`python worker.py --tools bench.tools`, a subprocess
configured by environment only; REWIND_STICKY_TIMEOUT_S=2, the default)
starts a run and is in the middle of a call when standby worker B joins the
task queue; then A is SIGKILLed. Two kinds of call:
  tool   `nap` (heartbeat 5 s, the @tool default): its first attempt sleeps
         60 s, a retry 0.2 s
  model  `call_llm` (heartbeat 5 s, LlmTuning's default): the scripted model
         holds the first request until the kill, then answers at once
Measured from the kill: (1) the interrupted call starts again (on B), read
from the tool's own log / the model server's request arrivals; (2) the run
makes progress past the interrupted step: the next step's model request
arrives. Baseline: the heartbeat timeout (5 s).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType, TimeoutType

from bench.common import Section, WorkerProcess, history_events, log, median, turn_of, wait_polling

HEARTBEAT_S = 5.0  # ToolSpec.heartbeat_s and LlmTuning.heartbeat_s defaults
STICKY_S = 2.0  # Settings.sticky_timeout_s default
WAIT_S = 120.0


def _events(path: Path, label: str) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            e = json.loads(line)
            if e.get("label") == label:
                out.append(e)
    return out


async def _until(what: str, check, timeout_s: float = WAIT_S):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        await asyncio.sleep(0.02)
    raise TimeoutError(f"resume: {what} did not happen within {timeout_s:.0f} s")


async def _trial(suite, client, settings, model, kind: str, index: int) -> dict:  # type: ignore[no-untyped-def]
    from bench.common import start_agent

    events = suite.tmp / "resume-events.jsonl"
    extra = {"BENCH_EVENTS": str(events)}
    label = f"{kind}-{index}-{uuid.uuid4().hex[:4]}"
    name = f"resume-{label}"
    if kind == "tool":
        turns = [{"tool_calls": [{"name": "nap", "arguments": {"label": label, "seconds": 60, "retry_seconds": 0.2}}]},
                 {"tool_calls": [{"name": "blob", "arguments": {"index": 1, "size": 256}}]}, {"content": "done"}]
    else:
        turns = [{"tool_calls": [{"name": "blob", "arguments": {"index": 1, "size": 256}}]}, {"content": "done"}]
        model.hold_first(f"script:{name}", 0)
    model.add_script(name, turns)
    logs = suite.tmp / "resume-logs"
    trial_started = time.monotonic()
    phases: dict[str, float] = {}

    def mark(name: str) -> None:
        phases[name] = round(time.monotonic() - trial_started, 2)

    a = WorkerProcess(settings, model, logs / f"{label}-A.log", extra)
    b = None
    try:
        await wait_polling(client, settings.task_queue, a)
        mark("worker A polling")
        handle = await start_agent(client, settings, f"script:{name}", 3)

        def requests(turn: int) -> list[float]:
            return [t for t, body in list(model.arrivals) if body.get("model") == f"script:{name}" and turn_of(body) == turn]

        if kind == "tool":
            first = (await _until("the tool call", lambda: _events(events, label)))[0]
            assert first["pid"] == a.pid, "the tool ran on an unexpected worker"
        else:
            await _until("the model call", lambda: requests(0))
        mark("call in flight on A")
        b = WorkerProcess(settings, model, logs / f"{label}-B.log", extra)
        await wait_polling(client, settings.task_queue, b)
        mark("worker B polling")
        await asyncio.sleep(0.5)
        history = await history_events(client, handle.id)
        wft = [e.workflow_task_started_event_attributes.identity for e in history
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED]
        killed_at = time.time()
        a.kill()
        model.release()
        mark("killed A")
        if kind == "tool":
            retry = await _until("the tool's retry", lambda: [e for e in _events(events, label) if e["attempt"] > 1])
            retry_at, retry_pid = retry[0]["at"], retry[0]["pid"]
            progress_at = (await _until("the next step", lambda: requests(1)))[0]
        else:
            retry_at = (await _until("the model call's retry", lambda: requests(0)[1:]))[0]
            retry_pid = None
            progress_at = (await _until("the next step", lambda: requests(1)))[0]
        mark("next step started")
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        mark("run completed")
        assert result.status.state == "completed", result.status
        history = await history_events(client, handle.id)
        after = [e for e in history if e.event_time.ToDatetime().timestamp() > killed_at]
        timeouts = [e.activity_task_started_event_attributes.last_failure.timeout_failure_info.timeout_type
                    for e in after if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                    and e.activity_task_started_event_attributes.attempt > 1]
        # When the retried call completed, and when a worker next started a workflow task (the sticky wait).
        done = [e.event_time.ToDatetime().timestamp() for e in after
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED]
        wft_after = [e for e in after if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED]
        sticky_wait = (wft_after[0].event_time.ToDatetime().timestamp() - done[0]) if done and wft_after else None
        return {
            "kind": kind, "retry_s": retry_at - killed_at, "progress_s": progress_at - killed_at,
            "after_retry_s": progress_at - retry_at, "trial_s": time.monotonic() - trial_started, "phases": phases,
            "retry_on_standby": retry_pid == b.pid if retry_pid is not None else None,
            "workflow_was_on_killed_worker": bool(wft) and wft[-1].startswith(f"{a.pid}@"),
            "heartbeat_timeouts": sum(1 for t in timeouts if t == TimeoutType.TIMEOUT_TYPE_HEARTBEAT),
            "sticky_wait_s": sticky_wait,
        }
    finally:
        stopping = time.monotonic()
        a.stop()
        if b is not None:
            b.stop()
        log(f"resume: trial took {time.monotonic() - trial_started:.1f} s "
            f"(stopping the workers {time.monotonic() - stopping:.1f} s; {phases})")


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    trials = 1 if suite.quick else 3
    sec = Section("resume", "3. Resume after a worker crash",
                  f"SIGKILL of the worker process in the middle of a call, a standby worker already polling; "
                  f"{trials} trial(s) per kind of call. Shipped settings: tool heartbeat {HEARTBEAT_S:g} s, model-call "
                  f"heartbeat {HEARTBEAT_S:g} s, sticky schedule-to-start timeout {STICKY_S:g} s, retry after 1 s. "
                  "The killed call's first attempt lasts until the kill (tool: a 60 s sleep; model: the scripted server holds "
                  "the request); its retry is short (tool: 0.2 s; model: answered at once), so the times below are "
                  "Temporal's, not the call's.")
    server = suite.start_temporal("resume")
    client = await suite.client(server)
    model = suite.model(0)
    settings = suite.settings(server, "resume", sticky_timeout_s=STICKY_S)
    results: dict[str, list[dict]] = {"tool": [], "model": []}
    for i in range(trials):
        for kind in ("tool", "model"):
            log(f"resume: kill during a {kind} call, trial {i + 1}/{trials}")
            results[kind].append(await _trial(suite, client, settings, model, kind, i))
    suite.stop_model(model)
    suite.stop_temporal(server)
    sec.data = results
    rows = []
    for kind, rs in results.items():
        retry = median([r["retry_s"] for r in rs])
        prog = median([r["progress_s"] for r in rs])
        rows.append([f"kill during a {kind} call", retry, max(r["retry_s"] for r in rs), f"**{retry / HEARTBEAT_S:.2f}x**",
                     prog, max(r["progress_s"] for r in rs), f"**{prog / HEARTBEAT_S:.2f}x**",
                     ", ".join(f"{r['sticky_wait_s']:.2f}" for r in rs if r["sticky_wait_s"] is not None),
                     f"{sum(r['heartbeat_timeouts'] for r in rs)}/{len(rs)}",
                     f"{sum(bool(r['workflow_was_on_killed_worker']) for r in rs)}/{len(rs)}"])
        sec.headline.append(["3 resume", f"SIGKILL during a {kind} call → call restarted on the standby, / heartbeat timeout",
                             f"{retry:.2f} s / {HEARTBEAT_S:g} s", f"**{retry / HEARTBEAT_S:.2f}x**", "–", "–"])
        target = HEARTBEAT_S + 2.0
        sec.headline.append(["3 resume", f"SIGKILL during a {kind} call → next step started, / heartbeat timeout",
                             f"{prog:.2f} s / {HEARTBEAT_S:g} s", f"**{prog / HEARTBEAT_S:.2f}x**",
                             f"≤ heartbeat + 2 s ({target:g} s)", "met" if prog <= target else "**not met**"])
    sec.table("Seconds from SIGKILL (median and max over trials)",
              ["", "call restarted (median)", "max", "/ heartbeat", "next step started (median)", "max", "/ heartbeat",
               "per trial: wait for a workflow task after the retried call completed",
               "retries caused by a heartbeat timeout", "workflow was cached on the killed worker"], rows)
    for kind, rs in results.items():
        retries = sorted(r["retry_s"] for r in rs)
        waited = [r for r in rs if (r["sticky_wait_s"] or 0) > STICKY_S * 0.8]
        quick = [r for r in rs if r not in waited]
        span = f"{retries[0]:.1f} s" if len(rs) == 1 else f"{retries[0]:.1f}–{retries[-1]:.1f} s"
        text = (f"{kind} call: the interrupted call ran again {span} after the kill "
                f"({median(retries) / HEARTBEAT_S:.2f}x the {HEARTBEAT_S:g} s heartbeat timeout at the median); the "
                f"retry's recorded cause is a heartbeat timeout in {sum(r['heartbeat_timeouts'] for r in rs)} of "
                f"{len(rs)} trial(s). Expected: the heartbeat timer runs {HEARTBEAT_S:g} s from the last heartbeat the "
                "server received, and the SDK sends heartbeats at most every 0.8 × the timeout (4 s), so the timer "
                "fires 1–5 s after the kill; the retry follows after the 1 s initial retry interval (2–6 s after the "
                "kill) and the standby picks it up at once. ")
        if waited:
            text += (f"In {len(waited)} of {len(rs)} trial(s) the run moved on "
                     f"{median([r['after_retry_s'] for r in waited]):.1f} s after the retry started: the workflow "
                     f"task that follows the retried call waited {median([r['sticky_wait_s'] for r in waited]):.1f} s "
                     f"on the dead worker's sticky queue (REWIND_STICKY_TIMEOUT_S={STICKY_S:g}) before the standby "
                     "took the run over and replayed its history. ")
        if quick:
            text += (f"In {len(quick)} of {len(rs)} trial(s) that task went to the standby at once "
                     f"({median([r['after_retry_s'] for r in quick]):.2f} s after the retry started): the retry, "
                     "started because its previous attempt timed out, had the server forget the run's sticky queue "
                     "(activities/liveness/takeover.py). ")
        sec.verdicts.append(text)
    worst = max(r["progress_s"] for rs in results.values() for r in rs)
    sec.notes.append(
        f"Worst case here: {worst:.1f} s from the kill to the next step. The parts: the heartbeat timeout "
        f"({HEARTBEAT_S:g} s from the last beat the server received, which is up to 4 s before the kill), the 1 s "
        "initial retry interval, the retried call, then one workflow task on the standby. The workflow task no "
        f"longer waits out the dead worker's sticky queue (REWIND_STICKY_TIMEOUT_S={STICKY_S:g}), which cost "
        f"{STICKY_S:g} s here before: a retry whose previous attempt timed out resets the run's stickiness, so the "
        "task goes to the shared queue. A retry after an ordinary error keeps it (its worker is alive).")
    return sec
