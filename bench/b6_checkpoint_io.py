"""6. Checkpoint write and load latency, local folder and S3 (moto).

The checkpoints of a real N-step run (2 KB tool outputs; the storage
benchmark's run when it has one that long) are saved in step order with
`CheckpointStore.save` into a fresh file store and a fresh S3 prefix. Right
after each save, the bytes it stored are `put` again under another key of
the same object store: that plain put is the baseline. Then the newest
checkpoint is loaded cold (a new store instance each time: its chain is read
from the backend) and warm (the same instance again), against a plain `get`
of its full document stored as one object.
"""

from __future__ import annotations

import json
import time
import uuid

from bench.b2_storage import long_run
from bench.common import Section, log, median, percentile, rewind_worker
from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.layout import branch_prefix
from checkpoint_bridge.stores import FileObjectStore, S3ObjectStore
from checkpoint_bridge.document.schema import dump_checkpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore, open_checkpoint_store

LOAD_REPEATS = 5


def _backends(suite):  # type: ignore[no-untyped-def]
    root = suite.tmp / f"io-{uuid.uuid4().hex[:6]}"
    yield "local folder", lambda: FileObjectStore(root)
    endpoint = suite.moto()
    import boto3

    bucket = f"bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    yield "S3 (moto)", lambda: S3ObjectStore(bucket, "bench", endpoint_url=endpoint)


async def _load_times(new_objects, cp) -> dict:  # type: ignore[no-untyped-def]
    """Cold and warm `load` of `cp`, and a plain `get` of its full document stored as one object."""
    objects = new_objects()
    full = dump_checkpoint(cp)
    key = f"baseline/full/{cp.step_index:08d}.json"
    await objects.put_if_absent(key, full)
    await objects.aclose()
    cold, warm, gets, lists = [], [], [], []
    for _ in range(LOAD_REPEATS):
        async with CheckpointStore(new_objects()) as fresh:
            t = time.perf_counter()
            got = await fresh.load(cp.checkpoint_id)
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            await fresh.load(cp.checkpoint_id)
            warm.append(time.perf_counter() - t)
            t = time.perf_counter()
            await fresh.objects.list(branch_prefix(cp.run_id, cp.branch_id))
            lists.append(time.perf_counter() - t)
        assert got.messages == cp.messages
        plain = new_objects()
        t = time.perf_counter()
        await plain.get(key)
        gets.append(time.perf_counter() - t)
        await plain.aclose()
    # Every chain starts at the run's snapshot, step 0.
    return {"step": cp.step_index, "deltas": cp.step_index, "snapshot_step": 0, "cold": median(cold),
            "warm": median(warm), "get_full": median(gets), "list_branch": median(lists), "full_bytes": len(full)}


