"""4. Fork latency, and what a fork re-executes.

`checkpoint_bridge.branches.branching.fork(...)` from the last step N of an N-step run
(the storage benchmark's runs), with a model script that continues the
conversation: from the call to (a) the new branch's status query showing a
step > N and (b) its first new checkpoint (step N+1) in the store, each
watched by its own poller; (b) is timed by its object's file where the store is
a folder (the benchmark's), since the poller shares the event loop of the
in-process worker that writes it and only looks once that worker lets go. Then: model requests the scripted server received
for turns < N after the fork (a re-executed model call would be one) and tool
activities of the fork's history for steps <= N (target: zero for both).
Baseline: the median time of one ordinary step of the same run. Full mode
forks each run three times and reports medians (one fork is at the mercy of a
loaded machine). Where the time goes: the new workflow's first step from its
history (event times against the call to fork), and fork()'s own phases timed
one by one on a fresh store (the same calls `fork` makes).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench.b2_storage import long_run
from activities.tools.registry import ToolRegistry
from bench.bare_workflow import BareActivities, BareAgentWorkflow
from bench.common import TOOLS_MODULE, Section, history_events, log, median, rewind_worker, turn_of
from checkpoint_bridge.branches.branching import checkpoint_at, seed_from, source_of
from rewind import fork
from checkpoint_bridge.checkpoints.lineage import resolve_step
from checkpoint_bridge.document.envelope import decode
from checkpoint_bridge.document.layout import step_key
from checkpoint_bridge.stores import open_object_store
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from activities.model.transcript import TranscriptStore
from rewind.client import workflow_id_for
from workflows.vocabulary.contracts import AgentStatus, ToolRequest
from workflows.vocabulary.ids import checkpoint_id


def _continuing_script(model, run: dict, prefix: str) -> str:  # type: ignore[no-untyped-def]
    """A script with the run's turns up to N (a re-executed call would get its old answer),
    then one more tool step and an answer; its name."""
    n = run["steps"]
    name = f"{prefix}{n}-{uuid.uuid4().hex[:6]}"
    model.add_script(name, run["turns"] + [
        {"tool_calls": [{"name": "blob", "arguments": {"index": 10_000 + n, "size": 2048}}]},
        {"content": "forked and finished"},
    ])
    return name


async def _fork_once(suite, client, run: dict, model) -> dict:  # type: ignore[no-untyped-def]
    n, settings = run["steps"], run["settings"]
    name = _continuing_script(model, run, "fork")
    branch = f"fork-{uuid.uuid4().hex[:6]}"
    times: dict[str, float] = {}
    arrivals_before = len(model.arrivals)
    async with rewind_worker(client, settings, model), open_checkpoint_store(settings.store_url) as store:
        wall0, t0 = time.time(), time.perf_counter()
        result = await fork(client, settings, store, run["run_id"], n, branch=branch, model=f"script:{name}")
        times["fork_call"] = time.perf_counter() - t0
        handle = result.handle

        async def watch_status() -> None:
            while True:
                try:
                    if (await handle.query("status", result_type=AgentStatus)).step > n:
                        times["status"] = time.perf_counter() - t0
                        return
                except Exception:
                    pass  # not started yet
                # Each query is a workflow task on the worker that runs the branch: no faster
                # than before, so as not to slow down the step being measured.
                await asyncio.sleep(0.01)

        async def watch_checkpoint() -> None:
            async with open_checkpoint_store(settings.store_url) as watcher:
                while n + 1 not in await watcher.existing_steps(run["run_id"], branch):
                    await asyncio.sleep(0.005)
            times["checkpoint"] = time.perf_counter() - t0
            written = _written_at(settings.store_url, run["run_id"], result.storage_branch, n + 1)
            if written is not None:
                times["checkpoint_written"] = written - wall0

        # Two pollers, so that neither figure waits for the other's round trip.
        try:
            await asyncio.wait_for(asyncio.gather(watch_status(), watch_checkpoint()), 300)
        except TimeoutError:
            raise TimeoutError(f"fork of the {n}-step run made no new step in 300 s: {times}") from None
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
        "first_step": _first_step(events, wall0),
        "model_requests_reexecuted": sum(1 for t in mine if t < n),
        "model_requests_new": sum(1 for t in mine if t >= n),
        "tool_calls_reexecuted": sum(1 for s in tool_steps if s <= n),
        "tool_calls_new": sum(1 for s in tool_steps if s > n),
        "branch": branch,
    }


def _written_at(store_url: str, run_id: str, branch: str, step: int) -> float | None:
    """When a folder store's object of `step` was written (its file's modification time, wall
    clock); None for other stores. The poller that sees it shares the event loop of the
    in-process worker that writes it, so it can only look once the model call that wrote it lets
    go of the loop: the file's own time says when the checkpoint was there for a reader."""
    if not store_url.startswith("file://"):
        return None
    path = Path(store_url.removeprefix("file://")).expanduser() / step_key(run_id, branch, step)
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None


