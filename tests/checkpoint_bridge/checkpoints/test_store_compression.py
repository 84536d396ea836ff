"""Conformance: step objects are gzip'd JSON, or plain JSON with ``compression="none"``;
every reader takes both, in any mix along a chain (a plain object is what an older
Rewind wrote), and a damaged gzip'd object is a clear error naming it."""

from __future__ import annotations

import gzip

import pytest
from checkpoint_factory import make_run
from store_backends import Backend

from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.stores import ObjectStore
from workflows.vocabulary.errors import CheckpointNotFoundError, CorruptCheckpointError
from workflows.vocabulary.ids import checkpoint_id

from test_store_steps import _records

STEP = "runs/run-1/branches/main/steps/{:08d}.json"


class _WithoutPacks:
    """A store as a reader sees it when every pack is gone (deleting them would leave the
    hot tier's writers waiting to flush them)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner, self.url = inner, inner.url

    async def get(self, key: str) -> bytes:
        if "/packs/" in key:
            raise CheckpointNotFoundError(key)
        return await self.inner.get(key)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)


def _steps(raw: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in raw.items() if "/steps/" in k}


async def _everything(store: CheckpointStore, cids: list[str]) -> list:
    """What every reader makes of the run: documents, listings, each step's own facts and ends."""
    return [[(await store.load(cid)).model_dump_json() for cid in cids],
            [s.model_dump_json() for s in await store.list_checkpoints("run-1")],
            [(f.fields, f.tool_records, f.invalidated) for f in await store.step_facts("run-1")],
            await store.step_ends(cids), [await store.export(cid) for cid in cids]]


async def test_step_objects_are_gzip_by_default_and_plain_json_with_compression_off(backend: Backend) -> None:
    records = _records()
    zipped, plain = backend.checkpoint_store(), backend.checkpoint_store(compression="none")
    for record in records:
        assert await zipped.save_step(record_parts(record)) is True
        assert await plain.save_step(record_parts(record)) is True
    zipped_steps, plain_steps = _steps(await zipped.raw_objects("run-1")), _steps(await plain.raw_objects("run-1"))
    assert sorted(zipped_steps) == sorted(plain_steps) and len(plain_steps) == len(records)
    for key, data in zipped_steps.items():
        assert data[:2] == b"\x1f\x8b" and plain_steps[key][:1] == b"{", key
        # The same JSON in both forms, byte for byte: `gunzip -c` of one is the other.
        assert gzip.decompress(data) == plain_steps[key], key
    assert sum(map(len, zipped_steps.values())) < 0.6 * sum(map(len, plain_steps.values()))
    # Every reader of either store (each writing the other form) sees the same run.
    cids = [checkpoint_id(r.run_id, r.branch_id, r.step_index) for r in records]
    assert await _everything(backend.twin(zipped, compression="none"), cids) == \
        await _everything(backend.twin(plain), cids)


async def test_a_chain_mixing_plain_and_gzip_objects_loads_and_continues(backend: Backend) -> None:
    run = make_run(14, result_size=300)
    older = backend.checkpoint_store(compression="none")  # as an older Rewind wrote them: plain JSON
    for cp in run[:6]:
        await older.save(cp)
    newer = backend.twin(older)  # gzip: continues the same chain
    for cp in run[6:]:
        await newer.save(cp)
    steps = _steps(await newer.raw_objects("run-1"))
    assert [steps[STEP.format(cp.step_index)][:1] == b"{" for cp in run] == [True] * 6 + [False] * (len(run) - 6)
    fresh = backend.twin(newer)
    for cp in run:
        assert await fresh.load(cp.checkpoint_id) == cp
    # Without packs, one chain replays every step from its own object, in both forms.
    inner = backend.reopen(newer.objects)
    backend.opened.append(inner)
    assert await CheckpointStore(_WithoutPacks(inner)).load(run[-1].checkpoint_id) == run[-1]  # type: ignore[arg-type]
    # Saving the same checkpoint again in the other form is a no-op, not a conflict.
    await backend.twin(newer).save(run[3])
    await backend.twin(older, compression="none").save(run[9])
    assert _steps(await newer.raw_objects("run-1")) == steps


async def test_mirroring_again_over_the_other_form_writes_nothing(backend: Backend) -> None:
    records = _records()
    plain = backend.checkpoint_store(compression="none")
    for record in records:
        await plain.save_step(record_parts(record))
    before = await plain.raw_objects("run-1")
    zipped = backend.twin(plain)
    assert [await zipped.save_step(record_parts(r)) for r in records] == [False] * len(records)
    assert await plain.raw_objects("run-1") == before


@pytest.mark.parametrize("damage", ["cut short", "flipped bit", "stray bytes", "bad header"])
async def test_a_damaged_gzip_object_names_its_key_and_the_fix(damage: str, backend: Backend) -> None:
    store = backend.checkpoint_store()
    for cp in make_run(6):
        await store.save(cp)
    key = STEP.format(5)
    data = bytearray((await store.raw_objects("run-1"))[key])
    if damage == "cut short":
        data = data[: len(data) // 2]
    elif damage == "flipped bit":
        data[len(data) // 2] ^= 0x10  # the deflate stream or its CRC no longer agree
    elif damage == "stray bytes":
        data += b"\x00junk"
    else:
        data[2] = 0x63  # compression method 99: not deflate
    backend.tamper(store.objects, key, bytes(data))
    fix = r"restore it from a backup, or delete the run's checkpoints and rebuild them .* `rewind mirror RUN`"
    with pytest.raises(CorruptCheckpointError, match=rf"checkpoint object {key} .*gzip.*; {fix}"):
        await backend.twin(store).load("run-1:main:5")
    with pytest.raises(CorruptCheckpointError, match=key):
        await backend.twin(store).list_checkpoints("run-1")  # listings never skip damage either