async def _measure(new_objects, checkpoints) -> dict:  # type: ignore[no-untyped-def]
    saves: dict[str, list[float]] = {"delta": [], "snapshot": []}
    every, puts = [], []
    objects = new_objects()
    async with CheckpointStore(objects) as store:
        for i, cp in enumerate(checkpoints):
            t = time.perf_counter()
            key = await store.save(cp)
            took = time.perf_counter() - t
            data = await objects.get(key)
            t = time.perf_counter()
            await objects.put_if_absent(f"baseline/puts/{i:08d}.json", data)
            puts.append(time.perf_counter() - t)
            every.append(took)
            saves[json.loads(object_json(data, key))["kind"]].append(took)
    n = checkpoints[-1].step_index
    loads = [await _load_times(new_objects, checkpoints[-1])]
    return {
        "save_p50": percentile(every, 50), "save_p99": percentile(every, 99),
        "put_p50": percentile(puts, 50), "put_p99": percentile(puts, 99),
        "delta_p50": percentile(saves["delta"], 50), "delta_p99": percentile(saves["delta"], 99),
        "snapshots": len(saves["snapshot"]), "snapshot_max": max(saves["snapshot"], default=None),
        "loads": loads,
    }


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    n = 100 if suite.quick else 500
    sec = Section("checkpoint_io", "6. Checkpoint write and load latency",
                  f"The {n + 1} checkpoints of a real {n}-step run (2 KB tool outputs) saved in order with "
                  "`CheckpointStore.save` (delta or snapshot, as the store decides) to a fresh local folder and a "
                  "fresh S3 prefix on moto's server; baseline: a plain `put_if_absent` of the same stored bytes "
                  "through the same object store right after each save. Loads of the newest checkpoint: cold = a new "
                  f"store instance (median of {LOAD_REPEATS}), warm = the same instance again; baseline: a plain "
                  "`get` of its full document stored as one object. moto runs in this process (a thread), so its "
                  "server time shares the interpreter with the client; the ratios compare like with like.")
    server = suite.shared_temporal()
    client = await suite.client(server)
    runs = suite.cache.setdefault("long_runs", {})
    if n not in runs:
        log(f"checkpoint_io: making the {n}-step run")
        model = suite.cache.get("long_model") or suite.model(0)
        suite.cache["long_model"] = model
        settings = next((r["settings"] for r in runs.values()), None) or suite.settings(server, "long")
        async with rewind_worker(client, settings, model):
            await long_run(suite, client, settings, model, n)
    run = runs[n]
    async with open_checkpoint_store(run["settings"].store_url) as source:
        # Main branch only: the fork benchmark may have added a branch to this run.
        checkpoints = [await source.load(s.checkpoint_id) for s in await source.list_checkpoints(run["run_id"])
                       if s.branch_id == "main"]
    results = {}
    for label, new_objects in _backends(suite):
        log(f"checkpoint_io: {label}")
        results[label] = await _measure(new_objects, checkpoints)
    sec.data = {"steps": n, "results": results}
    rows = []
    for label, r in results.items():
        rows.append([label, r["save_p50"] * 1000, r["save_p99"] * 1000, r["put_p50"] * 1000, r["put_p99"] * 1000,
                     f"**{r['save_p50'] / r['put_p50']:.2f}x**", f"**{r['save_p99'] / r['put_p99']:.2f}x**",
                     r["delta_p50"] * 1000, r["delta_p99"] * 1000,
                     f"{r['snapshots']}, slowest {r['snapshot_max'] * 1000:.1f}" if r["snapshots"] else "0"])
    sec.table(f"Checkpoint writes, {n + 1} saves (ms)",
              ["store", "save p50", "save p99", "plain put p50", "plain put p99", "p50 ratio", "p99 ratio",
               "delta saves p50", "delta saves p99", "snapshot saves"], rows)
    lrows = []
    for label, r in results.items():
        for ld in r["loads"]:
            what = f"step {ld['step']} ({'newest; ' if ld is r['loads'][0] else 'longest chain; '}snapshot {ld['snapshot_step']} + {ld['deltas']} deltas)"
            lrows.append([label, what, ld["cold"] * 1000, ld["warm"] * 1000, ld["get_full"] * 1000,
                          f"**{ld['cold'] / ld['get_full']:.1f}x**", f"**{ld['warm'] / ld['get_full']:.1f}x**",
                          ld["list_branch"] * 1000, ld["full_bytes"]])
    sec.table("Loading a checkpoint (ms)",
              ["store", "checkpoint", "cold load", "warm load", "plain get of the full document",
               "cold / get", "warm / get", "list the branch (part of every load)", "document bytes"], lrows)
    for label, r in results.items():
        ld = r["loads"][0]
        sec.headline.append(["6 checkpoint I/O", f"save p50 / plain put p50, {label}",
                             f"{r['save_p50'] * 1000:.1f} ms / {r['put_p50'] * 1000:.1f} ms",
                             f"**{r['save_p50'] / r['put_p50']:.2f}x**", "–", "–"])
        sec.headline.append(["6 checkpoint I/O", f"cold load of newest (step {n}) / plain get, {label}",
                             f"{ld['cold'] * 1000:.1f} ms / {ld['get_full'] * 1000:.1f} ms",
                             f"**{ld['cold'] / ld['get_full']:.1f}x**", "–", "–"])
    loc, s3 = results["local folder"], results["S3 (moto)"]
    lnew, snew = loc["loads"][0], s3["loads"][0]
    sec.verdicts.append(
        f"No target was set. A save of a whole document (`CheckpointStore.save`, the API for documents built "
        f"elsewhere; the mirror writes with `save_step`, see benchmark 7) costs {loc['save_p50'] / loc['put_p50']:.2f}x "
        f"a plain put of the same bytes locally and {s3['save_p50'] / s3['put_p50']:.2f}x on S3 at the median: it "
        "reads its parent's document (cached here), checks that the child extends it and encodes the delta. "
        f"{loc['snapshots']} of the {n + 1} saves are snapshots (the run's first step).")
    sec.verdicts.append(
        f"A cold load of the newest checkpoint (step {n}: the root snapshot + {lnew['deltas']} deltas) takes "
        f"{lnew['cold'] * 1000:.0f} ms locally and {snew['cold'] * 1000:.0f} ms on S3, "
        f"{lnew['cold'] / lnew['get_full']:.1f}x / {snew['cold'] / snew['get_full']:.1f}x a single get of its "
        f"{lnew['full_bytes']:,}-byte full document: it reads the head, then the whole chain at once (bounded "
        "parallel GETs), checks every object's hash and link, replays the deltas and validates the document; each "
        "of the chain's objects costs a request and a parse. Warm "
        f"({lnew['warm'] * 1000:.0f} / {snew['warm'] * 1000:.0f} ms) reads nothing but the branch's rollback markers "
        f"(a short listing of their own) and copies the cached document.")
    return sec
