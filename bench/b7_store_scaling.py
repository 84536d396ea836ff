"""7. Store scaling: what a step costs at step N, and what a cold load costs, to 2,000 steps.

An N-step branch (N = 2,000; quick: 160) of realistic step records, each an
assistant tool call plus a 2 KB tool result (word-like text that compresses as
prose does, bench/tools.py's `prose_text`) with its tool record and ledger,
written in order with `CheckpointStore.save_step` (what the live mirror and
`rewind mirror` do), to a fresh local folder, a fresh SQLite file, a fresh
PostgreSQL schema (a local server) and a fresh S3 prefix on a moto server running as its own process and a fresh prefix of a DynamoDB table on the same server. Per step: the save's time and the store
requests it made (GETs, PUTs, LISTs, counted by a wrapper around the real
object store), compared early (the first 100 steps, quick: 40) and late (the last as many). Then the
bytes stored against the raw content (the final message list as JSON), and
the newest checkpoint loaded from a new Python process against a new process
that GETs and parses one document of the same size, stored as one object on
the same store (both time only the read, after their imports and connection
set-up; alternated, median of 5), at several depths. With
REWIND_BENCH_BEFORE=/path/to/another/checkout, that checkout writes the same
records (handed over as JSON lines) to its own folder and S3 bucket, and its
cold loads alternate with these.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone

from pathlib import Path

from bench.common import REPO, Section, before_name, log, median, moto_process, save_figure
from bench.tools import prose_text
from checkpoint_bridge.stores import FileObjectStore, S3ObjectStore, SqliteObjectStore
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.document.schema import dump_checkpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.canonical import cache_key
from workflows.vocabulary.contracts import Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.ids import checkpoint_id

SAVE_TARGET = 1.2
STORAGE_TARGET = 1.3
LOAD_TARGET = 3.0
LOAD_REPEATS = 5
BEFORE = os.environ.get("REWIND_BENCH_BEFORE")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _records(run_id: str, steps: int) -> list[StepRecord]:
    out, total = [], Ledger()
    for step in range(steps + 1):
        step_ledger = Ledger(prompt_tokens=600 * step + 200, completion_tokens=12, total_tokens=600 * step + 212,
                             cost_usd=0.00001 * step, model_calls=1 if step else 0, tool_calls=1 if step else 0)
        total = total.plus(step_ledger)
        if step == 0:
            messages = [{"role": "system", "content": "You are a careful research agent."},
                        {"role": "user", "content": "Run the benchmark."}]
            calls: list[ToolCallLog] = []
        else:
            call_id = f"call_{step - 1}_0"
            output = prose_text(step, 2048)
            arguments = json.dumps({"index": step, "size": 2048})
            messages = [{"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "blob", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": call_id, "content": output}]
            calls = [ToolCallLog(step=step, tool_call_id=call_id, tool_name="blob", arguments=json.loads(arguments),
                                 output=output, called_at=T0 + timedelta(seconds=step), duration_ms=2,
                                 cache_key=cache_key("blob", json.loads(arguments)))]
        out.append(StepRecord(
            run_id=run_id, branch_id="main", step_index=step,
            parent_id=checkpoint_id(run_id, "main", step - 1) if step else None,
            step_label="start" if step == 0 else "blob", new_messages=messages, new_tool_calls=calls,
            created_at=T0 + timedelta(seconds=step), model="gpt-4o-mini",
            prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens,
            llm_tokens_used=total.total_tokens, llm_cost_usd=total.cost_usd,
            step_ledger=step_ledger, branch_ledger=total, total_ledger=total,
        ))
    return out


class _Counting:
    """The store's requests, counted (a real object store underneath)."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.url = inner, inner.url
        self.counts = {"get": 0, "put": 0, "list": 0, "delete": 0}
        self.bytes_held = 0  # written, less what was deleted since
        self._sizes: dict[str, int] = {}

    async def get(self, key: str) -> bytes:
        self.counts["get"] += 1
        return await self.inner.get(key)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        self.counts["put"] += 1
        written = await self.inner.put_if_absent(key, data)
        if written:
            self.bytes_held += len(data)
            self._sizes[key] = len(data)
        return written

    async def delete(self, key: str) -> bool:
        self.counts["delete"] += 1
        self.bytes_held -= self._sizes.pop(key, 0)
        return await self.inner.delete(key)

    async def list(self, prefix: str) -> list[str]:
        self.counts["list"] += 1
        return await self.inner.list(prefix)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


