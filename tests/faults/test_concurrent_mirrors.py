"""Issue 7, item 5: several mirrors writing the same run into one store at once.

Checkpoint objects are immutable and written with an exclusive create
(`os.link` / S3 `If-None-Match: *`), so mirrors racing on a key can never
leave two different objects, or replace one object by another with the same
bytes. Packs are copies that a newer pack's writer deletes: a slower mirror
may write one again after that, which costs storage, never what a reader gets;
every pack the run needs is there, with the bytes one writer gives it. Checked on both backends: three concurrent `mirror_run`s into one
fresh store (two sharing a CheckpointStore, one from a second instance on
the same location), and a live run whose worker mirror races `rewind mirror`
loops into the worker's own store.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.projection.mirror import mirror_run
from checkpoint_bridge.stores import FileObjectStore, S3ObjectStore
from checkpoint_bridge.checkpoints.store import CheckpointStore, open_checkpoint_store
from fault_helpers import SlowStepWrites, add_script, assert_chain, assert_same_run, assert_well_formed
from helpers import outputs_of, start_agent

TOOL_STEPS = 9
LAST_STEP = TOOL_STEPS + 1


def _script(model, seconds: float = 0.0) -> str:
    turns = [
        {"tool_calls": [
            {"name": "lookup", "arguments": {"term": f"t{i}"}},
            *([{"name": "slow", "arguments": {"label": f"s{i}", "seconds": seconds}}] if seconds else []),
        ]}
        for i in range(TOOL_STEPS)
    ]
    return add_script(model, [*turns, {"content": "done"}])


class Location:
    """One store location on a backend, and ways to look at it from outside."""

    def __init__(self, backend: str, tmp_path: Path, moto_endpoint: str | None) -> None:
        self.backend = backend
        if backend == "file":
            self.root = tmp_path / f"store-{uuid.uuid4().hex[:6]}"
            self.url = f"file://{self.root}"
        else:
            assert moto_endpoint
            self.endpoint = moto_endpoint
            self.s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
            self.bucket = f"race-{uuid.uuid4().hex[:8]}"
            self.prefix = "mirrors"
            self.s3.create_bucket(Bucket=self.bucket)
            # Every accepted PUT becomes a version: an overwrite, even with the same bytes, shows.
            self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
            self.url = f"s3://{self.bucket}/{self.prefix}"

    def open(self) -> CheckpointStore:
        """A new CheckpointStore instance (own cache and connections) on this location."""
        if self.backend == "file":
            return CheckpointStore(FileObjectStore(self.root))
        return CheckpointStore(S3ObjectStore(self.bucket, self.prefix, endpoint_url=self.endpoint))

    def identities(self, run_id: str) -> dict[str, tuple]:
        """Per stored object of the run but packs (copies, see above): what would change if it were rewritten."""
        if self.backend == "file":
            base = self.root / "runs" / run_id
            out = {}
            for path in sorted(base.rglob("*")):
                if path.is_file() and not path.name.startswith(".tmp-") and path.parent.name != "packs":  # a writer's file in flight
                    st = path.stat()
                    out[path.relative_to(self.root).as_posix()] = (st.st_ino, st.st_mtime_ns, st.st_nlink)
            return out
        out: dict[str, tuple] = {}
        pages = self.s3.get_paginator("list_object_versions").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}/runs/{run_id}/"
        )
        for page in pages:
            assert not [m for m in page.get("DeleteMarkers", []) if "/packs/" not in m["Key"]]
            for v in page.get("Versions", []):
                key = v["Key"][len(self.prefix) + 1:]
                if "/packs/" in key:
                    continue
                out[key] = out.get(key, ()) + ((v["VersionId"], v["ETag"]),)
        return out

    def assert_one_object_per_key(self, run_id: str, expected_keys: set[str]) -> dict[str, tuple]:
        found = self.identities(run_id)
        expected_keys = {k for k in expected_keys if "/packs/" not in k}
        assert set(found) == expected_keys, sorted(set(found) ^ expected_keys)  # no stray temp files either
        if self.backend == "file":
            # One link per object: the temp file every writer links from was removed.
            assert all(nlink == 1 for _ino, _mtime, nlink in found.values()), found
            leftovers = [p for p in self.root.rglob("*") if p.is_file() and p.name.startswith(".tmp-")]
            assert not leftovers, leftovers
        else:
            assert all(len(versions) == 1 for versions in found.values()), found
        return found


class Watcher(threading.Thread):
    """Samples the identities of a run's objects in a tight loop while mirrors race."""

    def __init__(self, location: Location, run_id: str) -> None:
        super().__init__(daemon=True)
        self.location, self.run_id = location, run_id
        self.seen: dict[str, set] = {}
        self.vanished: list[str] = []
        self.samples = 0
        self._stop_flag = threading.Event()

    def run(self) -> None:
        while not self._stop_flag.is_set():
            try:
                current = self.location.identities(self.run_id)
            except FileNotFoundError as exc:  # an object vanished between listing and stat
                self.vanished.append(str(exc))
                continue
            for key, ident in current.items():
                self.seen.setdefault(key, set()).add(ident if self.location.backend == "s3" else ident[0])
            self.samples += 1
            time.sleep(0.001 if self.location.backend == "file" else 0.005)

    def halt(self) -> None:
        self._stop_flag.set()
        self.join(10)

    def stop(self) -> dict[str, set]:
        self.halt()
        assert self.samples >= 2, "the watcher never sampled"
        assert not self.vanished, f"objects disappeared while the mirrors raced: {self.vanished}"
        return self.seen


