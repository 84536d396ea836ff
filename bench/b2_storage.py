"""2. Storage growth with run length.

Runs of N steps where every turn but the last calls `blob` for 2 KB. For each
N: bytes of the run's checkpoint objects (the product's store: a snapshot
at step 0, then one delta per step), of the transcript segments the run added to the payload
store, of its Temporal history (every event across continue-as-new), against
the raw content (the final message list as JSON), a naive full snapshot per
step (the same checkpoints, each encoded whole in the store's envelope, as plain JSON) and LangGraph's SqliteSaver on the same script.
The floor of history: the bare workflow (bench/bare_workflow.py, `held`) on the
same script, the same model and tool activities and nothing else, each model call
sent only the messages new since the previous one.

The runs are kept in `suite.cache["long_runs"]` for the fork and checkpoint
I/O benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

from temporalio.worker import Worker

from activities.tools.registry import ToolRegistry
from bench.bare_workflow import BareActivities, BareAgentWorkflow
from bench.baselines import langgraph_available, langgraph_loop
from bench.common import (
    REPO,
    RESULTS,
    TOOLS_MODULE,
    Section,
    activity_times_by_step,
    blob_script,
    folder_bytes,
    history_breakdown,
    history_events,
    log,
    median,
    rewind_worker,
    start_agent,
)
from bench.step_cost import step_cost
from checkpoint_bridge.document.envelope import encode as envelope_encode
from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.schema import checkpoint_to_dict
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.temporal.timing import step_marks
from workflows.vocabulary.contracts import DEFAULT_SYSTEM_PROMPT

BLOB = 2048
TARGET_X = 3.0
# Temporal history against the content a step adds (the target; it was 1.3x
# when a step had a mirror activity of its own).
HISTORY_TARGET_X = 1.5
# Growth exponent that still counts as linear: snapshot steps make the curve bumpy
# (a run just past a snapshot step holds one more copy of the conversation); quadratic is 2.
LINEAR_MAX = 1.3


def slope(points: list[tuple[int, float]]) -> float | None:
    """Growth exponent between the two longest runs (1 = linear, 2 = quadratic)."""
    if len(points) < 2:
        return None
    (n1, b1), (n2, b2) = points[-2], points[-1]
    return math.log(b2 / b1) / math.log(n2 / n1) if b1 > 0 and b2 > 0 else None


def _output_refs(events: list) -> set[str]:  # type: ignore[type-arg]
    """Digests of the tool outputs a history names (run_tool results with `output_ref`)."""
    found = set()
    for e in events:
        if e.HasField("activity_task_completed_event_attributes"):
            for p in e.activity_task_completed_event_attributes.result.payloads:
                if b'"output_ref":"' in p.data:
                    ref = json.loads(p.data).get("output_ref")
                    if isinstance(ref, str):
                        found.add(ref)
    return found


async def long_run(suite, client, settings, model, steps: int) -> dict:  # type: ignore[no-untyped-def]
    """One N-step 2 KB run on an already running worker; measured and cached for later benchmarks."""
    name, turns = blob_script(model, steps, BLOB, prefix=f"long{steps}")
    segments = suite.tmp / "payloads" / "segments"
    before = folder_bytes(segments)
    t = time.perf_counter()
    # A task unique to the run: transcript segments are content-addressed, so runs that
    # start alike would otherwise share (and not count) their first segments.
    handle = await start_agent(client, settings, name, steps, task=f"benchmark run {uuid.uuid4().hex[:8]}")
    result = await handle.result()
    wall = time.perf_counter() - t
    assert result.status.step == steps, result.status
    transcript_bytes = folder_bytes(segments) - before
    # The run may end before its last checkpoints are mirrored (the drain is bounded): wait for them.
    mirror_wait = time.perf_counter()
    async with open_checkpoint_store(settings.store_url) as store:
        while len(await store.existing_steps(handle.id, "main")) < steps + 1:
            if time.perf_counter() - mirror_wait > 180:
                raise TimeoutError(f"{steps}-step run: checkpoints still missing 180 s after the run ended "
                                   f"(mirror_error: {result.status.mirror_error})")
            await asyncio.sleep(0.05)
    mirror_wait = time.perf_counter() - mirror_wait
    events = await history_events(client, handle.id)
    # The run's tool outputs stored by reference (content-addressed, so shared with other
    # runs of the same script: counted from the digests this run's history names).
    outputs = suite.tmp / "payloads" / "outputs"
    transcript_bytes += sum((outputs / d[:2] / f"{d}.json").stat().st_size for d in _output_refs(events)
                            if (outputs / d[:2] / f"{d}.json").exists())
    marks = step_marks(events, "call_llm")
    run = {
        "steps": steps, "run_id": handle.id, "model": name, "turns": turns, "settings": settings,
        "wall_s": wall, "step_s": [b - a for a, b in zip(marks, marks[1:])],
        "history_bytes": sum(e.ByteSize() for e in events), "transcript_bytes": transcript_bytes,
        "continued_as_new": result.status.continued_as_new, "mirror_wait_s": mirror_wait,
        "mirror_error": result.status.mirror_error,
        "call_llm_ms": activity_times_by_step(events, "call_llm"),
        "mirror_ms": activity_times_by_step(events, "mirror_steps"),
        "history_breakdown": history_breakdown(events), "events": len(events),
    }
    suite.cache.setdefault("long_runs", {})[steps] = run
    return run


async def floor_run(client, settings, model, registry: ToolRegistry, steps: int) -> dict:  # type: ignore[no-untyped-def]
    """The bare workflow on the same N-step script: the history a plain Temporal agent loop
    leaves for the same steps (the messages of a step sent once more, to the next model call)."""
    name, _ = blob_script(model, steps, BLOB, prefix=f"floor{steps}")
    queue = settings.task_queue + "-floor"
    acts = BareActivities(model.base_url, registry)
    wid = f"floor-{uuid.uuid4().hex[:10]}"
    async with Worker(client, task_queue=queue, workflows=[BareAgentWorkflow], activities=[acts.bare_llm, acts.bare_tool]):
        done = await client.execute_workflow(
            "BareAgentWorkflow",
            {"system_prompt": DEFAULT_SYSTEM_PROMPT, "task": "benchmark run", "model": name, "held": True,
             "tools": [s.openai_schema() for s in registry.specs()], "max_steps": steps + 5},
            id=wid, task_queue=queue,
        )
    assert done == steps, done
    events = await history_events(client, wid)
    return {"history_bytes": sum(e.ByteSize() for e in events), "history_breakdown": history_breakdown(events),
            "events": len(events)}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    lengths = [10, 50] if suite.quick else [10, 50, 200, 500]
    sec = Section("storage", "2. Storage growth",
                  f"Runs of {', '.join(map(str, lengths))} steps; every step but the last calls `blob` for a "
                  f"{BLOB} B tool output. Raw content = the final message list as JSON. Naive = the same "
                  "checkpoints saved as one full snapshot per step. LangGraph = the same script as a graph on "
                  "SqliteSaver (db file size after closing).")
    server = suite.shared_temporal()
    client = await suite.client(server)
    model = suite.model(0)
    suite.cache["long_model"] = model
    settings = suite.settings(server, "long")
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    skip_lg = langgraph_available()
    rows, data = [], []
    async with rewind_worker(client, settings, model):
        for n in lengths:
            log(f"storage: {n}-step run")
            r = await long_run(suite, client, settings, model, n)
            async with open_checkpoint_store(settings.store_url) as store:
                stored = sum(map(len, (await store.raw_objects(r["run_id"])).values()))
                kinds: dict[str, list[int]] = {"snapshot": [], "delta": []}
                view_bytes, viewed = 0, []
                for key, blob in (await store.raw_objects(r["run_id"])).items():
                    if "/branches/main/steps/" in key:
                        envelope = json.loads(object_json(blob, key))
                        kinds[envelope["kind"]].append(len(blob))
                        view = envelope["payload"].get("model_view")
                        if view:
                            view_bytes += len(json.dumps(view, separators=(",", ":")))
                            # Format v2 leaves the step out of the payload: it is in the key.
                            viewed.append(int(key.rsplit("/", 1)[-1].split(".")[0]))
                summaries = [s for s in await store.list_checkpoints(r["run_id"]) if s.branch_id == "main"]
                checkpoints = [await store.load(s.checkpoint_id) for s in summaries]
            raw = len(json.dumps(checkpoints[-1].messages).encode())
            # Naive: every step stored whole, in the same envelope.
            naive_bytes = sum(len(envelope_encode("snapshot", checkpoint_to_dict(cp), compression="none")) for cp in checkpoints)
            log(f"storage: bare workflow (history floor), {n} steps")
            floor = await floor_run(client, settings, model, registry, n)
            lg = None
            if skip_lg is None:
                log(f"storage: LangGraph {n}-step run")
                db = suite.tmp / f"lg-{n}-{uuid.uuid4().hex[:4]}.sqlite"
                out = await asyncio.to_thread(langgraph_loop, model.base_url, r["model"], registry, "benchmark run", n + 5, db)
                assert out["steps"] == n, out["steps"]
                lg = out["db_bytes"]
                db.unlink(missing_ok=True)
            entry = {"steps": n, "raw": raw, "rewind": stored, "transcript": r["transcript_bytes"],
                     "history": r["history_bytes"], "naive": naive_bytes, "langgraph": lg,
                     "checkpoints": len(checkpoints), "continued_as_new": r["continued_as_new"],
                     "wall_s": r["wall_s"], "mirror_wait_s": r["mirror_wait_s"], "mirror_error": r["mirror_error"],
                     "snapshots": len(kinds["snapshot"]), "snapshot_bytes": sum(kinds["snapshot"]),
                     "deltas": len(kinds["delta"]), "delta_bytes": sum(kinds["delta"]),
                     "floor_history": floor["history_bytes"], "floor_breakdown": floor["history_breakdown"],
                     "events": r["events"], "floor_events": floor["events"],
                     "model_view_bytes": view_bytes, "compressed_steps": len(viewed),
                     "first_compressed_step": min(viewed, default=None)}
            last_pair = (checkpoints[-2], checkpoints[-1], r["model"])
            data.append(entry)
            rows.append([n, raw, stored, f"**{stored / raw:.2f}x**", r["transcript_bytes"], r["history_bytes"],
                         f"{r['history_bytes'] / raw:.2f}x", naive_bytes, f"{naive_bytes / raw:.1f}x",
                         lg if lg is not None else "skipped", f"{lg / raw:.1f}x" if lg else "–"])
    sec.data = {"runs": data}
    sec.table("Bytes at each run length (ratio = bytes / raw content)",
              ["steps", "raw content", "Rewind checkpoint store", "store / raw", "payload store (transcript segments, tool outputs)",
               "Temporal history", "history / raw", "naive snapshot/step", "naive / raw", "LangGraph SqliteSaver",
               "LangGraph / raw"], rows)
    sec.table("Bytes per step", ["steps", "raw", "Rewind store", "payload store", "history", "naive", "LangGraph"],
              [[d["steps"], d["raw"] // d["steps"], d["rewind"] // d["steps"], d["transcript"] // d["steps"],
                d["history"] // d["steps"], d["naive"] // d["steps"],
                d["langgraph"] // d["steps"] if d["langgraph"] else "–"] for d in data])

    longest = suite.cache["long_runs"][data[-1]["steps"]]
    n = longest["steps"]
    windows = [("steps 1–10", 0, 10), (f"steps {n // 2 - 4}–{n // 2 + 5}", n // 2 - 5, n // 2 + 5),
               (f"steps {n - 10}–{n - 1}", n - 11, n - 1)]
    growth = []
    for label, lo, hi in windows:
        growth.append([label, median(longest["step_s"][lo:hi]) * 1000, median(longest["call_llm_ms"][lo:hi]),
                       median(longest["mirror_ms"][lo + 1:hi + 1])])
    sec.data["step_cost_growth"] = growth
    sec.table(f"Step cost along the {n}-step run (medians, ms; from its history)",
              ["", "step (model call to model call)", "call_llm activity", "mirror_steps activity (off the critical path)"],
              growth)
    parent, child, model_name = last_pair
    parts = await step_cost(parent, child, model_name, [t.openai_schema() for t in registry.specs()])
    sec.data["step_cost_parts_ms"] = parts
    sec.table(f"Per-call work that grows with the conversation, timed alone at step {child.step_index} "
              f"({len(child.messages)} messages; ms, best of 3)", ["piece", "ms"], [[k, v] for k, v in parts.items()])
    early, late = growth[0], growth[-1]
    top = sorted(parts.items(), key=lambda kv: -kv[1])
    def ms_(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f} ms"

    sec.notes.append(
        f"Along the {n}-step run: a step takes {ms_(early[1])} at steps 1–10 and {ms_(late[1])} at the end, the model "
        f"call activity {ms_(early[2])} → {ms_(late[2])}, the mirror {ms_(early[3])} → {ms_(late[3])}. Timed alone at "
        f"step {child.step_index}: " + "; ".join(f"{k} {v:.1f} ms" for k, v in top) + ".")
    bd = longest["history_breakdown"]
    raw_n = data[-1]["raw"]
    sec.data["history_breakdown"] = bd
    sec.table(f"Where the {n}-step run's Temporal history bytes are", ["part", "bytes", "per step", "/ raw content"],
              [[k, v, v // n, f"{v / raw_n:.2f}x"] for k, v in sorted(bd.items(), key=lambda kv: -kv[1])])
    sec.table("Temporal history per step: Rewind and the floor (the bare workflow on the same script, each model "
              "call sent only the messages new since the previous one; new content = raw content / steps)",
              ["steps", "new content per step", "Rewind history per step", "Rewind / new content",
               "floor history per step", "floor / new content", "Rewind / floor", "events per step (Rewind / floor)"],
              [[d["steps"], d["raw"] // d["steps"], d["history"] // d["steps"], f"**{d['history'] / d['raw']:.2f}x**",
                d["floor_history"] // d["steps"], f"{d['floor_history'] / d['raw']:.2f}x",
                f"{d['history'] / d['floor_history']:.2f}x",
                f"{d['events'] / d['steps']:.1f} / {d['floor_events'] / d['steps']:.1f}"] for d in data])
    fbd = data[-1]["floor_breakdown"]
    sec.data["floor_breakdown"] = fbd
    sec.table(f"Where the floor's {n}-step history bytes are (bare workflow)", ["part", "bytes", "per step", "/ raw content"],
              [[k, v, v // n, f"{v / raw_n:.2f}x"] for k, v in sorted(fbd.items(), key=lambda kv: -kv[1])])

    for d in data:
        d["rewind_no_view"] = d["rewind"] - d["model_view_bytes"]
    keys = ("raw", "rewind", "rewind_no_view", "transcript", "history", "naive", "langgraph")
    exps = {k: slope([(d["steps"], d[k]) for d in data if d[k]]) for k in keys}
    sec.data["growth_exponent"] = exps
    sec.table(f"Growth exponent between the two longest runs ({data[-2]['steps']} → {data[-1]['steps']} steps; "
              "1 = linear, 2 = quadratic)", ["raw", "Rewind store", "Rewind store without `model_view`", "transcript",
                                             "history", "naive", "LangGraph"],
              [[exps[k] if exps[k] is not None else "–" for k in keys]])

    worst = max(data, key=lambda d: d["rewind"] / d["raw"])
    ok_ratio = all(d["rewind"] <= TARGET_X * d["raw"] for d in data)
    ok_linear = exps["rewind"] is not None and exps["rewind"] <= LINEAR_MAX
    last = data[-1]
    sec.headline = [
        ["2 storage", f"checkpoint store / raw content, worst over {', '.join(str(d['steps']) for d in data)} steps",
         f"{worst['rewind']:,} B / {worst['raw']:,} B ({worst['steps']} steps)", f"**{worst['rewind'] / worst['raw']:.2f}x**",
         f"≤ {TARGET_X:.0f}x", "met" if ok_ratio else "**not met**"],
        ["2 storage", "growth exponent of the checkpoint store (1 = linear)", f"{data[-2]['steps']}→{last['steps']} steps",
         f"**{exps['rewind']:.2f}**", f"linear (≤ {LINEAR_MAX})", "met" if ok_linear else "**not met**"],
        ["2 storage", f"checkpoint store vs naive snapshot per step ({last['steps']} steps)",
         f"{last['rewind']:,} B / {last['naive']:,} B", f"**{last['rewind'] / last['naive']:.3f}x**", "–", "–"],
    ]
    hist_x = last["history"] / last["raw"]
    floor_x = last["floor_history"] / last["raw"]
    sec.headline.append(["2 storage", f"Temporal history / new content per step ({last['steps']} steps, all "
                         "continue-as-new runs; the floor: a bare workflow on the same script)",
                         f"{last['history'] // last['steps']:,} B / {last['raw'] // last['steps']:,} B a step "
                         f"(floor {last['floor_history'] // last['steps']:,} B = {floor_x:.2f}x)",
                         f"**{hist_x:.2f}x**", f"≤ {HISTORY_TARGET_X}x",
                         "met" if hist_x <= HISTORY_TARGET_X else "**not met**"])
    sec.verdicts.append(
        f"Temporal history ≤ {HISTORY_TARGET_X}x the new content per step: "
        f"**{'met' if hist_x <= HISTORY_TARGET_X else 'not met'}** — "
        + ", ".join(f"{d['history'] / d['raw']:.2f}x at {d['steps']}" for d in data)
        + f" steps; the floor (a bare Temporal loop with the same activities, nothing else) leaves "
        + ", ".join(f"{d['floor_history'] / d['raw']:.2f}x" for d in data)
        + ". The floor sends each tool output twice (its activity's result and the next model call's input); "
        "Rewind sends a large read-only output once, to the payload store, and history names it by digest, "
        "and a step's checkpoint rides on the next model call naming that call's messages instead of "
        "repeating them (workflows/vocabulary/said_once.py). What is left is mostly Temporal's own events "
        "(workflow tasks, activity starts: see the tables above).")
    if last["langgraph"]:
        sec.headline.append(["2 storage", f"checkpoint store vs LangGraph SqliteSaver ({last['steps']} steps)",
                             f"{last['rewind']:,} B / {last['langgraph']:,} B", f"**{last['rewind'] / last['langgraph']:.3f}x**", "–", "–"])
    else:
        sec.notes.append(f"LangGraph skipped: {skip_lg}")
    sec.verdicts.append(
        f"≤ {TARGET_X:.0f}x raw content at every length: **{'met' if ok_ratio else 'not met'}** — the store holds "
        + ", ".join(f"{d['rewind'] / d['raw']:.2f}x at {d['steps']}" for d in data)
        + f". At {last['steps']} steps its {last['rewind']:,} B are {last['snapshots']} full snapshots "
        f"({last['snapshot_bytes']:,} B, {last['snapshot_bytes'] / last['raw']:.2f}x the raw content: only the run's "
        "first step is stored whole) and "
        f"{last['deltas']} deltas ({last['delta_bytes']:,} B, {last['delta_bytes'] // max(last['deltas'], 1):,} B each "
        f"against {last['raw'] // last['steps']:,} B of raw content per step: the new messages plus the step's "
        "scalar fields, tool record and ledgers" + (", and `model_view`" if last["compressed_steps"] else "") + ")."
        + (f" The margin is thin: {worst['rewind'] / worst['raw']:.2f}x against {TARGET_X:.0f}x at {worst['steps']} steps."
           if ok_ratio and worst["rewind"] > 0.9 * TARGET_X * worst["raw"] else ""))
    for d in data:
        if d["compressed_steps"] and d["model_view_bytes"] <= 0.1 * d["rewind"]:
            sec.notes.append(
                f"Context compression, {d['steps']}-step run: from step {d['first_compressed_step']} on, every model "
                f"call compressed the conversation to fit the context window; the {d['compressed_steps']} `model_view` "
                f"records take {d['model_view_bytes']:,} B ({d['model_view_bytes'] / d['rewind']:.1%} of the store).")
        elif d["compressed_steps"]:
            without = d["rewind"] - d["model_view_bytes"]
            sec.verdicts.append(
                f"Context compression, {d['steps']}-step run: from step {d['first_compressed_step']} on, the conversation no longer fits "
                f"the model's context window and every model call compresses it; each of those {d['compressed_steps']} "
                "steps records a `model_view` listing one action per compressed message, so the record grows with the "
                f"conversation: {d['model_view_bytes']:,} B of the store ({d['model_view_bytes'] / d['rewind']:.0%}) are "
                f"`model_view`. Without it the store would hold {without:,} B = {without / d['raw']:.2f}x the raw "
                f"content (growth exponent {exps['rewind_no_view']:.2f} instead of {exps['rewind']:.2f}). The same list "
                "rides in every call_llm result and mirror_steps input, so Temporal history per step grows too (see the "
                "history table). Storing the view as a difference from the previous step's (consecutive views share "
                "all but the newest actions) would make both linear again.")
            break
    sec.verdicts.append(
        f"Linear growth (exponent ≤ {LINEAR_MAX}; quadratic is 2): **{'met' if ok_linear else 'not met'}** — growth "
        f"exponent {exps['rewind']:.2f} for the store "
        f"and {exps['history']:.2f} for Temporal history ({last['history'] // last['steps']:,} B/step at {last['steps']} steps, "
        f"{last['continued_as_new']} continue-as-new), against {exps['naive']:.2f} for the naive snapshot store"
        + (f" and {exps['langgraph']:.2f} for LangGraph's SqliteSaver" if exps["langgraph"] else "") + ".")
    slow = [d for d in data if d["mirror_wait_s"] > 1 or d["mirror_error"]]
    for d in slow:
        sec.notes.append(f"The {d['steps']}-step run ended {d['mirror_wait_s']:.1f} s before its last checkpoint was in "
                         f"the store (mirror error: {d['mirror_error'] or 'none'}).")
    total = last["rewind"] + last["transcript"] + last["history"]
    sec.notes.append(
        f"Everything Rewind keeps for the {last['steps']}-step run — checkpoints, the payload store's transcript "
        f"segments and tool outputs, and Temporal history — adds up to {total:,} B = {total / last['raw']:.2f}x the "
        "raw content. The payload store holds live-run state (the conversation again and the large tool outputs "
        "history names by digest, content-addressed), not part of the checkpoint archive the target is about; "
        "Temporal history is dropped after the namespace's retention.")
    plot = _plot(data, suite.quick)
    if plot:
        sec.plots.append(plot)
    return sec


def _plot(data: list[dict], quick: bool) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [d["steps"] for d in data]
    series = [("raw content", "raw", "k--"), ("Rewind checkpoint store", "rewind", "C0-o"),
              ("Rewind store without model_view", "rewind_no_view", "C0:."),
              ("transcript segments", "transcript", "C2-^"), ("Temporal history", "history", "C1-s"),
              ("naive snapshot per step", "naive", "C3-x"), ("LangGraph SqliteSaver", "langgraph", "C4-d")]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, key, style in series:
        pts = [(d["steps"], d[key]) for d in data if d.get(key)]
        if not pts:
            continue
        a.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], style, label=label)
        b.plot([p[0] for p in pts], [p[1] / p[0] / 1e3 for p in pts], style, label=label)
    a.plot(steps, [TARGET_X * d["raw"] / 1e6 for d in data], ":", color="grey", label=f"target: {TARGET_X:.0f}x raw content")
    a.set(xscale="log", yscale="log", xlabel="steps", ylabel="MB", title="Bytes stored (log-log: slope 1 = linear)")
    b.set(xscale="log", yscale="log", xlabel="steps", ylabel="KB per step", title="Bytes per step (flat = linear)")
    from matplotlib.ticker import NullFormatter

    for ax in (a, b):
        ax.set_xticks(steps, [str(s) for s in steps])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    # Separate files per mode, so a CI-sized run never replaces the full run's plot.
    path = RESULTS / ("storage_growth-quick.png" if quick else "storage_growth.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path.relative_to(REPO))