_LOADER = """
import asyncio, json, sys, time
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.stores import open_object_store
url, endpoint, cid, plain = sys.argv[1:5]
async def main():
    if url.startswith("hot+"):  # hot+REDIS_URL+DURABLE_URL: REWIND_HOT_STORE in front of REWIND_STORE
        from checkpoint_bridge.stores.hot import HotTierObjectStore
        redis_url, durable = url[4:].split("+", 1)
        objects = HotTierObjectStore(redis_url, open_object_store(durable, endpoint_url=endpoint or None,
                                                                    region_name="us-east-1"))
    else:
        objects = open_object_store(url, endpoint_url=endpoint or None, region_name="us-east-1")
    store = CheckpointStore(objects)
    await objects.check_access()  # connections up before the clock starts, as for the baseline
    stored, listed_s = None, None
    if plain == "fork":  # a fork's read of its point: the run's listing, which it makes to find the step, told
        from checkpoint_bridge.branches.branching import checkpoint_at
        from checkpoint_bridge.checkpoints.lineage import resolve_step
        t = time.perf_counter()
        stored = await store.stored_steps(cid.split(":")[0])
        listed_s = time.perf_counter() - t
    t = time.perf_counter()
    if stored is not None:  # as `rewind fork` does: the step resolved (one small read), then its checkpoint
        run_id, branch, step = cid.split(":")
        point = await resolve_step(store, run_id, branch, int(step), stored=stored)
        n = len((await checkpoint_at(store, point, stored)).messages)
    elif plain != "0":
        doc = json.loads(await objects.get(plain))
        n = len(doc["messages"])
    else:
        n = len((await store.load(cid)).messages)
    print(json.dumps({"s": time.perf_counter() - t, "messages": n, "listed_s": listed_s}))
    await store.aclose()
asyncio.run(main())
"""

# Writes the run with another checkout's code (REWIND_BENCH_BEFORE), timing each step.
_WRITER = """
import asyncio, json, sys, time
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.stores import open_object_store
from workflows.vocabulary.contracts import StepRecord
url, endpoint, run_id, records_file = sys.argv[1:5]
async def main():
    objects = open_object_store(url, endpoint_url=endpoint or None, region_name="us-east-1")
    store, times = CheckpointStore(objects), []
    with open(records_file) as lines:
        records = [StepRecord.model_validate_json(line) for line in lines]
    for record in records:
        t = time.perf_counter()
        await store.save_step(record_parts(record))
        times.append(time.perf_counter() - t)
    raw = await store.raw_objects(run_id)
    print(json.dumps({"times": times, "stored": sum(map(len, raw.values())),
                      "pack_bytes": sum(len(v) for k, v in raw.items() if "/packs/" in k),
                      "packs": sum(1 for k in raw if "/packs/" in k)}))
    await store.aclose()
asyncio.run(main())
"""


def _in_new_process(script: str, tree: Path, *args: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree)}, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"process failed ({tree}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load_in_new_process(url: str, endpoint: str | None, cid: str, plain: str | None, tree: Path = REPO) -> float:
    """A cold load of `cid` (or, with `plain`, one GET + parse of that key) in a new process."""
    return _in_new_process(_LOADER, tree, url, endpoint or "", cid, plain or "0")["s"]


def _fork_read_in_new_process(url: str, endpoint: str | None, cid: str) -> tuple[float, float]:
    """A fork's read of `cid` in a new process: the load with each branch's end known, and the
    run's listing that told it (which the fork makes anyway, to find its step), timed apart."""
    out = _in_new_process(_LOADER, REPO, url, endpoint or "", cid, "fork")
    return out["s"], out["listed_s"]