@pytest.fixture(params=["file", "s3"])
def location(request, tmp_path, monkeypatch) -> Location:
    endpoint = request.getfixturevalue("moto_endpoint") if request.param == "s3" else None
    if endpoint:  # for the in-process worker's S3 store
        request.getfixturevalue("settings").s3_endpoint_url = endpoint
    return Location(request.param, tmp_path, endpoint)


async def test_three_concurrent_mirrors_rebuild_one_store(location, worker, client, settings, model, events_file):
    # Store A: the live mirror of the `worker` fixture (a local folder).
    handle = await start_agent(client, settings, "race the mirrors", model=_script(model))
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status.state == "completed" and result.status.mirror_pending == 0
    run_id = handle.id
    async with open_checkpoint_store(settings.store_url) as store_a:
        objects_a = await store_a.raw_objects(run_id)
    assert sum("/steps/" in key for key in objects_a) == LAST_STEP + 1  # and the packs of its finished blocks

    # Store B, fresh: two mirrors on one CheckpointStore, a third from another instance.
    shared, twin = location.open(), location.open()
    watcher = Watcher(location, run_id)
    try:
        watcher.start()
        tasks = [
            asyncio.ensure_future(mirror_run(client, shared, run_id, outputs=outputs_of(settings))),
            asyncio.ensure_future(mirror_run(client, shared, run_id, outputs=outputs_of(settings))),
            asyncio.ensure_future(mirror_run(client, twin, run_id, outputs=outputs_of(settings))),
        ]
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        # As soon as one mirror has finished, every object exists; note who they are.
        after_first = location.identities(run_id)
        after_first_bytes = await twin.raw_objects(run_id)
        reports = await asyncio.gather(*tasks)
        seen = watcher.stop()
        # While they raced, no key ever named two different objects (file: inode, S3: version).
        replaced = {k: v for k, v in seen.items() if len(v) > 1}
        assert not replaced, f"objects replaced while the mirrors raced: {replaced}"

        assert all(r.checkpoints == LAST_STEP + 1 for r in reports), reports
        assert_same_run(after_first_bytes, objects_a)
        final = location.assert_one_object_per_key(run_id, set(objects_a))
        assert final == after_first, "an object was rewritten after the first mirror finished"
        assert_same_run(await shared.raw_objects(run_id), objects_a)
        async with location.open() as third:
            assert_same_run(await third.raw_objects(run_id), objects_a)
        await assert_chain(twin, run_id, LAST_STEP)
        # Each report counts what the store lacked when that mirror started:
        # more than one object per step in total means they really overlapped.
        claimed = sum(r.written for r in reports)
        print(f"\n[concurrent mirrors, {location.backend}] {len(objects_a)} checkpoints; "
              f"the three mirrors each found missing: {[r.written for r in reports]} "
              f"(sum {claimed}: {'they overlapped' if claimed > len(objects_a) else 'one ran before the others'}); "
              f"one object per key, bytes equal store A's")
    finally:
        watcher.halt()
        await shared.aclose()
        await twin.aclose()


