"""Packs: finished blocks of steps copied into one object, so a deep checkpoint
loads in few requests; the step objects stay the record.

A reader that finds a pack missing, damaged, foreign or holding an altered
object loads the same checkpoint from the step objects, and listings never
show packs.
"""

from __future__ import annotations

import gzip
import json

from checkpoint_factory import make_run, next_step
from store_backends import Backend
from test_store_linear_storage import CountingObjects

from checkpoint_bridge.document.packs import PACK_STEPS, block_of, decode_pack
from checkpoint_bridge.store import CheckpointStore

PACK = "runs/run-1/branches/main/packs/00000032-00000063.json.gz"


async def _saved(store: CheckpointStore, steps: int) -> list:
    run = make_run(steps, result_size=256)
    for cp in run:
        await store.save(cp)
    return run


async def _load_counting(backend: Backend, store: CheckpointStore, cid: str):  # type: ignore[no-untyped-def]
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    cp = await CheckpointStore(counting, concurrency=256).load(cid)  # type: ignore[arg-type]
    return cp, counting.gets


async def test_each_finished_block_is_packed_once_with_the_exact_bytes_of_its_steps(store: CheckpointStore) -> None:
    await _saved(store, 100)  # steps 0..99: blocks 0-31, 32-63, 64-95 are finished
    raw = await store.raw_objects("run-1")
    packs = sorted(k for k in raw if "/packs/" in k)
    assert packs == [f"runs/run-1/branches/main/packs/{lo:08d}-{lo + PACK_STEPS - 1:08d}.json.gz" for lo in (0, 32, 64)]
    objects = decode_pack(block_of("run-1", "main", 40), raw[PACK])
    assert objects is not None and sorted(objects) == list(range(32, 64))
    assert all(objects[s] == raw[f"runs/run-1/branches/main/steps/{s:08d}.json"] for s in objects)
    header = json.loads(gzip.decompress(raw[PACK]).split(b"\n", 1)[0])
    assert header["format"] == "rewind.pack/v1" and header["first"] == 32 and header["last"] == 63
    # Listings and the tree see steps only.
    assert [s.step_index for s in await store.list_checkpoints("run-1")] == list(range(100))


async def test_a_deep_checkpoint_reads_packs_and_the_steps_after_the_last_block(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 100)
    cp, gets = await _load_counting(backend, store, "run-1:main:99")
    assert cp == run[99]
    assert gets == 1 + 3 + 3  # the head, three packs, steps 96..98


async def test_a_missing_pack_costs_one_more_round_and_the_same_checkpoint(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 100)
    await store.objects.delete_prefix(PACK)
    cp, gets = await _load_counting(backend, store, "run-1:main:99")
    assert cp == run[99]
    assert gets == 1 + 3 + 3 + 32  # ... and the block's 32 steps one by one


async def test_a_damaged_or_foreign_pack_is_ignored(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 100)
    raw = await store.raw_objects("run-1")
    other = "runs/run-1/branches/main/packs/00000064-00000095.json.gz"
    for bad in (b"not gzip at all", gzip.compress(b"{}\n"), raw[other], raw[PACK][: len(raw[PACK]) // 2]):
        backend.tamper(store.objects, PACK, bad)
        cp, gets = await _load_counting(backend, store, "run-1:main:99")
        assert cp == run[99] and gets == 1 + 3 + 3 + 32, bad[:20]


async def test_an_altered_object_inside_a_pack_is_caught_by_its_hash_and_read_from_its_step(
    store: CheckpointStore, backend: Backend,
) -> None:
    run = await _saved(store, 100)
    raw = await store.raw_objects("run-1")
    header, _, rest = gzip.decompress(raw[PACK]).partition(b"\n")
    sizes = json.loads(header)["sizes"]
    start = sum(sizes[:8])  # the object of step 40
    target = rest[start:start + sizes[8]]
    altered = target.replace(b'"tool_call_id":"call_main_40"', b'"tool_call_id":"call_main_4X"')
    assert altered != target and len(altered) == len(target)
    backend.tamper(store.objects, PACK, gzip.compress(header + b"\n" + rest[:start] + altered + rest[start + len(target):]))
    cp, gets = await _load_counting(backend, store, "run-1:main:99")
    assert cp == run[99]
    assert gets == 1 + 3 + 3 + 1  # ... and step 40's own object


async def test_a_fork_packs_its_own_part_of_a_block_and_loads_through_its_parents_packs(
    store: CheckpointStore, backend: Backend,
) -> None:
    run = await _saved(store, 70)  # main 0..69: blocks 0-31, 32-63 packed
    fork = [next_step(run[40], branch_id="b")]  # b starts at 41, inside block 32-63
    while fork[-1].step_index < 66:
        fork.append(next_step(fork[-1]))
    for cp in fork:
        await store.save(cp)
    raw = await store.raw_objects("run-1")
    objects = decode_pack(block_of("run-1", "b", 63), raw["runs/run-1/branches/b/packs/00000032-00000063.json.gz"])
    assert objects is not None and sorted(objects) == list(range(41, 64))
    cp, gets = await _load_counting(backend, store, "run-1:b:66")
    assert cp == fork[-1]
    # The head; main's pack 0-31, then steps 32..40 one by one (the chain ends at 40 on main, so the
    # reader does not count on a pack of 32-63 there); b's own pack (41..63) and steps 64, 65.
    assert gets == 1 + 1 + 9 + 1 + 2


async def test_saving_a_run_again_writes_nothing_new(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 64)
    before = await store.raw_objects("run-1")
    again = backend.twin(store)
    for cp in run:
        await again.save(cp)
    assert await again.raw_objects("run-1") == before