# The new workflow's first step, as its history tells it: (label, event, activity), in order.
_MARKS = [
    ("workflow started", EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, None),
    ("its first workflow task done", EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, None),
    ("first model call scheduled", EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "call_llm"),
    ("first model call done", EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, "call_llm"),
    ("first tool call done", EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, "run_tool"),
    # Step N+1's checkpoint rides on the next model call, which writes it as it starts.
    ("next model call scheduled (it writes checkpoint N+1)", EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, "call_llm#2"),
]


def _first_step(events: list, wall0: float, marks: list | None = None) -> dict[str, float]:  # type: ignore[type-arg]
    """Seconds from the call to fork() to each of `marks` (_MARKS unless told; the first of each,
    or the n-th of an activity named `name#n`; same machine's clock)."""
    names: dict[int, str] = {}
    seen: dict[tuple[int, str], int] = {}
    out: dict[str, float] = {}
    for e in events:
        activity = None
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity = names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            activity = names.get(e.activity_task_completed_event_attributes.scheduled_event_id)
        if activity is not None:
            seen[(e.event_type, activity)] = seen.get((e.event_type, activity), 0) + 1
        for label, kind, name in marks or _MARKS:
            if label in out or e.event_type != kind:
                continue
            wanted, _, nth = (name or "").partition("#")
            if (activity is None) if name is None else (wanted == activity and seen[(kind, wanted)] == int(nth or 1)):
                out[label] = e.event_time.ToNanoseconds() / 1e9 - wall0
    return out


