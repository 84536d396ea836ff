"""Packs: a chain's finished blocks of steps, merged, in levels of 4, 16, 64, 256
and 1,024 steps, so a deep checkpoint loads in one round of few requests (two
off "main"); the step objects stay the record. Below the top level, a level's
pack holds its blocks since the start of the enclosing block of the level
above (1 to 3 of them), so a chain takes one pack per level; and the writer of
a pack deletes the packs it holds whole, so each block is in about one pack. A
checkpoint older than its branch's packs takes its blocks from the newer pack
that holds them, which the branch's listing names.

Whatever a reader takes from a pack must add up to the digest its head records:
a pack that is missing, damaged, of a newer format, another block's, or
well-formed but wrong loads the same checkpoint from another pack that holds
its blocks or from the step objects, never a partial one. Listings never show packs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging

import pytest
from checkpoint_factory import make_run, next_step
from counting_objects import CountingObjects
from store_backends import Backend

from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.packs import PACK_FORMAT_V2, Piece, blocks_in, decode_pack_v2, encode_pack_v2
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.migrations import validate_document
from workflows.vocabulary.errors import StoreUnavailableError

MAIN = "runs/run-1/branches/main"
PACK_0_47 = f"{MAIN}/packs/00000000-00000047.json.gz"  # level 2, cumulative: blocks 0-3 .. 44-47
PACK_0_63 = f"{MAIN}/packs/00000000-00000063.json.gz"  # level 3: blocks 0-3 .. 60-63


async def _saved(store: CheckpointStore, steps: int) -> list:
    run = make_run(steps, result_size=256)
    for cp in run:
        await store.save(cp)
    return run


async def _branch(store: CheckpointStore, parent, branch_id: str, last: int) -> list:  # type: ignore[no-untyped-def]
    """A branch forked from `parent`, stored up to step `last`."""
    steps = [next_step(parent, branch_id=branch_id)]
    while steps[-1].step_index < last:
        steps.append(next_step(steps[-1]))
    for cp in steps:
        await store.save(cp)
    return steps


async def _load_counting(backend: Backend, store: CheckpointStore, cid: str, hold: int = 0):  # type: ignore[no-untyped-def]
    counting = CountingObjects(backend.reopen(store.objects), hold=hold, head=True)
    backend.opened.append(counting.inner)
    cp = await CheckpointStore(counting, concurrency=256).load(cid)  # type: ignore[arg-type]
    return cp, counting


def _packs(raw: dict[str, bytes], branch: str = "main") -> list[str]:
    return sorted(k[len(f"runs/run-1/branches/{branch}/packs/"):] for k in raw
                  if k.startswith(f"runs/run-1/branches/{branch}/packs/"))


async def test_each_finished_block_is_in_one_pack_the_newest_that_holds_it(store: CheckpointStore) -> None:
    await _saved(store, 48)  # steps 0..47
    raw = await store.raw_objects("run-1")
    # Level 2's pack of blocks 0-15 .. 32-47 (cumulative since 0, the start of level 3's block):
    # the packs it holds whole (0-31, and level 1's 32-43) were deleted by its writer.
    assert _packs(raw) == ["00000000-00000047.json.gz"]
    parts = [bytes(p[0]) for p in decode_pack_v2("run-1", Piece("main", 0, 47, 2, cumulative=True), raw[PACK_0_47]) or []
             if p]
    assert len(parts) == 12
    block = json.loads(parts[9])  # steps 36-39, merged: 2 messages and a tool record each
    assert (block["first"], block["last"], block["parent_id"]) == (36, 39, "run-1:main:35")
    assert len(block["messages"]) == 8 and len(block["tool_records"]) == 4
    # A tool output that is the tool message's content is stored once, in the message.
    assert all(r["tool_output"] is None for r in block["tool_records"]) and len(block["outputs"]) == 4
    header = json.loads(gzip.decompress(raw[PACK_0_47]).split(b"\n", 1)[0])
    assert header["format"] == PACK_FORMAT_V2 and [b[:2] for b in header["blocks"]] == [[lo, lo + 3] for lo in range(0, 48, 4)]
    # Each step records the digest of the blocks before it; the last of a block its block's hash too.
    step_39 = json.loads(object_json(raw[f"{MAIN}/steps/00000039.json"], "39"))
    assert step_39["format"] == "rewind.checkpoint/v3"
    assert step_39["payload"]["block_sha256"] == hashlib.sha256(parts[9]).hexdigest()
    assert "block_sha256" not in json.loads(object_json(raw[f"{MAIN}/steps/00000038.json"], "38"))["payload"]
    run = make_run(70, result_size=256)
    for cp in run[48:]:
        await store.save(cp)
    # Level 3's block 0-63 is one pack now; 64-67 is level 1's. Listings and the tree see steps only.
    assert _packs(await store.raw_objects("run-1")) == ["00000000-00000063.json.gz", "00000064-00000067.json.gz"]
    assert [s.step_index for s in await store.list_checkpoints("run-1")] == list(range(70))


async def test_a_deep_checkpoint_loads_in_two_rounds_of_few_requests(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 100)
    cp, counting = await _load_counting(backend, store, "run-1:main:99", hold=4)
    assert cp == run[99]
    # At once: the head, steps 96, 97, 98 and a listing of the branch's packs; then the packs it
    # shows that hold blocks 0-95: 0-63 and 64-95 (two blocks of 16).
    assert counting.gets == 1 + 3 + 2 and counting.most_in_flight == 4
    assert [p for p in counting.listed if "/packs/" in p] == [f"{MAIN}/packs/"]


async def test_a_missing_pack_is_read_from_its_steps_when_no_other_pack_holds_it(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 100)
    await store.objects.delete_prefix(PACK_0_63)
    cp, counting = await _load_counting(backend, store, "run-1:main:99")
    assert cp == run[99]
    # The head and steps 96-98; packs 0-63 (which the listing beside them did not show: one
    # that a writer has not packed yet is still looked for) and 64-95; then, a second listing
    # naming no other pack of blocks 0-63, their 64 steps.
    assert counting.gets == 1 + 3 + 2 + 64


async def test_a_missing_pack_of_one_block_is_read_from_its_steps(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 70)
    cp, counting = await _load_counting(backend, store, "run-1:main:69")
    # The head and step 68; then the packs the listing beside them showed: 0-63, 64-67.
    assert cp == run[69] and counting.gets == 1 + 1 + 2
    await store.objects.delete_prefix(f"{MAIN}/packs/00000064-00000067.json.gz")
    cp, counting = await _load_counting(backend, store, "run-1:main:69")
    assert cp == run[69] and counting.gets == 1 + 1 + 2 + 4  # ... 64-67 not there, and then steps 64..67


def _flip_a_byte(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x10
    return bytes(damaged)


def _header_changed(change):  # type: ignore[no-untyped-def]
    """A damage that edits the pack's header (and keeps its content)."""
    def damage(data: bytes) -> bytes:
        header, _, rest = gzip.decompress(data).partition(b"\n")
        edited = json.loads(header)
        change(edited)
        return gzip.compress(json.dumps(edited).encode() + b"\n" + rest)
    return damage