@pytest.fixture
def s3_location(tmp_path, moto_endpoint) -> Location:
    return Location("s3", tmp_path, moto_endpoint)


# S3 only: the worker's writes go through a proxy that delays them, so the
# `rewind mirror` loops (straight to S3) really get to write steps first. A
# local folder cannot be slowed from outside, and the live mirror, which
# writes a step from its record at once, would always win the race (file
# stores' exclusive creates under concurrency: the three-mirrors test above).
async def test_live_mirror_races_rewind_mirror_loops(s3_location, client, settings, model, events_file, tmp_path):
    from worker import build_worker

    location = s3_location

    settings.store_url = location.url  # the worker mirrors into this location
    # The worker's checkpoint PUTs held 0.3 s: the `rewind mirror` loops (straight to S3) then
    # get to write some steps first, so the race really happens.
    proxy = SlowStepWrites(location.endpoint, 0.3)
    await proxy.start()
    settings.s3_endpoint_url = proxy.url
    registry = ToolRegistry.from_modules(["agent_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    loop_stores = [location.open() for _ in range(3)]  # three `rewind mirror` processes
    reports = []
    watcher: Watcher | None = None
    loops: list[asyncio.Future] = []

    async def rewind_mirror_loop(store: CheckpointStore, done: asyncio.Event) -> None:
        while not done.is_set():
            reports.append(await mirror_run(client, store, run_id, outputs=outputs_of(settings)))
            await asyncio.sleep(0.01)

    try:
        async with build_worker(client, settings, registry, endpoint):
            handle = await start_agent(client, settings, "race the live mirror", model=_script(model, seconds=0.2))
            run_id = handle.id
            watcher = Watcher(location, run_id)
            watcher.start()
            done = asyncio.Event()
            loops += [asyncio.ensure_future(rewind_mirror_loop(s, done)) for s in loop_stores]
            result = await asyncio.wait_for(handle.result(), 90)
            done.set()
            await asyncio.gather(*loops)
            reports.append(await mirror_run(client, loop_stores[0], run_id, outputs=outputs_of(settings)))
            seen = watcher.stop()
        replaced = {k: v for k, v in seen.items() if len(v) > 1}
        assert not replaced, f"objects replaced while the mirrors raced: {replaced}"
        assert result.status.state == "completed", result.status
        # No mirror ever met a conflicting object: the live one reports no error.
        assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status
        raced = sum(r.written for r in reports)
        assert raced >= 1, "the `rewind mirror` loops never wrote a checkpoint first: no race happened"

        async with open_checkpoint_store(settings.store_url, endpoint_url=settings.s3_endpoint_url) as live:
            stored = await live.raw_objects(run_id)
            checkpoints = await assert_chain(live, run_id, LAST_STEP)
        assert_well_formed(checkpoints[-1].messages)
        location.assert_one_object_per_key(run_id, set(stored))
        # The same bytes as a rebuild from history into an empty store.
        async with open_checkpoint_store(f"file://{tmp_path / 'rebuilt'}") as rebuilt:
            await mirror_run(client, rebuilt, run_id, outputs=outputs_of(settings))
            assert_same_run(stored, await rebuilt.raw_objects(run_id))
        print(f"\n[live mirror vs rewind mirror, {location.backend}] {len(reports)} `rewind mirror` passes during the "
              f"run; {raced} times a pass found a step the worker's mirror had not written yet and wrote it "
              f"({len(stored)} checkpoints); no conflict, one object per key, same bytes as a rebuild from history")
    finally:
        await proxy.stop()
        for task in loops:
            task.cancel()
        if watcher is not None:
            watcher.halt()
        for store in loop_stores:
            await store.aclose()