async def _phases(client, run: dict) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The calls fork() makes, timed one by one on a fresh store instance (fork itself
    makes checkpoint_at and source_of at once, with the check that the name is free)."""
    n, settings = run["steps"], run["settings"]
    out: dict[str, float] = {}
    async with open_checkpoint_store(settings.store_url) as store:
        t = time.perf_counter()
        point = await resolve_step(store, run["run_id"], "main", n)
        out["resolve_step (the step on the branch itself: one listing, one read)"] = time.perf_counter() - t
        t = time.perf_counter()
        cp = await checkpoint_at(store, point)
        out["checkpoint_at (delta chain, cold; validated, not copied)"] = time.perf_counter() - t
    t = time.perf_counter()
    await source_of(client, workflow_id_for(run["run_id"], "main"))
    out["source_of (the first events of its chain: start input, tool specs)"] = time.perf_counter() - t
    objects = open_object_store(settings.payload_url)
    t = time.perf_counter()
    await seed_from(cp, TranscriptStore(objects), None)
    out["seed_from (write the conversation as one transcript segment)"] = time.perf_counter() - t
    await objects.aclose()
    return out


async def _floor_once(suite, server, run: dict, model) -> dict:  # type: ignore[no-untyped-def]
    """The floor of a fork: what a fork at step N must do at the least, with no Rewind code.
    Read the fork point as one stored object (a plain JSON file of the whole checkpoint) and
    parse it, write its conversation as one file, start the bare workflow (b) on it
    (`messages_file`) on an in-process worker of plain temporalio started for it, and run its
    first step: the model call that reads that file, the tool call, and a no-op third activity
    where Rewind writes the step's checkpoint. Seconds from the start to that activity done
    (from history), and to each part."""
    name = _continuing_script(model, run, "floor")
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    return await fork_floor(suite, server, model, run["settings"].store_url,
                            checkpoint_id(run["run_id"], "main", run["steps"]),
                            {"model": f"script:{name}", "tools": [s.openai_schema() for s in registry.specs()],
                             "max_steps": 1, "noop_per_step": True})


first_step = _first_step


async def fork_floor(suite, server, model, store_url: str, point_id: str, workflow_input: dict,  # type: ignore[no-untyped-def]
                     conversation: bool = True) -> dict:
    """A fork with no Rewind code, from checkpoint `point_id` stored as one JSON file: read and
    parse it, write its conversation as one file (`conversation`: the bare workflow's model
    calls read it), start bench.bare_workflow on `workflow_input` on an in-process worker of
    plain temporalio, and wait for its last no-op activity (where Rewind writes the checkpoint).
    Seconds from the start to each part (event times from history)."""
    folder = suite.tmp / f"floor-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    point = folder / "checkpoint.json"
    async with open_checkpoint_store(store_url) as store:
        point.write_text((await store.load(point_id)).model_dump_json())
    client = await Client.connect(server.address)
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    acts = BareActivities(model.base_url, registry)
    queue = f"bench-floor-{uuid.uuid4().hex[:6]}"
    wid = f"floor-{uuid.uuid4().hex[:10]}"
    async with Worker(client, task_queue=queue, workflows=[BareAgentWorkflow],
                      activities=[acts.bare_llm, acts.bare_tool, acts.bare_noop],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        wall0, t0 = time.time(), time.perf_counter()
        doc = json.loads(point.read_bytes())
        read = time.perf_counter() - t0
        extra: dict = {}
        if conversation:
            written_to = folder / "conversation.json"
            written_to.write_bytes(json.dumps(doc["messages"]).encode())
            extra["messages_file"] = str(written_to)
        written = time.perf_counter() - t0
        handle = await client.start_workflow("BareAgentWorkflow", {**workflow_input, **extra}, id=wid, task_queue=queue)
        started = time.perf_counter() - t0
        await handle.result()
    events = await history_events(client, wid)
    noop = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED][-1]
    return {"read": read, "written": written, "started": started,
            "stored": noop.event_time.ToNanoseconds() / 1e9 - wall0}


# Forks per run length: medians of three in full mode (one fork is at the mercy of a loaded machine).
REPEAT_FULL = 3


async def _stored_kind(settings, run_id: str, branch: str, step: int) -> str:  # type: ignore[no-untyped-def]
    """How a checkpoint's object is stored: "delta" (of its parent) or "snapshot"."""
    async with open_checkpoint_store(settings.store_url) as store:
        key = step_key(run_id, branch, step)
        return decode(await store.objects.get(key), key).kind


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    lengths = [50] if suite.quick else [50, 500]
    repeat = 1 if suite.quick else REPEAT_FULL
    sec = Section("fork", "4. Fork latency",
                  "`checkpoint_bridge.branches.branching.fork(...)` from the last step N of the storage benchmark's N-step "
                  "runs (2 KB tool outputs), on an in-process worker started for the fork, with a model script that "
                  "continues the conversation"
                  + (f", {repeat} forks per run (medians)" if repeat > 1 else "") + ". Re-executions are counted at "
                  "the scripted model server (requests for a turn < N) and in the fork's history (run_tool "
                  "activities of a step ≤ N).")
    server = suite.shared_temporal()
    client = await suite.client(server)
    model = suite.cache.get("long_model") or suite.model(0)
    suite.cache["long_model"] = model
    runs = suite.cache.setdefault("long_runs", {})
    rows, phase_rows, step_rows, floor_rows, data = [], [], [], [], {}
    for n in lengths:
        if n not in runs:
            log(f"fork: making the {n}-step run")
            settings = next((r["settings"] for r in runs.values()), None) or suite.settings(server, "long")
            async with rewind_worker(client, settings, model):
                await long_run(suite, client, settings, model, n)
        run = runs[n]
        log(f"fork: from step {n}" + (f", {repeat} times" if repeat > 1 else ""))
        forks = [await _fork_once(suite, client, run, model) for _ in range(repeat)]
        floors = [await _floor_once(suite, server, run, model) for _ in range(repeat)]
        floor = {key: median([x[key] for x in floors]) for key in floors[0]}
        phases = await _phases(client, run)
        step = median(run["step_s"][:-1])
        near = median(run["step_s"][-21:-1])  # the run's last steps, the size of the fork's
        f = {key: median([x[key] for x in forks]) for key in ("fork_call", "status", "checkpoint")}
        written = [x["checkpoint_written"] for x in forks if "checkpoint_written" in x]
        f["checkpoint_written"] = median(written) if len(written) == len(forks) else None
        # The first new checkpoint: when its object was written where the store tells (a folder),
        # else when the poller saw it.
        f["first_checkpoint"] = f["checkpoint_written"] if f["checkpoint_written"] is not None else f["checkpoint"]
        f.update({key: sum(x[key] for x in forks) for key in (
            "model_requests_reexecuted", "model_requests_new", "tool_calls_reexecuted", "tool_calls_new")})
        first_step = {label: median([x["first_step"][label] for x in forks if label in x["first_step"]])
                      for label, _, _ in _MARKS}
        kind = await _stored_kind(run["settings"], run["run_id"], forks[0]["branch"], n + 1)
        data[n] = {**f, "ordinary_step_s": step, "last_steps_s": near, "phases": phases, "first_step": first_step,
                   "first_checkpoint_stored_as": kind, "forks": forks, "floor": floor}
        rows.append([n, f["fork_call"] * 1000, f["status"] * 1000, f["first_checkpoint"] * 1000,
                     f["checkpoint"] * 1000, step * 1000, f"**{f['first_checkpoint'] / step:.1f}x**", near * 1000, f["model_requests_reexecuted"],
                     f["tool_calls_reexecuted"], f"{f['model_requests_new']} / {f['tool_calls_new']}"])
        floor_rows.append([n, floor["read"] * 1000, (floor["written"] - floor["read"]) * 1000,
                           (floor["started"] - floor["written"]) * 1000, floor["stored"] * 1000,
                           f["first_checkpoint"] * 1000, step * 1000, f"**{floor['stored'] / step:.1f}x**",
                           f"**{f['first_checkpoint'] / floor['stored']:.2f}x**"])
        for label, secs in phases.items():
            phase_rows.append([n, label, secs * 1000])
        step_rows.append([n, f["fork_call"] * 1000] + [None if first_step[label] is None else first_step[label] * 1000
                                                       for label, _, _ in _MARKS]
                         + [None if f["checkpoint_written"] is None else f["checkpoint_written"] * 1000,
                            f["checkpoint"] * 1000])
    sec.data = data
    sec.table("Fork latency (ms; ratio = to first new checkpoint / one ordinary step; the checkpoint's time is its "
              "file's, written by the worker; the poller that sees it shares the in-process worker's event loop)",
              ["run steps N", "fork() returns", "status step > N", "first new checkpoint (N+1) written",
               "seen by a poller", "ordinary step",
               "ratio", "its last 20 steps", "model calls re-executed", "tool calls re-executed",
               "new model / tool calls"], rows)
    sec.table("The branch's first step, from its history (ms after the call to fork())",
              ["N", "fork() returns"] + [label for label, _, _ in _MARKS]
              + ["checkpoint N+1 written (its file's time)", "checkpoint N+1 seen"], step_rows)
    sec.table("Phases of fork(), timed one by one on a fresh store (ms)", ["N", "phase", "ms"], phase_rows)
    sec.table("The floor of a fork, no Rewind code (ms after its start): read and parse the fork point stored as "
              "one JSON object, write its conversation as one file, start the bare workflow (b) on it, and run its "
              "first step (the model call reads the file; tool call; a no-op activity where Rewind writes the "
              "checkpoint), on an in-process worker of plain temporalio",
              ["N", "read + parse the fork point", "write the conversation", "start the workflow",
               "first step's no-op 'checkpoint' done", "Rewind: first new checkpoint", "ordinary step",
               "floor / ordinary step", "Rewind / floor"], floor_rows)
    zero = all(d["model_requests_reexecuted"] == 0 and d["tool_calls_reexecuted"] == 0 for d in data.values())
    for n, d in data.items():
        sec.headline.append(["4 fork", f"fork at step {n} → first new checkpoint, / one ordinary step",
                             f"{d['first_checkpoint'] * 1000:.0f} ms / {d['ordinary_step_s'] * 1000:.0f} ms",
                             f"**{d['first_checkpoint'] / d['ordinary_step_s']:.1f}x**", "≤ 2x",
                             "met" if d["first_checkpoint"] <= 2 * d["ordinary_step_s"] else "**not met**"])
    for n, d in data.items():
        sec.headline.append(["4 fork", f"floor (no Rewind code): fork at step {n} → first step stored, / one ordinary step",
                             f"{d['floor']['stored'] * 1000:.0f} ms / {d['ordinary_step_s'] * 1000:.0f} ms",
                             f"**{d['floor']['stored'] / d['ordinary_step_s']:.1f}x**", "–", "–"])
    sec.headline.append(["4 fork", "model + tool calls re-executed by the fork(s)",
                         ", ".join(f"{d['model_requests_reexecuted']} + {d['tool_calls_reexecuted']} at N={n}" for n, d in data.items()),
                         "–", "0", "met" if zero else "**not met**"])
    sec.verdicts.append(
        f"Zero re-execution: **{'met' if zero else 'not met'}** — "
        + "; ".join(f"N={n}: {d['model_requests_reexecuted']} model requests for turns < N and "
                    f"{d['tool_calls_reexecuted']} tool activities for steps ≤ N; the branch"
                    + (f"es ({len(d['forks'])})" if len(d["forks"]) > 1 else "")
                    + f" made {d['model_requests_new']} new model calls and {d['tool_calls_new']} new tool calls"
                    for n, d in data.items()) + ".")
    for n, d in data.items():
        ph, fs = d["phases"], d["first_step"]
        top = max(ph, key=ph.get)
        after = d["first_checkpoint"] - d["fork_call"]
        model_call = (fs["first model call done"] - fs["first model call scheduled"]
                      if fs["first model call done"] is not None and fs["first model call scheduled"] is not None else None)
        sec.verdicts.append(
            f"N={n}: {d['first_checkpoint'] * 1000:.0f} ms to the first new checkpoint = {d['fork_call'] * 1000:.0f} ms in "
            f"fork() itself + {after * 1000:.0f} ms for the new workflow's first step and its checkpoint "
            f"(an ordinary step takes {d['ordinary_step_s'] * 1000:.0f} ms, one of the run's last 20 "
            f"{d['last_steps_s'] * 1000:.0f} ms"
            + (f"; the branch's first model call {model_call * 1000:.0f} ms" if model_call is not None else "")
            + f"; its first checkpoint is stored as a {d['first_checkpoint_stored_as']}). Inside fork(), the largest "
            f"phase is {top.split(' (')[0]} ({ph[top] * 1000:.0f} ms).")
        fl = d["floor"]
        sec.verdicts.append(
            f"N={n}, the floor: with no Rewind code at all, reading the fork point ({fl['read'] * 1000:.0f} ms), "
            f"writing its conversation ({(fl['written'] - fl['read']) * 1000:.0f} ms), starting a workflow "
            f"({(fl['started'] - fl['written']) * 1000:.0f} ms) and running one step with a third activity where "
            f"the checkpoint is written took {fl['stored'] * 1000:.0f} ms, {fl['stored'] / d['ordinary_step_s']:.1f}x "
            f"Rewind's ordinary step; Rewind's fork took {d['first_checkpoint'] / fl['stored']:.2f}x the floor. "
            + ("The 2x target is below what this shape costs on this machine without Rewind." if
               fl["stored"] > 2 * d["ordinary_step_s"] else
               "The floor is within the 2x target: the rest is Rewind's own work."))
    return sec
