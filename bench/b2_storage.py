"""2. Storage growth with run length.

Runs of N steps where every turn but the last calls `blob` for 2 KB. For each
N: bytes of the run's checkpoint objects (the product's delta + geometric
snapshot store), of the transcript segments the run added to the payload
store, of its Temporal history (every event across continue-as-new), against
the raw content (the final message list as JSON), a naive full snapshot per
step (`CheckpointStore(objects, snapshot_every=1, snapshot_spacing="fixed")`
fed the same checkpoints) and LangGraph's SqliteSaver on the same script.

The runs are kept in `suite.cache["long_runs"]` for the fork and checkpoint
I/O benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

from activities.tools import ToolRegistry
from bench.baselines import langgraph_available, langgraph_loop
from bench.common import (
    TOOLS_MODULE, RESULTS, REPO, Section, blob_script, folder_bytes, history_events, log, median,
    rewind_worker, start_agent, step_marks,
)
from checkpoint_bridge.objects import FileObjectStore
from checkpoint_bridge.store import CheckpointStore, open_checkpoint_store

BLOB = 2048
TARGET_X = 3.0


def slope(points: list[tuple[int, float]]) -> float | None:
    """Growth exponent between the two longest runs (1 = linear, 2 = quadratic)."""
    if len(points) < 2:
        return None
    (n1, b1), (n2, b2) = points[-2], points[-1]
    return math.log(b2 / b1) / math.log(n2 / n1) if b1 > 0 and b2 > 0 else None


async def long_run(suite, client, settings, model, steps: int) -> dict:  # type: ignore[no-untyped-def]
    """One N-step 2 KB run on an already running worker; measured and cached for later benchmarks."""
    name, turns = blob_script(model, steps, BLOB, prefix=f"long{steps}")
    segments = suite.tmp / "payloads" / "segments"
    before = folder_bytes(segments)
    t = time.perf_counter()
    handle = await start_agent(client, settings, name, steps)
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
    marks = step_marks(events, "call_llm")
    run = {
        "steps": steps, "run_id": handle.id, "model": name, "turns": turns, "settings": settings,
        "wall_s": wall, "step_s": [b - a for a, b in zip(marks, marks[1:])],
        "history_bytes": sum(e.ByteSize() for e in events), "transcript_bytes": transcript_bytes,
        "continued_as_new": result.status.continued_as_new, "mirror_wait_s": mirror_wait,
        "mirror_error": result.status.mirror_error,
    }
    suite.cache.setdefault("long_runs", {})[steps] = run
    return run


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
                stored = await store.stored_bytes(r["run_id"])
                summaries = await store.list_checkpoints(r["run_id"])
                checkpoints = [await store.load(s.checkpoint_id) for s in summaries]
            raw = len(json.dumps(checkpoints[-1].messages).encode())
            naive_root = suite.tmp / f"naive-{n}-{uuid.uuid4().hex[:4]}"
            async with CheckpointStore(FileObjectStore(naive_root), snapshot_every=1, snapshot_spacing="fixed") as naive:
                for cp in checkpoints:
                    await naive.save(cp)
                naive_bytes = await naive.stored_bytes(r["run_id"])
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
                     "wall_s": r["wall_s"], "mirror_wait_s": r["mirror_wait_s"], "mirror_error": r["mirror_error"]}
            data.append(entry)
            rows.append([n, raw, stored, f"**{stored / raw:.2f}x**", r["transcript_bytes"], r["history_bytes"],
                         f"{r['history_bytes'] / raw:.2f}x", naive_bytes, f"{naive_bytes / raw:.1f}x",
                         lg if lg is not None else "skipped", f"{lg / raw:.1f}x" if lg else "–"])
    sec.data = {"runs": data}
    sec.table("Bytes at each run length (ratio = bytes / raw content)",
              ["steps", "raw content", "Rewind checkpoint store", "store / raw", "transcript segments (payload store)",
               "Temporal history", "history / raw", "naive snapshot/step", "naive / raw", "LangGraph SqliteSaver",
               "LangGraph / raw"], rows)
    sec.table("Bytes per step", ["steps", "raw", "Rewind store", "transcript", "history", "naive", "LangGraph"],
              [[d["steps"], d["raw"] // d["steps"], d["rewind"] // d["steps"], d["transcript"] // d["steps"],
                d["history"] // d["steps"], d["naive"] // d["steps"],
                d["langgraph"] // d["steps"] if d["langgraph"] else "–"] for d in data])

    exps = {k: slope([(d["steps"], d[k]) for d in data if d[k]]) for k in ("raw", "rewind", "transcript", "history", "naive", "langgraph")}
    sec.data["growth_exponent"] = exps
    sec.table(f"Growth exponent between the two longest runs ({data[-2]['steps']} → {data[-1]['steps']} steps; "
              "1 = linear, 2 = quadratic)", ["raw", "Rewind store", "transcript", "history", "naive", "LangGraph"],
              [[exps[k] if exps[k] is not None else "–" for k in ("raw", "rewind", "transcript", "history", "naive", "langgraph")]])

    worst = max(data, key=lambda d: d["rewind"] / d["raw"])
    ok_ratio = all(d["rewind"] <= TARGET_X * d["raw"] for d in data)
    ok_linear = exps["rewind"] is not None and exps["rewind"] <= 1.2
    last = data[-1]
    sec.headline = [
        ["2 storage", f"checkpoint store / raw content, worst over {', '.join(str(d['steps']) for d in data)} steps",
         f"{worst['rewind']:,} B / {worst['raw']:,} B ({worst['steps']} steps)", f"**{worst['rewind'] / worst['raw']:.2f}x**",
         f"≤ {TARGET_X:.0f}x", "met" if ok_ratio else "**not met**"],
        ["2 storage", "growth exponent of the checkpoint store (1 = linear)", f"{data[-2]['steps']}→{last['steps']} steps",
         f"**{exps['rewind']:.2f}**", "linear", "met" if ok_linear else "**not met**"],
        ["2 storage", f"checkpoint store vs naive snapshot per step ({last['steps']} steps)",
         f"{last['rewind']:,} B / {last['naive']:,} B", f"**{last['rewind'] / last['naive']:.3f}x**", "–", "–"],
    ]
    if last["langgraph"]:
        sec.headline.append(["2 storage", f"checkpoint store vs LangGraph SqliteSaver ({last['steps']} steps)",
                             f"{last['rewind']:,} B / {last['langgraph']:,} B", f"**{last['rewind'] / last['langgraph']:.3f}x**", "–", "–"])
    else:
        sec.notes.append(f"LangGraph skipped: {skip_lg}")
    sec.verdicts.append(
        f"≤ {TARGET_X:.0f}x raw content at every length: **{'met' if ok_ratio else 'not met'}** — the store holds "
        + ", ".join(f"{d['rewind'] / d['raw']:.2f}x at {d['steps']}" for d in data)
        + f" (the ratio is highest on short runs, where the fixed per-checkpoint fields and step 0's snapshot weigh most).")
    sec.verdicts.append(
        f"Linear growth: **{'met' if ok_linear else 'not met'}** — growth exponent {exps['rewind']:.2f} for the store "
        f"and {exps['history']:.2f} for Temporal history ({last['history'] // last['steps']:,} B/step at {last['steps']} steps, "
        f"{last['continued_as_new']} continue-as-new), against {exps['naive']:.2f} for the naive snapshot store"
        + (f" and {exps['langgraph']:.2f} for LangGraph's SqliteSaver" if exps["langgraph"] else "") + ".")
    total = last["rewind"] + last["transcript"] + last["history"]
    sec.notes.append(
        f"Everything Rewind keeps for the {last['steps']}-step run — checkpoints, transcript segments and Temporal "
        f"history — adds up to {total:,} B = {total / last['raw']:.2f}x the raw content. The transcript segments are "
        "live-run state in the payload store (a second copy of the conversation, content-addressed), not part of the "
        "checkpoint archive the target is about; Temporal history is dropped after the namespace's retention.")
    plot = _plot(data)
    if plot:
        sec.plots.append(plot)
    return sec


def _plot(data: list[dict]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [d["steps"] for d in data]
    series = [("raw content", "raw", "k--"), ("Rewind checkpoint store", "rewind", "C0-o"),
              ("transcript segments", "transcript", "C2-^"), ("Temporal history", "history", "C1-s"),
              ("naive snapshot per step", "naive", "C3-x"), ("LangGraph SqliteSaver", "langgraph", "C4-d")]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, key, style in series:
        pts = [(d["steps"], d[key]) for d in data if d.get(key)]
        if not pts:
            continue
        a.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], style, label=label)
        b.plot([p[0] for p in pts], [p[1] / p[0] / 1e3 for p in pts], style, label=label)
    a.set(xscale="log", yscale="log", xlabel="steps", ylabel="MB", title="Bytes stored (log-log: slope 1 = linear)")
    b.set(xscale="log", yscale="log", xlabel="steps", ylabel="KB per step", title="Bytes per step (flat = linear)")
    for ax in (a, b):
        ax.set_xticks(steps, [str(s) for s in steps])
        ax.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / "storage_growth.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path.relative_to(REPO))
