"""The store side of erasing runs, on every backend: a run's whole prefix goes and
nothing of another run; counts say what was there; deleting again is harmless; the
age gc compares is the newest checkpoint's own created_at, of any branch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from checkpoint_factory import T0, first_step, next_step
from store_backends import Backend

from checkpoint_bridge.checkpoints.erasure import (
    PartialDeletion,
    delete_keys,
    delete_run_objects,
    idempotency_keys_in,
    last_checkpoint_at,
    run_object_keys,
)
from checkpoint_bridge.document import envelope
from checkpoint_bridge.document.schema import ToolCallRecord
from checkpoint_bridge.checkpoints.store import CheckpointStore

KEY = "idem-" + "a1" * 20


async def _run(store: CheckpointStore, run_id: str, steps: int, *, fork_at: int | None = None) -> list:
    cp = first_step(run_id)
    await store.save(cp)
    chain = [cp]
    for _ in range(steps):
        chain.append(next_step(chain[-1]))
        await store.save(chain[-1])
    if fork_at is not None:
        fork = next_step(chain[fork_at], branch_id="alt", created_at=T0 + timedelta(hours=5))
        await store.save(fork)
        chain.append(fork)
    await store.invalidate_after(run_id, "main", 1, "rolled back")
    return chain


async def test_a_run_goes_whole_and_only_it(backend: Backend) -> None:
    store = backend.checkpoint_store()
    await _run(store, "gone", 3, fork_at=1)
    await _run(store, "gone-too", 1)  # a run whose id starts with the other's stays
    await _run(store, "kept", 2)
    keys = await run_object_keys(store, "gone")
    assert {k.split("/")[3] for k in keys} == {"main", "alt"} and any("/invalidations/" in k for k in keys)
    kept_before = await store.raw_objects("kept")

    assert await delete_run_objects(store, "gone") == len(keys)
    assert await run_object_keys(store, "gone") == []
    assert await store.list_checkpoints("gone") == []
    assert await store.raw_objects("kept") == kept_before and await run_object_keys(store, "gone-too")
    assert await delete_run_objects(store, "gone") == 0  # again: nothing there, no error
    # The same ids can be written again (a rebuilt run) on a fresh store over the same place.
    twin = backend.twin(store)
    await twin.save(first_step("gone"))
    assert [s.checkpoint_id for s in await twin.list_checkpoints("gone")] == ["gone:main:0"]


async def test_delete_keys_counts_what_was_there_and_reports_a_partial_failure(backend: Backend) -> None:
    objects = backend.objects()
    for key in ["outputs/aa/1.json", "outputs/bb/2.json"]:
        await objects.put_if_absent(key, b"{}")
    assert await delete_keys(objects, ["outputs/aa/1.json", "outputs/bb/2.json", "outputs/cc/3.json"]) == 2
    assert await delete_keys(objects, ["outputs/aa/1.json"]) == 0
    assert await objects.list("") == []
    broken = backend.broken()
    backend.opened.append(broken)
    with pytest.raises(PartialDeletion) as caught:
        await delete_keys(broken, ["outputs/aa/1.json"])
    assert caught.value.removed == 0 and broken.url in str(caught.value.error)


async def test_last_checkpoint_time_is_the_newest_created_at_of_any_branch(backend: Backend) -> None:
    store = backend.checkpoint_store()
    assert await last_checkpoint_at(store, "none") is None
    plain = await _run(store, "r", 4)
    assert await last_checkpoint_at(store, "r") == plain[-1].created_at > plain[-2].created_at
    forked = await _run(store, "forked", 4, fork_at=1)  # the fork's one step is hours newer than main's head
    assert await last_checkpoint_at(store, "forked") == T0 + timedelta(hours=5) > forked[-2].created_at


async def _with_an_effect(store: CheckpointStore, run_id: str) -> None:
    """A run whose step 1 made a side-effecting call, keyed KEY."""
    cp = first_step(run_id)
    await store.save(cp)
    record = ToolCallRecord(tool_name="send", tool_input={"to": "x"}, tool_output="sent", called_at=T0,
                            idempotency_key=KEY, side_effects=True)
    step = next_step(cp)
    await store.save(step.model_copy(update={"tool_call_cache": [*step.tool_call_cache, record]}))


async def test_idempotency_keys_are_read_from_the_step_objects(backend: Backend) -> None:
    store = backend.checkpoint_store()
    await _with_an_effect(store, "fx")
    await _run(store, "plain", 1)
    assert await idempotency_keys_in(store, "fx") == {KEY}
    assert await idempotency_keys_in(store, "plain") == set()


async def test_idempotency_keys_are_read_from_plain_objects_and_from_what_a_damaged_one_still_holds(
        backend: Backend) -> None:
    plain = backend.checkpoint_store(compression="none")  # plain JSON, as an older Rewind wrote
    await _with_an_effect(plain, "fx")
    assert await idempotency_keys_in(plain, "fx") == {KEY}
    # The same step gzip'd, its tail cut off: the deletion goes on (the object goes with the run).
    key = "runs/fx/branches/main/steps/00000001.json"
    zipped = envelope.compress((await plain.raw_objects("fx"))[key])
    backend.tamper(plain.objects, key, zipped[: len(zipped) - 6])
    assert await idempotency_keys_in(backend.twin(plain), "fx") == {KEY}
