"""6. Checkpoint write and load latency, local folder and S3 (moto).

The checkpoints of a real N-step run (2 KB tool outputs; the storage
benchmark's run when it has one that long) are saved in step order with
`CheckpointStore.save` into a fresh file store and a fresh S3 prefix. Right
after each save, the bytes it stored are `put` again under another key of
the same object store: that plain put is the baseline. Then the newest
checkpoint is loaded cold (a new store instance each time: the delta chain is
read from the backend) and warm (the same instance again), against a plain
`get` of its full document stored as one object.
"""

from __future__ import annotations

import time
import uuid

from bench.b2_storage import long_run
from bench.common import Section, log, median, percentile, rewind_worker
from checkpoint_bridge.layout import step_key
from checkpoint_bridge.objects import FileObjectStore, S3ObjectStore
from checkpoint_bridge.store import CheckpointStore, open_checkpoint_store

LOAD_REPEATS = 5


def _backends(suite):  # type: ignore[no-untyped-def]
    root = suite.tmp / f"io-{uuid.uuid4().hex[:6]}"
    yield "local folder", lambda: FileObjectStore(root)
    endpoint = suite.moto()
    import boto3

    bucket = f"bench-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    yield "S3 (moto)", lambda: S3ObjectStore(bucket, "bench", endpoint_url=endpoint)


async def _measure(new_objects, checkpoints) -> dict:  # type: ignore[no-untyped-def]
    saves, puts = [], []
    objects = new_objects()
    async with CheckpointStore(objects) as store:
        for i, cp in enumerate(checkpoints):
            t = time.perf_counter()
            key = await store.save(cp)
            saves.append(time.perf_counter() - t)
            data = await objects.get(key)
            t = time.perf_counter()
            await objects.put_if_absent(f"baseline/puts/{i:08d}.json", data)
            puts.append(time.perf_counter() - t)
        newest = checkpoints[-1]
        full = await store.export(newest.checkpoint_id)
        await objects.put_if_absent("baseline/full/newest.json", full)
    cold, warm, gets = [], [], []
    for _ in range(LOAD_REPEATS):
        async with CheckpointStore(new_objects()) as fresh:
            t = time.perf_counter()
            cp = await fresh.load(newest.checkpoint_id)
            cold.append(time.perf_counter() - t)
            t = time.perf_counter()
            await fresh.load(newest.checkpoint_id)
            warm.append(time.perf_counter() - t)
        assert cp.messages == newest.messages
        plain = new_objects()
        t = time.perf_counter()
        await plain.get("baseline/full/newest.json")
        gets.append(time.perf_counter() - t)
        await plain.aclose()
    return {
        "save_p50": percentile(saves, 50), "save_p99": percentile(saves, 99),
        "put_p50": percentile(puts, 50), "put_p99": percentile(puts, 99),
        "cold": median(cold), "warm": median(warm), "get_full": median(gets),
        "full_bytes": len(full), "object_bytes_p50": None,
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
        checkpoints = [await source.load(s.checkpoint_id) for s in await source.list_checkpoints(run["run_id"])]
    results = {}
    for label, new_objects in _backends(suite):
        log(f"checkpoint_io: {label}")
        results[label] = await _measure(new_objects, checkpoints)
    sec.data = {"steps": n, "results": results}
    rows = []
    for label, r in results.items():
        rows.append([label, "save (write)", r["save_p50"] * 1000, r["save_p99"] * 1000, "plain put of the same bytes",
                     r["put_p50"] * 1000, r["put_p99"] * 1000, f"**{r['save_p50'] / r['put_p50']:.2f}x**",
                     f"**{r['save_p99'] / r['put_p99']:.2f}x**"])
    sec.table(f"Checkpoint writes, {n + 1} saves (ms)",
              ["store", "operation", "p50", "p99", "baseline", "baseline p50", "baseline p99", "p50 ratio", "p99 ratio"], rows)
    lrows = []
    for label, r in results.items():
        lrows.append([label, r["cold"] * 1000, r["warm"] * 1000, r["get_full"] * 1000, r["full_bytes"],
                      f"**{r['cold'] / r['get_full']:.1f}x**", f"**{r['warm'] / r['get_full']:.1f}x**"])
    sec.table(f"Loading the newest checkpoint (step {n}) (ms)",
              ["store", "cold load", "warm load", "plain get of the full document", "document bytes",
               "cold / get", "warm / get"], lrows)
    for label, r in results.items():
        sec.headline.append(["6 checkpoint I/O", f"save p50 / plain put p50, {label}",
                             f"{r['save_p50'] * 1000:.1f} ms / {r['put_p50'] * 1000:.1f} ms",
                             f"**{r['save_p50'] / r['put_p50']:.2f}x**", "–", "–"])
        sec.headline.append(["6 checkpoint I/O", f"cold load of step {n} / plain get, {label}",
                             f"{r['cold'] * 1000:.1f} ms / {r['get_full'] * 1000:.1f} ms",
                             f"**{r['cold'] / r['get_full']:.1f}x**", "–", "–"])
    loc, s3 = results["local folder"], results["S3 (moto)"]
    sec.verdicts.append(
        f"No target was set. A save costs {loc['save_p50'] / loc['put_p50']:.2f}x a plain put locally and "
        f"{s3['save_p50'] / s3['put_p50']:.2f}x on S3 at the median: besides the put, `save` builds the canonical "
        "JSON of the full checkpoint, diffs it against its parent (a cached document) and hashes the envelope; "
        f"the p99 ({loc['save_p99'] * 1000:.1f} ms local, {s3['save_p99'] * 1000:.1f} ms S3) is set by the "
        "snapshot steps, which write the whole conversation.")
    sec.verdicts.append(
        f"A cold load of step {n} takes {loc['cold'] * 1000:.0f} ms locally and {s3['cold'] * 1000:.0f} ms on S3 "
        f"({loc['cold'] / loc['get_full']:.1f}x / {s3['cold'] / s3['get_full']:.1f}x a single get of the "
        f"{loc['full_bytes']:,}-byte full document): it reads the nearest snapshot and every delta after it "
        "(in parallel windows), replays them, validates the pydantic model, and lists the branch's keys for "
        f"invalidation markers. Warm ({loc['warm'] * 1000:.0f} ms / {s3['warm'] * 1000:.0f} ms) skips the reads "
        "but still copies the cached document through canonical JSON, validates it and lists the branch.")
    return sec
