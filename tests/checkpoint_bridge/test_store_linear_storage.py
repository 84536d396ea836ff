"""Conformance: storage grows linearly with run length, reads stay proportional to the delta.

The workload of the design note: 200 steps, each appending an assistant tool
call and a 2 KB tool result, plus one tool record. Rewriting the whole
message list at every step (what LangGraph's savers do) stores ~100x the
content for such a run; Rewind must stay within a small constant factor.
"""

from __future__ import annotations

import json

from checkpoint_factory import make_run
from store_backends import Backend

from checkpoint_bridge.objects import ObjectStore
from checkpoint_bridge.schema import dump_checkpoint
from checkpoint_bridge.store import CheckpointStore

STEPS = 200
RESULT = 2048


async def _stored(store: CheckpointStore, run: list) -> int:
    for cp in run:
        await store.save(cp)
    return sum(map(len, (await store.raw_objects(run[0].run_id)).values()))


async def test_storage_is_linear_in_the_messages(backend: Backend) -> None:
    # Tool records hold a short summary; the 2 KB result lives in the messages.
    run = make_run(STEPS, result_size=RESULT, record_output="summary")
    message_bytes = len(json.dumps(run[-1].messages).encode())
    store = backend.checkpoint_store()
    rewind = await _stored(store, run)
    rewrite_every_step = await _stored(backend.checkpoint_store(snapshot_every=1, snapshot_spacing="fixed"), run)
    assert rewind <= 3 * message_bytes, (rewind, message_bytes)
    assert rewrite_every_step >= 30 * rewind, (rewrite_every_step, rewind)
    assert await backend.twin(store).load(run[-1].checkpoint_id) == run[-1]


async def test_storage_is_linear_in_the_whole_document(store: CheckpointStore) -> None:
    # Tool records repeat the full result (so each step adds ~4 KB of content).
    run = make_run(STEPS, result_size=RESULT, record_output="full")
    stored = await _stored(store, run)
    assert stored <= 3 * len(dump_checkpoint(run[-1])), (stored, len(dump_checkpoint(run[-1])))


class CountingObjects:
    """An ObjectStore wrapper that counts GETs (a real backend underneath)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.url, self.gets = inner, inner.url, 0

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await self.inner.get(key)

    def __getattr__(self, name: str):  # put_if_absent, list, ... pass straight through
        return getattr(self.inner, name)


async def test_reading_the_next_step_costs_one_object(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(120, result_size=256)
    for cp in run:
        await store.save(cp)
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    reader = CheckpointStore(counting)  # type: ignore[arg-type]
    assert await reader.load("run-1:main:110") == run[110]
    # Cold: step 110, then steps 100..109 fetched together (100 is a snapshot).
    assert counting.gets == 11
    for step in range(111, 120):
        counting.gets = 0
        assert await reader.load(f"run-1:main:{step}") == run[step]
        assert counting.gets == 1