_wrong_hash = _header_changed(lambda h: h["blocks"][1].__setitem__(3, "0" * 64))
_other_steps = _header_changed(lambda h: h.update(first=48, last=63))
_future_format = _header_changed(lambda h: h.update(format="rewind.pack/v3"))


@pytest.mark.parametrize("damage", [_flip_a_byte, lambda d: d[: len(d) // 2], lambda d: b"not gzip at all", _wrong_hash,
                                    _other_steps, _future_format],
                         ids=["flipped-byte", "truncated", "not-gzip", "wrong-hash", "other-steps", "future-format"])
async def test_a_damaged_pack_loads_the_same_checkpoint_from_the_steps(
    damage, store: CheckpointStore, backend: Backend,  # type: ignore[no-untyped-def]
) -> None:
    run = await _saved(store, 50)
    raw = await store.raw_objects("run-1")
    backend.tamper(store.objects, PACK_0_47, damage(raw[PACK_0_47]))
    cp, counting = await _load_counting(backend, store, "run-1:main:49")
    assert cp == run[49]
    if damage is _wrong_hash:  # the head, pack 0-47, step 48; then the one block's 4 steps
        assert counting.gets == 1 + 1 + 1 + 4
    else:  # ... then, no other pack holding them, the 48 steps of its blocks
        assert counting.gets == 1 + 1 + 1 + 48


async def test_a_well_formed_pack_that_is_not_the_chains_is_read_from_the_steps(
    store: CheckpointStore, backend: Backend,
) -> None:
    run = await _saved(store, 50)
    raw = await store.raw_objects("run-1")
    # Another step's tool output, with the pack's own hashes made to match: only the digest
    # the head records (over every block of its chain) tells.
    piece = Piece("main", 0, 47, 2, cumulative=True)
    parts = [bytes(p[0]) for p in decode_pack_v2("run-1", piece, raw[PACK_0_47]) or [] if p]
    assert len(parts) == 12
    altered = parts[9].replace(b"part 37", b"part 38")
    assert altered != parts[9]
    contents = [*parts[:9], altered, *parts[10:]]
    header = {"format": PACK_FORMAT_V2, "run_id": "run-1", "branch_id": "main", "first": 0, "last": 47,
              "blocks": [[lo, hi, len(c), hashlib.sha256(c).hexdigest()] for (lo, hi), c in zip(blocks_in(piece), contents)]}
    backend.tamper(store.objects, PACK_0_47, gzip.compress(json.dumps(header).encode() + b"\n" + b"".join(contents)))
    cp, counting = await _load_counting(backend, store, "run-1:main:49")
    assert cp == run[49]
    # Every block taken from a pack is then read from its steps: 0-47, one more round.
    assert counting.gets == 1 + 2 + 48


async def test_a_fork_that_starts_mid_block_packs_its_own_part(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 70)  # main 0..69
    fork = await _branch(store, run[40], "b", 66)  # b starts at 41, inside blocks 40-43, 32-47 and 0-63
    raw = await store.raw_objects("run-1")
    # Level 3's 41-63 (key 0-63: b holds 41-63 of it); the packs it holds whole (level 2's
    # 41-47, level 1's 48-59) deleted by its writer.
    assert _packs(raw, "b") == ["00000000-00000063.json.gz"]
    parts = decode_pack_v2("run-1", Piece("b", 41, 63, 3), raw["runs/run-1/branches/b/packs/00000000-00000063.json.gz"])
    first = json.loads(bytes(parts[0][0])) if parts and parts[0] else {}
    assert (first["first"], first["parent_id"]) == (41, "run-1:main:40")
    cp, counting = await _load_counting(backend, store, "run-1:b:66")
    assert cp == fork[-1]
    # The head (b's packs listed beside it); main's packs 0-31, 32-39 and step 40 (the chain
    # leaves main inside block 40-43); b's pack 41-63 (key 0-63, the listing showed it) and
    # steps 64, 65. Main went on to step 69: its pack 0-63 holds blocks 0-39 now, which main's
    # listing names.
    assert counting.gets == 1 + 2 + 1 + 1 + 2 + 1


async def test_a_fork_from_the_last_step_of_a_block_has_a_block_of_one_step(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 30)
    fork = await _branch(store, run[10], "b", 17)  # b starts at 11, the last step of block 8-11
    raw = await store.raw_objects("run-1")
    # One step is not packed on its own (its object is as good), but is the first block of 11-15
    # (level 2; block 12-15 is the 4th of its block of 16: no level-1 pack).
    assert _packs(raw, "b") == ["00000000-00000015.json.gz"]
    cp, counting = await _load_counting(backend, store, "run-1:b:14")
    assert cp == fork[3]
    # The head; main's pack 0-7, steps 8, 9, 10; b's step 11 (a finished block), steps 12, 13;
    # main's pack 0-15, which holds blocks 0-7 since main's step 15.
    assert counting.gets == 1 + 1 + 3 + 1 + 2 + 1
    cp, counting = await _load_counting(backend, store, "run-1:b:17")
    assert cp == fork[-1]
    assert counting.gets == 1 + 1 + 3 + 1 + 1 + 1  # ... b's pack 11-15 and step 16


async def test_a_rolled_back_revision_loads_through_its_own_packs(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 40)
    await store.invalidate_after("run-1", "main", 21, "rolled back")
    revision = await _branch(store, run[21], "main.r1", 45)
    cp, counting = await _load_counting(backend, store, "run-1:main.r1:45")
    assert cp == revision[-1]
    # The head; main's packs 0-15, 16-19 and steps 20, 21; main.r1's packs 22-31 (key 0-31),
    # 32-43 and step 44; main's pack 0-31, which holds blocks 0-19 since main's step 31.
    assert counting.gets == 1 + 2 + 2 + 2 + 1 + 1
    assert (await backend.twin(store).load("run-1:main:30")).status == "invalidated"


async def _finished_by_another_writer(store: CheckpointStore, backend: Backend, damage=None):  # type: ignore[no-untyped-def]
    """Steps 0..59 by `store`, 60..63 by another writer (its own process): that one finishes
    block 0-63 and reads the packs below it (0-47, 48-59). Returns what is stored, and what
    one writer of the whole run stores."""
    run = make_run(64, result_size=256)
    for cp in run[:60]:
        await store.save(cp)
    if damage is not None:
        raw = await store.raw_objects("run-1")
        backend.tamper(store.objects, PACK_0_47, damage(raw[PACK_0_47]))
    return await _continued_by_another_writer(store, backend, run, 60)


async def _continued_by_another_writer(store: CheckpointStore, backend: Backend, run: list, first: int):  # type: ignore[no-untyped-def]
    """Steps `first`.. of `run` saved by another writer (its own process) after `store`'s: what is
    stored then, and what one writer of the whole run stores."""
    other = backend.twin(store)
    for cp in run[first:]:
        await other.save(cp)
    one_writer = backend.checkpoint_store()
    for cp in run:
        await one_writer.save(cp)
    return await store.raw_objects("run-1"), await one_writer.raw_objects("run-1")


async def test_a_writer_that_did_not_merge_the_blocks_reads_them_for_the_next_level(
    store: CheckpointStore, backend: Backend,
) -> None:
    # ... and checks them against the digests the steps record.
    got, expected = await _finished_by_another_writer(store, backend)
    assert got == expected


async def test_a_writer_does_not_copy_a_damaged_pack_into_the_next_level(store: CheckpointStore, backend: Backend) -> None:
    got, expected = await _finished_by_another_writer(store, backend, _flip_a_byte)
    assert got[f"{MAIN}/packs/00000000-00000063.json.gz"] == expected[f"{MAIN}/packs/00000000-00000063.json.gz"]


async def test_saving_a_run_again_writes_nothing_new(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 64)
    before = await store.raw_objects("run-1")
    again = backend.twin(store)
    for cp in run:
        await again.save(cp)
    assert await again.raw_objects("run-1") == before


async def _one_pack_per_block(store: CheckpointStore, backend: Backend, steps: int) -> None:
    """Replace a run's packs with the layout an older Rewind wrote (rewind.pack/v2 too): one
    pack per block of each level, levels 1-3, for the finished blocks of steps 0..steps-1."""
    raw = await store.raw_objects("run-1")
    blocks: dict[int, bytes] = {}
    for key, data in raw.items():
        if "/packs/" in key:
            first, last = (int(n) for n in key.rsplit("/", 1)[1].split(".")[0].split("-"))
            steps_in = last + 1 - first  # 4, 8 or 12 steps: level 1; 16, 32, 48: level 2; 64: level 3
            level = 1 if steps_in < 16 else 2 if steps_in < 64 else 3
            piece = Piece("main", first, last, level, cumulative=steps_in not in (4, 16, 64))
            for (lo, _hi), part in zip(blocks_in(piece), decode_pack_v2("run-1", piece, data) or []):
                if part is not None:
                    blocks[lo] = bytes(part[0])
            await store.objects.delete_prefix(key)
    for span, level in ((4, 1), (16, 2), (64, 3)):
        for first in range(0, steps - span + 1, span):
            piece = Piece("main", first, first + span - 1, level)
            contents = [blocks[lo] for lo, _hi in blocks_in(piece)]
            await store.objects.put_if_absent(piece.key("run-1"), encode_pack_v2("run-1", piece, contents))


async def test_a_chain_packed_one_block_per_pack_loads_from_the_packs_its_listing_shows(store: CheckpointStore, backend: Backend) -> None:
    """Chains that an earlier Rewind packed one block per pack (the same format) still load:
    a level's pack of 2 or 3 blocks is missing, and the listing shows its blocks' own packs."""
    run = make_run(128, result_size=256)
    for cp in run[:100]:
        await store.save(cp)
    await _one_pack_per_block(store, backend, 100)
    cp, counting = await _load_counting(backend, store, "run-1:main:99")
    # The head and steps 96-98; then packs 0-63, 64-79 and 80-95, the listing beside them
    # showed (the one that reaches furthest for each block).
    assert cp == run[99] and counting.gets == 1 + 3 + 3
    # A writer of this Rewind continues it: its packs read the older ones where they need them,
    # and hold what one writer of the whole run would have written.
    mine, expected = await _continued_by_another_writer(store, backend, run, 100)
    written = [k for k in expected if "/packs/" in k and int(k.rsplit("-", 1)[1].split(".")[0]) >= 100]
    assert written and all(mine.get(k) == expected[k] for k in written), [k for k in written if mine.get(k) != expected[k]]
    cp, counting = await _load_counting(backend, store, "run-1:main:127")
    assert cp == run[127]


class _StaleListing:
    """The store as a reader saw it a moment before: its first listing of packs names packs
    a writer deleted since (the one before the newest), and not the newest."""

    def __init__(self, inner, stale: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.url, self.stale, self.listings = inner, inner.url, stale, 0

    async def list(self, prefix: str) -> list[str]:
        if "/packs/" in prefix:
            self.listings += 1
            if self.listings == 1:
                return self.stale
        return await self.inner.list(prefix)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


async def test_a_pack_deleted_after_the_listing_named_it_is_found_by_listing_again(
    store: CheckpointStore, backend: Backend,
) -> None:
    run = await _saved(store, 70)
    # A reader of step 30 listed main while 0-47 was the newest pack; 0-63 replaced it since.
    stale = _StaleListing(backend.reopen(store.objects), [PACK_0_47])
    backend.opened.append(stale.inner)
    assert await CheckpointStore(stale).load("run-1:main:30") == run[30]  # type: ignore[arg-type]
    assert stale.listings == 2


class _NoDeletes:
    """A store whose writers may not delete (a bucket policy without s3:DeleteObject)."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.url, self.refused = inner, inner.url, 0

    async def delete(self, key: str) -> bool:
        self.refused += 1
        raise StoreUnavailableError(f"{self.url} refused to delete {key}: AccessDenied")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


async def test_a_store_that_refuses_deletes_keeps_the_older_packs_and_loses_nothing(
    store: CheckpointStore, backend: Backend, caplog: pytest.LogCaptureFixture,
) -> None:
    objects = _NoDeletes(backend.reopen(store.objects))
    backend.opened.append(objects.inner)
    writer = CheckpointStore(objects)  # type: ignore[arg-type]
    run = make_run(70, result_size=256)
    with caplog.at_level(logging.WARNING, logger="rewind.store"):
        for cp in run:
            await writer.save(cp)
    assert objects.refused > 1
    warnings = [r.getMessage() for r in caplog.records if "could not delete packs" in r.getMessage()]
    assert len(warnings) == 1 and "allow this store's writers to delete" in warnings[0]
    raw = await store.raw_objects("run-1")
    assert PACK_0_47 in raw and PACK_0_63 in raw  # the older pack stays beside the newer
    for step in (30, 50, 69):
        assert await backend.twin(store).load(f"run-1:main:{step}") == run[step]


async def test_an_older_checkpoint_whose_branch_end_is_known_reads_the_packs_that_exist(
    store: CheckpointStore, backend: Backend,
) -> None:
    """A fork lists the run before it loads its fork point: with each branch's newest step
    known, an older checkpoint asks for the packs that hold its blocks now, in one round,
    not the packs it had when written (replaced since), a listing, and a second round."""
    run = await _saved(store, 140)
    fork = await _branch(store, run[100], "b", 130)  # b starts at 101, inside main's blocks
    for cid, ends, expected in (
        ("run-1:main:40", {"main": 139}, run[40]),
        ("run-1:b:125", {"main": 139, "b": 130}, fork[125 - 101]),
    ):
        counting = CountingObjects(backend.reopen(store.objects))
        backend.opened.append(counting.inner)
        reader = CheckpointStore(counting, concurrency=256)  # type: ignore[arg-type]
        doc = await reader.document(cid, branch_ends=ends)
        assert validate_document(dict(doc), cid) == expected
        known = (counting.gets, counting.lists)
        counting.reset()
        assert await CheckpointStore(counting, concurrency=256).load(cid) == expected  # type: ignore[arg-type]
        # Without the ends, a load lists its own branch's packs beside the head: main:40 then reads
        # what it reads with them; b:125's part on main asks for the packs it had when written
        # (replaced since), and a listing of main finds the new ones.
        assert counting.lists >= 1 and known[1] == 0, (cid, known, counting.lists)
        assert known[0] == counting.gets if cid.startswith("run-1:main") else known[0] < counting.gets, (cid, known, counting.gets)
    # main:40: the head and main's pack 0-127, which holds its blocks 0-39 now (its own packs,
    # 0-31 and 32-39, were replaced by 0-63 at step 63, and that by 0-127 at step 127).
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    await CheckpointStore(counting).document("run-1:main:40", branch_ends={"main": 139})  # type: ignore[arg-type]
    assert (counting.gets, counting.lists) == (1 + 1, 0)
    # Without them, the same two GETs, and the listing of main's packs beside the head that
    # named pack 0-127: nothing asked for that is not there.
    counting.reset()
    await CheckpointStore(counting).document("run-1:main:40")  # type: ignore[arg-type]
    assert (counting.gets, counting.listed) == (1 + 1, [f"{MAIN}/packs/"])
