"""4. Fork latency, and what a fork re-executes.

`checkpoint_bridge.branching.fork(...)` from the last step N of an N-step run
(the storage benchmark's runs), with a model script that continues the
conversation: from the call to (a) the new branch's status query showing a
step > N and (b) its first new checkpoint (step N+1) in the store. Then: model
requests the scripted server received for turns < N after the fork (a
re-executed model call would be one) and tool activities of the fork's
history for steps <= N (target: zero for both). Baseline: the median time of
one ordinary step of the same run. The fork's phases are then timed one by
one on a fresh store (the same calls `fork` makes) to show where the time goes.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from temporalio.api.enums.v1 import EventType

from bench.b2_storage import long_run
from bench.common import Section, history_events, log, median, rewind_worker, turn_of
from checkpoint_bridge.branching import seed_from, source_input
from rewind import fork
from checkpoint_bridge.lineage import resolve_step
from checkpoint_bridge.stores import open_object_store
from checkpoint_bridge.store import open_checkpoint_store
from activities.transcript import TranscriptStore
from rewind.client import workflow_id_for
from workflows.contracts import AgentStatus, ToolRequest


async def _fork_once(suite, client, run: dict, model) -> dict:  # type: ignore[no-untyped-def]
    n, settings = run["steps"], run["settings"]
    name = f"fork{n}-{uuid.uuid4().hex[:6]}"
    # Same turns up to N (a re-executed call would get its old answer), then one more tool step and an answer.
    model.add_script(name, run["turns"] + [
        {"tool_calls": [{"name": "blob", "arguments": {"index": 10_000 + n, "size": 2048}}]},
        {"content": "forked and finished"},
    ])
    branch = f"fork-{uuid.uuid4().hex[:6]}"
    times: dict[str, float] = {}
    arrivals_before = len(model.arrivals)
    async with rewind_worker(client, settings, model), open_checkpoint_store(settings.store_url) as store:
        t0 = time.perf_counter()
        result = await fork(client, settings, store, run["run_id"], n, branch=branch, model=f"script:{name}")
        times["fork_call"] = time.perf_counter() - t0
        handle = result.handle
        async with open_checkpoint_store(settings.store_url) as watcher:
            while "status" not in times or "checkpoint" not in times:
                now = time.perf_counter() - t0
                if now > 300:
                    raise TimeoutError(f"fork of the {n}-step run made no new step in 300 s: {times}")
                if "status" not in times:
                    try:
                        status = await handle.query("status", result_type=AgentStatus)
                        if status.step > n:
                            times["status"] = time.perf_counter() - t0
                    except Exception:
                        pass
                if "checkpoint" not in times and n + 1 in await watcher.existing_steps(run["run_id"], branch):
                    times["checkpoint"] = time.perf_counter() - t0
                await asyncio.sleep(0.01)
        final = await handle.result()
    assert final.status.state == "completed", final.status
    new = model.arrivals[arrivals_before:]
    mine = [turn_of(body) for _, body in new if body.get("model") == f"script:{name}"]
    events = await history_events(client, workflow_id_for(run["run_id"], branch))
    tool_steps = []
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = e.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "run_tool":
                (req,) = await client.data_converter.decode(attrs.input.payloads, [ToolRequest])
                tool_steps.append(req.step)
    return {
        **times,
        "model_requests_reexecuted": sum(1 for t in mine if t < n),
        "model_requests_new": sum(1 for t in mine if t >= n),
        "tool_calls_reexecuted": sum(1 for s in tool_steps if s <= n),
        "tool_calls_new": sum(1 for s in tool_steps if s > n),
        "branch": branch,
    }


async def _phases(client, run: dict) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The calls fork() makes, timed one by one on a fresh store instance."""
    n, settings = run["steps"], run["settings"]
    out: dict[str, float] = {}
    async with open_checkpoint_store(settings.store_url) as store:
        t = time.perf_counter()
        point = await resolve_step(store, run["run_id"], "main", n)
        out["resolve_step (the step on the branch itself: one listing, one read)"] = time.perf_counter() - t
        t = time.perf_counter()
        cp = await store.load(point.checkpoint_id)
        out["load the checkpoint (delta chain, cold)"] = time.perf_counter() - t
    t = time.perf_counter()
    await source_input(client, workflow_id_for(run["run_id"], "main"))
    out["source_input (the start event of the first run of its chain)"] = time.perf_counter() - t
    objects = open_object_store(settings.payload_url)
    t = time.perf_counter()
    await seed_from(cp, TranscriptStore(objects), None)
    out["seed_from (write the conversation as one transcript segment)"] = time.perf_counter() - t
    await objects.aclose()
    return out


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    lengths = [50] if suite.quick else [50, 500]
    sec = Section("fork", "4. Fork latency",
                  "`checkpoint_bridge.branching.fork(...)` from the last step N of the storage benchmark's N-step "
                  "runs (2 KB tool outputs), on an in-process worker, with a model script that continues the "
                  "conversation. Re-executions are counted at the scripted model server (requests for a turn < N) "
                  "and in the fork's history (run_tool activities of a step ≤ N).")
    server = suite.shared_temporal()
    client = await suite.client(server)
    model = suite.cache.get("long_model") or suite.model(0)
    suite.cache["long_model"] = model
    runs = suite.cache.setdefault("long_runs", {})
    rows, phase_rows, data = [], [], {}
    for n in lengths:
        if n not in runs:
            log(f"fork: making the {n}-step run")
            settings = next((r["settings"] for r in runs.values()), None) or suite.settings(server, "long")
            async with rewind_worker(client, settings, model):
                await long_run(suite, client, settings, model, n)
        run = runs[n]
        log(f"fork: from step {n}")
        f = await _fork_once(suite, client, run, model)
        phases = await _phases(client, run)
        step = median(run["step_s"][:-1])
        data[n] = {**f, "ordinary_step_s": step, "phases": phases}
        rows.append([n, f["fork_call"] * 1000, f["status"] * 1000, f["checkpoint"] * 1000, step * 1000,
                     f"**{f['checkpoint'] / step:.1f}x**", f["model_requests_reexecuted"], f["tool_calls_reexecuted"],
                     f"{f['model_requests_new']} / {f['tool_calls_new']}"])
        for label, secs in phases.items():
            phase_rows.append([n, label, secs * 1000])
    sec.data = data
    sec.table("Fork latency (ms; ratio = to first new checkpoint / one ordinary step)",
              ["run steps N", "fork() returns", "status step > N", "first new checkpoint (N+1)", "ordinary step",
               "ratio", "model calls re-executed", "tool calls re-executed", "new model / tool calls"], rows)
    sec.table("Phases of fork(), timed one by one on a fresh store (ms)", ["N", "phase", "ms"], phase_rows)
    zero = all(d["model_requests_reexecuted"] == 0 and d["tool_calls_reexecuted"] == 0 for d in data.values())
    for n, d in data.items():
        sec.headline.append(["4 fork", f"fork at step {n} → first new checkpoint, / one ordinary step",
                             f"{d['checkpoint'] * 1000:.0f} ms / {d['ordinary_step_s'] * 1000:.0f} ms",
                             f"**{d['checkpoint'] / d['ordinary_step_s']:.1f}x**", "–", "–"])
    sec.headline.append(["4 fork", "model + tool calls re-executed by the fork(s)",
                         ", ".join(f"{d['model_requests_reexecuted']} + {d['tool_calls_reexecuted']} at N={n}" for n, d in data.items()),
                         "–", "0", "met" if zero else "**not met**"])
    sec.verdicts.append(
        f"Zero re-execution: **{'met' if zero else 'not met'}** — "
        + "; ".join(f"N={n}: {d['model_requests_reexecuted']} model requests for turns < N and "
                    f"{d['tool_calls_reexecuted']} tool activities for steps ≤ N; the branch made "
                    f"{d['model_requests_new']} new model calls and {d['tool_calls_new']} new tool calls"
                    for n, d in data.items()) + ".")
    for n, d in data.items():
        ph = d["phases"]
        top = max(ph, key=ph.get)
        after = d["checkpoint"] - d["fork_call"]
        sec.verdicts.append(
            f"N={n}: {d['checkpoint'] * 1000:.0f} ms to the first new checkpoint = {d['fork_call'] * 1000:.0f} ms in "
            f"fork() itself + {after * 1000:.0f} ms for the new workflow's first step and its mirror "
            f"(an ordinary step takes {d['ordinary_step_s'] * 1000:.0f} ms; the first step also describes the tools "
            f"and writes a full snapshot, as every branch's first checkpoint is one). Inside fork(), the largest "
            f"phase is {top.split(' (')[0]} ({ph[top] * 1000:.0f} ms).")
    return sec
