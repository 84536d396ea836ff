"""9. RewindSaver against SqliteSaver on the same LangGraph graph.

The LangGraph baseline of the storage benchmark (bench.baselines.langgraph_run:
a model node and a tools node, the conversation in a list channel with an
`operator.add` reducer) runs the same N-step script (every step but the last
a 2 KB `blob` call) three times: on SqliteSaver (a file db), on RewindSaver
in a local folder and on RewindSaver on S3 (moto's server). Bytes: the db
file after closing, the store folder. Per-step time: model call to model
call, median over the run and over its first and last 20 steps, with
LangGraph's durability="sync" (every checkpoint saved before the next step
runs, so the step time includes the saver's work), and the savers' own time
(put + put_writes, per step). Resume: a
new saver (cold caches, as a new process) reads the thread's latest
checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from activities.tools.registry import ToolRegistry
from bench.baselines import langgraph_available, langgraph_run
from bench.common import TOOLS_MODULE, Section, blob_script, folder_bytes, log, median

BLOB = 2048
WINDOW = 20


def _timed(saver: Any) -> list[tuple[str, float]]:
    """Time every put / put_writes LangGraph makes on `saver` (the saver's own share of a step)."""
    spent: list[tuple[str, float]] = []
    for name in ("put", "put_writes"):
        inner = getattr(saver, name)

        def timed(*args: Any, _inner: Any = inner, _name: str = name, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent.append((_name, time.perf_counter() - started))

        setattr(saver, name, timed)
    return spent


def _saver_run(base_url: str, model: str, registry: ToolRegistry, steps: int, open_saver: Any) -> dict[str, Any]:
    with open_saver() as saver:
        spent = _timed(saver)
        # durability="sync": every put is on the step's critical path, so the step time shows the saver's cost.
        out = langgraph_run(base_url, model, registry, "benchmark run", steps + 5, saver, durability="sync")
    puts = [t * 1000 for name, t in spent if name == "put"]
    out["saver_ms_per_step"] = sum(t for _n, t in spent) * 1000 / steps
    out["put_ms"] = {"early": median(puts[:2 * WINDOW]), "late": median(puts[-2 * WINDOW:])}
    return out


def _resume_s(open_saver: Any) -> float:
    """Seconds for a new saver (cold caches) to read the thread's latest checkpoint."""
    with open_saver() as saver:
        if hasattr(saver, "objects"):  # a connection to the store first, as a running process has
            saver._run(saver.objects.check_access())
        started = time.perf_counter()
        found = saver.get_tuple({"configurable": {"thread_id": "bench"}})
        took = time.perf_counter() - started
    assert found is not None
    return took


def _step_ms(durations: list[float]) -> dict[str, float | None]:
    steps = durations[:-1]  # the last one is the final answer
    ms = [d * 1000 for d in steps]
    return {"median": median(ms), "early": median(ms[:WINDOW]), "late": median(ms[-WINDOW:])}


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    lengths = [10, 50] if suite.quick else [50, 200, 500]
    sec = Section("langgraph_saver", "9. RewindSaver vs SqliteSaver (LangGraph)",
                  f"The storage benchmark's LangGraph graph, {', '.join(map(str, lengths))} steps of {BLOB} B tool "
                  "outputs, checkpointed by SqliteSaver (file db) and by RewindSaver (local folder; S3 on moto), with "
                  "durability='sync' (each checkpoint saved before the next step). Raw "
                  "content = the final message list as JSON. Step = model call to model call (medians; early = "
                  f"first {WINDOW} steps, late = last {WINDOW}). Resume = a new saver reading the latest checkpoint.")
    skip = langgraph_available()
    if skip is not None:
        sec.notes.append(f"Skipped: {skip}")
        return sec
    from checkpoint_bridge.langgraph.saver import RewindSaver
    from checkpoint_bridge.stores import FileObjectStore, S3ObjectStore
    from langgraph.checkpoint.sqlite import SqliteSaver

    model = suite.model(0)
    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    endpoint = suite.moto()
    import boto3

    bucket = f"bench-lg-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    rows, times, data = [], [], []
    for n in lengths:
        name, _ = blob_script(model, n, BLOB, prefix=f"lg{n}")
        folder = suite.tmp / f"lg-saver-{n}-{uuid.uuid4().hex[:4]}"
        db, store = folder / "sqlite.db", folder / "store"
        folder.mkdir(parents=True)
        prefix = f"lg-{n}"
        log(f"langgraph_saver: {n} steps on SqliteSaver")
        sqlite = await asyncio.to_thread(_saver_run, model.base_url, name, registry, n,
                                         lambda: SqliteSaver.from_conn_string(str(db)))
        # Closing the last connection folded the WAL into the db file.
        sqlite["db_bytes"] = db.stat().st_size + sum(p.stat().st_size for p in folder.glob("sqlite.db-*"))
        log(f"langgraph_saver: {n} steps on RewindSaver (folder)")
        local = await asyncio.to_thread(_saver_run, model.base_url, name, registry, n,
                                        lambda: RewindSaver(FileObjectStore(store)))
        log(f"langgraph_saver: {n} steps on RewindSaver (S3)")
        s3 = await asyncio.to_thread(_saver_run, model.base_url, name, registry, n,
                                     lambda: RewindSaver(S3ObjectStore(bucket, prefix, endpoint_url=endpoint)))
        for out in (sqlite, local, s3):
            assert out["steps"] == n, out["steps"]
        assert local["messages"] == sqlite["messages"] == s3["messages"]
        raw = len(json.dumps(sqlite["messages"]).encode())
        rewind_bytes = folder_bytes(store)
        resume = {
            "sqlite": await asyncio.to_thread(_resume_s, lambda: SqliteSaver.from_conn_string(str(db))),
            "folder": await asyncio.to_thread(_resume_s, lambda: RewindSaver(FileObjectStore(store))),
            "s3": await asyncio.to_thread(_resume_s, lambda: RewindSaver(S3ObjectStore(bucket, prefix, endpoint_url=endpoint))),
        }
        entry = {"steps": n, "raw": raw, "sqlite_bytes": sqlite["db_bytes"], "rewind_bytes": rewind_bytes,
                 "step_ms": {"sqlite": _step_ms(sqlite["durations"]),
                 "folder": _step_ms(local["durations"]), "s3": _step_ms(s3["durations"])},
                 "saver_ms_per_step": {"sqlite": sqlite["saver_ms_per_step"], "folder": local["saver_ms_per_step"],
                                       "s3": s3["saver_ms_per_step"]},
                 "put_ms": {"sqlite": sqlite["put_ms"], "folder": local["put_ms"], "s3": s3["put_ms"]},
                 "resume_ms": {k: v * 1000 for k, v in resume.items()}}
        data.append(entry)
        rows.append([n, raw, sqlite["db_bytes"], f"{sqlite['db_bytes'] / raw:.1f}x", rewind_bytes,
                     f"**{rewind_bytes / raw:.2f}x**", f"{rewind_bytes / sqlite['db_bytes']:.3f}x"])
        st, sv, pm, rs = entry["step_ms"], entry["saver_ms_per_step"], entry["put_ms"], entry["resume_ms"]
        times.append([n, st["sqlite"]["median"], st["folder"]["median"], st["s3"]["median"],
                      sv["sqlite"], sv["folder"], sv["s3"],
                      f"{pm['sqlite']['early']:.2f} → {pm['sqlite']['late']:.2f}",
                      f"{pm['folder']['early']:.2f} → {pm['folder']['late']:.2f}",
                      f"{pm['s3']['early']:.2f} → {pm['s3']['late']:.2f}",
                      rs["sqlite"], rs["folder"], rs["s3"]])
    sec.data = {"runs": data}
    sec.table("Bytes at each run length (ratio = bytes / raw content)",
              ["steps", "raw content", "SqliteSaver", "SqliteSaver / raw", "RewindSaver", "RewindSaver / raw",
               "RewindSaver / SqliteSaver"], rows)
    sec.table("Per-step time (ms): the whole step (model call to model call, median), the savers' share of it "
              "(put + put_writes per step), one put early → late (medians of the first and last 40), and resume",
              ["steps", "step SqliteSaver", "step Rewind folder", "step Rewind S3", "saver/step SqliteSaver",
               "saver/step Rewind folder", "saver/step Rewind S3", "put SqliteSaver", "put Rewind folder",
               "put Rewind S3", "resume SqliteSaver", "resume Rewind folder", "resume Rewind S3"], times)
    last = data[-1]
    sec.headline = [
        ["9 langgraph", f"RewindSaver / raw content ({last['steps']} steps)",
         f"{last['rewind_bytes']:,} B / {last['raw']:,} B", f"**{last['rewind_bytes'] / last['raw']:.2f}x**", "–", "–"],
        ["9 langgraph", f"RewindSaver vs SqliteSaver bytes ({last['steps']} steps)",
         f"{last['rewind_bytes']:,} B / {last['sqlite_bytes']:,} B",
         f"**{last['rewind_bytes'] / last['sqlite_bytes']:.3f}x**", "–", "–"],
        ["9 langgraph", f"RewindSaver (folder) vs SqliteSaver median step ({last['steps']} steps)",
         f"{last['step_ms']['folder']['median']:.1f} ms / {last['step_ms']['sqlite']['median']:.1f} ms",
         f"**{last['step_ms']['folder']['median'] / last['step_ms']['sqlite']['median']:.2f}x**", "–", "–"],
        ["9 langgraph", f"saver time per step, RewindSaver (folder) vs SqliteSaver ({last['steps']} steps)",
         f"{last['saver_ms_per_step']['folder']:.1f} ms / {last['saver_ms_per_step']['sqlite']:.1f} ms",
         f"**{last['saver_ms_per_step']['folder'] / last['saver_ms_per_step']['sqlite']:.2f}x**", "–", "–"],
    ]
    if len(data) >= 2:
        import math

        (a, b) = data[-2], data[-1]
        exp = {k: math.log(b[k] / a[k]) / math.log(b["steps"] / a["steps"]) for k in ("raw", "sqlite_bytes", "rewind_bytes")}
        sec.data["growth_exponent"] = exp
        sec.verdicts.append(
            f"Growth exponent {a['steps']} → {b['steps']} steps (1 = linear, 2 = quadratic): RewindSaver "
            f"{exp['rewind_bytes']:.2f}, SqliteSaver {exp['sqlite_bytes']:.2f}, raw content {exp['raw']:.2f}.")
    sec.notes.append(
        "Both savers' step time grows with the run: most of a step is the model call, which sends the whole "
        "conversation (the graph keeps it in state), and each put serializes the whole state (SqliteSaver "
        "stores it; RewindSaver serializes each message to find what its parent already holds).")
    sec.notes.append(
        f"Resume reads a chain of list deltas and the elements it names: on S3 about two requests per step of "
        f"the thread (client CPU per request is the cost, {last['resume_ms']['s3']:,.0f} ms at "
        f"{last['steps']} steps); packing finished blocks of links, as the AgentCheckpoint store does, would "
        "cut it to a few dozen requests.")
    sec.notes.append(
        "RewindSaver stores a list channel that grew by appending as a delta of its parent's list (only the new "
        "messages), and an unchanged channel as a pointer; SqliteSaver stores the whole state at every step.")
    return sec