def _write_before(url: str, endpoint: str | None, run_id: str, records_file: Path, n: int) -> dict:  # type: ignore[type-arg]
    assert BEFORE
    written = _in_new_process(_WRITER, Path(BEFORE), url, endpoint or "", run_id, str(records_file))
    times = written.pop("times")
    window = max(20, min(100, n // 4))
    return {**written, "save_early_s": median(times[1:1 + window]), "save_late_s": median(times[-window:])}


async def _measure(label: str, objects, url: str, endpoint: str | None, records: list[StepRecord], depths: list[int],  # type: ignore[no-untyped-def]
                   before_side=None) -> dict:  # type: ignore[no-untyped-def]
    counting = _Counting(objects)
    store = CheckpointStore(counting)  # type: ignore[arg-type]
    times, requests, stored_curve, raw_so_far = [], [], [], 0
    for record in records:
        parts = record_parts(record)
        before = dict(counting.counts)
        t = time.perf_counter()
        await store.save_step(parts)
        times.append(time.perf_counter() - t)
        requests.append({k: counting.counts[k] - before[k] for k in before})
        raw_so_far += len(json.dumps(record.new_messages).encode())
        stored_curve.append((record.step_index, counting.bytes_held, raw_so_far))
    run_id = records[0].run_id
    flush_s = None
    if hasattr(objects, "lag"):  # the hot tier: how long after the last write the durable store has it all
        t = time.perf_counter()
        while (await objects.lag()).pending:
            await asyncio.sleep(0.05)
        flush_s = time.perf_counter() - t
    raw_objects = await store.raw_objects(run_id)
    stored = sum(map(len, raw_objects.values()))
    before_store = await before_side(run_id) if before_side is not None else None  # (url, endpoint, what it wrote)
    loads = []
    for depth in depths:
        cid = checkpoint_id(run_id, "main", depth)
        reader = _Counting(objects)
        cp = await CheckpointStore(reader).load(cid)  # type: ignore[arg-type]
        full = dump_checkpoint(cp)
        raw = len(json.dumps(cp.messages).encode())
        # The plain GET of the same checkpoint stored as one object, at the depths the headline compares.
        plain_key = f"baseline/full-{depth:08d}.json" if depth in (depths[-1], len(records) // 4) else None
        if plain_key:
            await objects.put_if_absent(plain_key, full)
        cold, plain, before_cold, forked, listed = [], [], [], [], []
        for _ in range(LOAD_REPEATS if plain_key else 3):  # alternated: the machine's other work hits all alike
            cold.append(_load_in_new_process(url, endpoint, cid, None))
            if plain_key:
                plain.append(_load_in_new_process(url, endpoint, cid, plain_key))
                fork_s, listed_s = _fork_read_in_new_process(url, endpoint, cid)
                forked.append(fork_s)
                listed.append(listed_s)
            if before_store and plain_key:
                before_cold.append(_load_in_new_process(before_store[0], before_store[1], cid, None, Path(BEFORE or ".")))
        loads.append({"depth": depth, "cold_new_process_s": median(cold), "plain_new_process_s": median(plain),
                      "before_cold_new_process_s": median(before_cold), "document_bytes": len(full), "raw": raw,
                      "fork_read_new_process_s": median(forked), "fork_listing_s": median(listed),
                      "requests": reader.counts["get"], "listings": reader.counts["list"]})
    await store.aclose()
    n = len(records) - 1
    window = max(20, min(100, n // 4))  # sub-millisecond saves: medians over many steps
    early, late = times[1:1 + window], times[-window:]
    return {
        "label": label, "steps": n, "window": window, "flush_after_last_write_s": flush_s, "save_early_s": median(early), "save_late_s": median(late),
        "before": before_store[2] if before_store else None,
        "requests_early": requests[1], "requests_late": requests[-1],
        "stored": stored, "raw": loads[-1]["raw"], "loads": loads,
        "pack_bytes": sum(len(v) for k, v in raw_objects.items() if "/packs/" in k),
        "packs": sum(1 for k in raw_objects if "/packs/" in k),
        "save_curve": [(i, times[i]) for i in range(1, len(times), max(1, n // 100))],
        "storage_curve": stored_curve[1::max(1, n // 100)],
    }


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    n = 160 if suite.quick else 2000  # quick: CI, which only keeps the suite from rotting
    depths = sorted({10, 100, n // 4, n})
    sec = Section("store_scaling", "7. Store scaling: per-step cost and cold loads to "
                  f"{n:,} steps", __doc__.split("\n\n", 1)[1].replace("\n", " ").replace("N = 2,000; quick: 160", f"N = {n:,}"))
    records = _records(f"scale-{uuid.uuid4().hex[:8]}", n)
    records_file = suite.tmp / f"scaling-records-{uuid.uuid4().hex[:6]}.jsonl"
    records_file.write_text("".join(r.model_dump_json() + "\n" for r in records))
    results = []
    root = suite.tmp / f"scaling-{uuid.uuid4().hex[:6]}"
    log(f"store_scaling: {n} steps, local folder" + (f" (and {BEFORE}'s)" if BEFORE else ""))

    async def folder_before(run_id: str) -> tuple[str, None, dict]:  # type: ignore[type-arg]
        url = f"file://{suite.tmp / f'scaling-before-{uuid.uuid4().hex[:6]}'}"
        return url, None, await asyncio.to_thread(_write_before, url, None, run_id, records_file, n)

    results.append(await _measure("local folder", FileObjectStore(root), f"file://{root}", None, records, depths,
                                  folder_before if BEFORE else None))
    db = suite.tmp / f"scaling-{uuid.uuid4().hex[:6]}.db"
    log(f"store_scaling: {n} steps, SQLite file")
    results.append(await _measure("SQLite file", SqliteObjectStore(db), f"sqlite://{db}", None, records, depths))
    from rewind.local.servers import PostgresServer, postgres_binaries

    if postgres_binaries() is not None:
        from checkpoint_bridge.stores import PostgresObjectStore

        server = await asyncio.to_thread(PostgresServer.start)
        try:
            url = f"{server.url}?schema=scale"
            log(f"store_scaling: {n} steps, PostgreSQL (local server)")
            results.append(await _measure("PostgreSQL (local server)", PostgresObjectStore(url), url, None, records, depths))
        finally:
            await asyncio.to_thread(server.remove)
    else:
        log("store_scaling: PostgreSQL is not installed; its rows are left out")
    moto, endpoint = moto_process()
    try:
        import boto3

        bucket = f"scale-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        log(f"store_scaling: {n} steps, S3 (moto_server process)" + (f" (and {BEFORE}'s)" if BEFORE else ""))

        async def s3_before(run_id: str) -> tuple[str, str, dict]:  # type: ignore[type-arg]
            # A bucket of its own: moto answers a listing by going through every key of the bucket.
            other = f"scale-before-{uuid.uuid4().hex[:8]}"
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=other)
            url = f"s3://{other}/scale"
            return url, endpoint, await asyncio.to_thread(_write_before, url, endpoint, run_id, records_file, n)

        results.append(await _measure("S3 (moto_server)", S3ObjectStore(bucket, "scale", endpoint_url=endpoint),
                                      f"s3://{bucket}/scale", endpoint, records, depths, s3_before if BEFORE else None))
        from checkpoint_bridge.stores import DynamoObjectStore

        table = f"scale-{uuid.uuid4().hex[:8]}"
        log(f"store_scaling: {n} steps, DynamoDB (moto_server process)")
        results.append(await _measure("DynamoDB (moto_server)", DynamoObjectStore(table, "scale", endpoint_url=endpoint,
                                                                                  region_name="us-east-1"),
                                      f"dynamodb://{table}/scale", endpoint, records, depths))
        from rewind.local.servers import RedisServer, redis_binary

        if redis_binary() is not None:
            from checkpoint_bridge.stores import HotTierObjectStore

            redis_server = await asyncio.to_thread(RedisServer.start)
            try:
                bucket_hot = f"scale-hot-{uuid.uuid4().hex[:8]}"
                boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket_hot)
                log(f"store_scaling: {n} steps, Redis hot tier in front of S3 (moto_server process)")
                hot = HotTierObjectStore(redis_server.url, S3ObjectStore(bucket_hot, "scale", endpoint_url=endpoint))
                hot.start_flusher()  # as a worker runs it, in the writer's own process
                results.append(await _measure("Redis in front of S3", hot,
                                              f"hot+{redis_server.url}+s3://{bucket_hot}/scale", endpoint, records, depths))
            finally:
                await asyncio.to_thread(redis_server.remove)
        else:
            log("store_scaling: Redis is not installed; the hot tier's rows are left out")
    finally:
        moto.terminate()
        moto.wait(10)
    sec.data = {"steps": n, "results": results}

    def with_before(r: dict) -> list[dict]:  # type: ignore[type-arg]
        """The row of a store, and of the other checkout's run on it (REWIND_BENCH_BEFORE)."""
        return [r] + ([{**r, **r["before"], "label": f"{r['label']}, before"}] if r["before"] else [])

    rows = []
    for r in [b for r in results for b in with_before(r)]:
        rows.append([r["label"], r["save_early_s"] * 1000, r["save_late_s"] * 1000,
                     f"**{r['save_late_s'] / r['save_early_s']:.2f}x**",
                     ", ".join(f"{k} {v}" for k, v in r["requests_early"].items() if v) if "before" not in r["label"] else "–",
                     ", ".join(f"{k} {v}" for k, v in r["requests_late"].items() if v) if "before" not in r["label"] else "–"])
    window = results[0]["window"]
    sec.table(f"Writing a step (`save_step`), steps 1-{window} and the last {window} of {n:,} (median ms; requests per step)",
              ["store", "early", "late", "late / early", "requests, step 1", f"requests, step {n:,}"], rows)
    lrows = []
    for r in results:
        for ld in r["loads"]:
            plain = ld["plain_new_process_s"]
            fork_read = ld.get("fork_read_new_process_s")
            lrows.append([r["label"], f"{ld['depth']:,}", ld["document_bytes"], f"{ld['requests']} ({ld['listings']})",
                          ld["cold_new_process_s"] * 1000,
                          plain * 1000 if plain else "–",
                          f"**{ld['cold_new_process_s'] / plain:.1f}x**" if plain else "–",
                          f"{fork_read * 1000:.1f} (**{fork_read / plain:.1f}x**; its listing {ld['fork_listing_s'] * 1000:.1f})"
                          if plain and fork_read else "–"])
            if ld["before_cold_new_process_s"]:
                lrows.append([f"{r['label']}, before", f"{ld['depth']:,}", ld["document_bytes"], "–",
                              ld["before_cold_new_process_s"] * 1000, plain * 1000,
                              f"**{ld['before_cold_new_process_s'] / plain:.1f}x**"])
    sec.table(f"Cold load from a new process (ms; median of {LOAD_REPEATS} where compared with one plain GET, else 3)",
              ["store", "step", "document bytes", "GETs (listings)", "load", "plain GET + parse of one document",
               "load / plain", "a fork's read of its point, the branch's end known from its listing (ms, / plain)"],
              lrows)
    sec.table("Storage", ["store", "steps", "raw content", "stored", "stored / raw"],
              [[r["label"], r["steps"], r["raw"], r["stored"], f"**{r['stored'] / r['raw']:.2f}x**"]
               for r in [b for r in results for b in with_before(r)]])

    compared = [ld for ld in results[0]["loads"] if ld["plain_new_process_s"]]
    for r in results:
        growth = r["save_late_s"] / r["save_early_s"]
        ratio = r["stored"] / r["raw"]
        sec.headline += [
            ["7 store scaling", f"save_step, last {r['window']} of {n:,} steps / first {r['window']}, {r['label']}",
             f"{r['save_late_s'] * 1000:.2f} ms / {r['save_early_s'] * 1000:.2f} ms", f"**{growth:.2f}x**",
             f"≤ {SAVE_TARGET}x", "met" if growth <= SAVE_TARGET else "**not met**"],
            ["7 store scaling", f"checkpoint store / raw content, {n:,} steps, {r['label']}",
             f"{r['stored']:,} B / {r['raw']:,} B", f"**{ratio:.2f}x**", f"≤ {STORAGE_TARGET}x",
             "met" if ratio <= STORAGE_TARGET else "**not met**"],
        ]
        for ld in (ld for ld in r["loads"] if ld["plain_new_process_s"]):
            load_ratio = ld["cold_new_process_s"] / ld["plain_new_process_s"]
            sec.headline.append(
                ["7 store scaling", f"cold load of step {ld['depth']:,} from a new process / plain GET + parse, {r['label']}",
                 f"{ld['cold_new_process_s'] * 1000:.0f} ms / {ld['plain_new_process_s'] * 1000:.0f} ms",
                 f"**{load_ratio:.1f}x**", f"≤ {LOAD_TARGET:.0f}x", "met" if load_ratio <= LOAD_TARGET else "**not met**"])
            if ld.get("fork_read_new_process_s"):
                fork_ratio = ld["fork_read_new_process_s"] / ld["plain_new_process_s"]
                sec.headline.append(
                    ["7 store scaling", f"a fork's read of step {ld['depth']:,} (its listing told the branch's end) "
                     f"/ plain GET + parse, {r['label']}",
                     f"{ld['fork_read_new_process_s'] * 1000:.0f} ms / {ld['plain_new_process_s'] * 1000:.0f} ms",
                     f"**{fork_ratio:.1f}x**", f"≤ {LOAD_TARGET:.0f}x", "met" if fork_ratio <= LOAD_TARGET else "**not met**"])
            if ld["before_cold_new_process_s"]:
                sec.headline.append(
                    ["7 store scaling", f"the same, {before_name(BEFORE)}'s code and store, {r['label']}",
                     f"{ld['before_cold_new_process_s'] * 1000:.0f} ms / {ld['plain_new_process_s'] * 1000:.0f} ms",
                     f"**{ld['before_cold_new_process_s'] / ld['plain_new_process_s']:.1f}x**", "–", "–"])
        packs, n_packs = r["pack_bytes"], r["packs"]
        ld = r["loads"][-1]
        load_ratio = ld["cold_new_process_s"] / ld["plain_new_process_s"]
        sec.verdicts.append(
            f"{r['label']}: a step's write costs {growth:.2f}x at step {n:,} what it costs at the start "
            f"({'; '.join(f'{k} {v}' for k, v in r['requests_late'].items() if v)} at step {n:,}: "
            "the delta, written from what the step added, after reading nothing or the parent's small object; the "
            "last step of a block of 4 also merges the block, and the last step of each level's block writes that "
            "level's pack). "
            f"Storage is {ratio:.2f}x the raw content: the step objects {(r['stored'] - packs) / r['raw']:.2f}x "
            f"({(r['stored'] - packs) // n:,} B per step for {r['raw'] // n:,} B of content: every message once, plus "
            "the step's own facts: ids, times, tokens, ledger, the tool record, the envelope's hash and the chain's "
            f"digest) and {n_packs} packs {packs / r['raw']:.2f}x (gzip'd merged content, each finished block in one "
            "pack: the writer of a pack deletes the packs it holds whole). "
            f"A cold load of step {n:,} from a new process reads its head and {ld['requests'] - 1} packs and steps "
            f"(with {ld['listings']} listing{'s' if ld['listings'] != 1 else ''} beside them: the branch's rollback "
            "markers, and its packs when the blocks' packs it expects are gone) and takes "
            f"{load_ratio:.1f}x one GET + "
            "parse of the whole document: what is left is parsing the merged content, checking its hashes against "
            "the chain's digest, validating the document and the requests"
            + (" (on moto each costs milliseconds of server time, and a listing goes through every key of the bucket)."
               if "moto" in r["label"] or "S3" in r["label"] else "."))
    if BEFORE:
        for r in (r for r in results if r["before"]):
            sec.verdicts.append(
                f"{r['label']}, against {before_name(BEFORE)}, the code before, in the same run: cold load / plain GET "
                + ", ".join(f"at step {ld['depth']:,} {ld['cold_new_process_s'] / ld['plain_new_process_s']:.1f}x "
                            f"(before {ld['before_cold_new_process_s'] / ld['plain_new_process_s']:.1f}x)" for ld in compared
                            for ld in [next(x for x in r["loads"] if x["depth"] == ld["depth"])])
                + f"; storage {r['stored'] / r['raw']:.2f}x the raw content (before {r['before']['stored'] / r['raw']:.2f}x); "
                f"save_step last / first {r['save_late_s'] / r['save_early_s']:.2f}x "
                f"(before {r['before']['save_late_s'] / r['before']['save_early_s']:.2f}x).")
    by_label = {r["label"]: r for r in results}
    if "Redis in front of S3" in by_label and "S3 (moto_server)" in by_label:
        hot, s3 = by_label["Redis in front of S3"], by_label["S3 (moto_server)"]
        for ld_hot, ld_s3 in zip(hot["loads"], s3["loads"]):
            sec.headline.append(["7 store scaling", f"cold load of step {ld_hot['depth']:,}, Redis in front of S3 / S3 alone",
                                 f"{ld_hot['cold_new_process_s'] * 1000:.0f} ms / {ld_s3['cold_new_process_s'] * 1000:.0f} ms",
                                 f"**{ld_hot['cold_new_process_s'] / ld_s3['cold_new_process_s']:.2f}x**", "< 1x",
                                 "met" if ld_hot["cold_new_process_s"] < ld_s3["cold_new_process_s"] else "**not met**"])
        sec.verdicts.append(
            f"Redis in front of S3: a step's write takes {hot['save_late_s'] * 1000:.2f} ms against S3's "
            f"{s3['save_late_s'] * 1000:.2f} ms ({hot['save_late_s'] / s3['save_late_s']:.2f}x), the flusher in the "
            f"same process moving it to S3 meanwhile; S3 had every object {hot['flush_after_last_write_s']:.2f} s after "
            f"the last write. A cold load of step {n:,} reads Redis: {hot['loads'][-1]['cold_new_process_s'] * 1000:.0f} ms "
            f"against S3's {s3['loads'][-1]['cold_new_process_s'] * 1000:.0f} ms.")

    def draw(axes):  # type: ignore[no-untyped-def]
        for r in results:
            xs, ys = zip(*r["save_curve"])
            axes[0].plot(xs, [y * 1000 for y in ys], label=r["label"])
            axes[1].plot([ld["depth"] for ld in r["loads"]], [ld["cold_new_process_s"] * 1000 for ld in r["loads"]],
                         marker="o", label=r["label"])
        steps_, stored_, raw_ = zip(*results[0]["storage_curve"])
        axes[2].plot(steps_, [b / 1e6 for b in stored_], label="checkpoint store (packs included)")
        axes[2].plot(steps_, [b / 1e6 for b in raw_], label="raw content (messages)", linestyle="--")
        axes[0].set(title="save_step time by step (the mirror's work)", xlabel="step", ylabel="ms")
        axes[1].set(title="cold load from a new process", xlabel="step loaded", ylabel="ms")
        axes[2].set(title="bytes stored by step", xlabel="step", ylabel="MB")

    save_figure(sec, "store_scaling", suite.quick, draw, ncols=3, figsize=(14, 3.6))
    return sec
