"""Conformance: damaged, swapped or too-new objects fail loudly, naming the object."""

from __future__ import annotations

import json

import pytest
from checkpoint_factory import T0, make_run, next_step
from store_backends import Backend

from checkpoint_bridge.document import envelope
from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION, AgentCheckpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import CorruptCheckpointError, FutureSchemaError

STEP = "runs/run-1/branches/main/steps/{:08d}.json"


async def _saved(store: CheckpointStore, steps: int = 6) -> list[AgentCheckpoint]:
    run = make_run(steps)
    for cp in run:
        await store.save(cp)
    return run


@pytest.mark.parametrize("form", ["gzip", "none"])
@pytest.mark.parametrize("step", [0, 4], ids=["snapshot", "delta"])
async def test_a_flipped_byte_fails_the_hash_check(step: int, form: str, store: CheckpointStore, backend: Backend) -> None:
    await _saved(store)
    key = STEP.format(step)
    data = bytearray(envelope.object_json((await store.raw_objects("run-1"))[key], key))
    at = data.index(b"bicycle" if step == 0 else b"web_search")
    data[at] ^= 0x01  # b -> c / w -> v: still valid JSON (gzip'd again: valid gzip too), different content
    backend.tamper(store.objects, key, envelope.compress(bytes(data), form))  # type: ignore[arg-type]
    with pytest.raises(CorruptCheckpointError, match=rf"{key}.*sha256"):
        await backend.twin(store).load(f"run-1:main:{step}")


async def test_a_damaged_parent_fails_its_children(store: CheckpointStore, backend: Backend) -> None:
    await _saved(store)
    backend.tamper(store.objects, STEP.format(4), b"\x00garbage")  # after the chain's last finished block (0-3)
    with pytest.raises(CorruptCheckpointError, match=STEP.format(4)):
        await backend.twin(store).load("run-1:main:5")


async def test_a_damaged_step_inside_a_packed_block(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store)
    backend.tamper(store.objects, STEP.format(2), b"\x00garbage")
    # Later steps read the finished block 0-3 from its pack, which the chain's digest vouches for.
    assert await backend.twin(store).load("run-1:main:5") == run[5]
    with pytest.raises(CorruptCheckpointError, match=STEP.format(2)):
        await backend.twin(store).load("run-1:main:2")  # the step itself is its own object
    await store.objects.delete_prefix("runs/run-1/branches/main/packs/")
    with pytest.raises(CorruptCheckpointError, match=STEP.format(2)):
        await backend.twin(store).load("run-1:main:5")  # without the pack, the block is read from its steps


@pytest.mark.parametrize(
    "raw", [b"not json{", b"[1, 2, 3]", b"", b'{"format": NaN}'], ids=["text", "array", "empty", "nan"]
)
async def test_objects_that_are_not_json_objects(raw: bytes, store: CheckpointStore, backend: Backend) -> None:
    await _saved(store)
    backend.tamper(store.objects, STEP.format(3), raw)
    with pytest.raises(CorruptCheckpointError, match=STEP.format(3)):
        await backend.twin(store).load("run-1:main:3")
    with pytest.raises(CorruptCheckpointError, match=STEP.format(3)):
        await store.list_checkpoints("run-1")  # listing never skips damage silently


async def test_a_document_copied_from_another_step_is_detected(store: CheckpointStore, backend: Backend) -> None:
    await _saved(store)
    raw = await store.raw_objects("run-1")
    backend.tamper(store.objects, STEP.format(4), raw[STEP.format(3)])
    with pytest.raises(CorruptCheckpointError, match=r"holds checkpoint 'run-1:main:3', not 'run-1:main:4'"):
        await backend.twin(store).load("run-1:main:4")


@pytest.mark.parametrize("packs", [True, False], ids=["packs", "no-packs"])
async def test_a_delta_whose_parent_is_missing(packs: bool, store: CheckpointStore, backend: Backend) -> None:
    await _saved(store)
    # With packs the missing object is the one after the finished block 0-3; without, one inside it.
    gone, child = (4, 5) if packs else (2, 3)
    partial = backend.checkpoint_store()
    for key, data in (await store.raw_objects("run-1")).items():
        if key != STEP.format(gone) and (packs or "/packs/" not in key):
            await partial.objects.put_if_absent(key, data)
    with pytest.raises(CorruptCheckpointError,
                       match=rf"{child:08d}.json \(run-1:main:{child}\) is stored as a delta of run-1:main:{gone}, "
                             rf"whose object .*{gone:08d}.json is missing"):
        await partial.load("run-1:main:5")


async def test_a_valid_hash_over_an_invalid_document(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 2)
    bad = json.loads(run[0].model_dump_json()) | {"llm_tokens_used": "many"}
    backend.tamper(store.objects, STEP.format(0), envelope.encode("snapshot", bad))
    with pytest.raises(CorruptCheckpointError, match=r"run-1:main:0 is not a valid AgentCheckpoint.*llm_tokens_used"):
        await backend.twin(store).load("run-1:main:0")


async def test_objects_from_a_newer_rewind_ask_for_an_upgrade(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 2)
    doc = json.loads(run[0].model_dump_json())
    newer_payload = envelope.encode("snapshot", doc | {"schema_version": CURRENT_SCHEMA_VERSION + 1})
    newer_envelope = json.loads(envelope.encode("snapshot", doc, compression="none")) | {"schema_version": 9}
    newer_format = json.loads(envelope.encode("snapshot", doc, compression="none")) | {"format": "rewind.checkpoint/v4"}
    for data in (newer_payload, json.dumps(newer_envelope).encode(), json.dumps(newer_format).encode()):
        backend.tamper(store.objects, STEP.format(0), data)
        with pytest.raises(FutureSchemaError, match=r"00000000.*upgrade rewind"):
            await backend.twin(store).load("run-1:main:0")


async def test_a_v1_object_is_migrated_and_extended(store: CheckpointStore, backend: Backend) -> None:
    # What an older Rewind stored: no branch, no cost, ids "run:step".
    v1 = {
        "checkpoint_id": "run-1:0", "run_id": "run-1", "parent_id": None, "step_index": 0,
        "step_label": "start", "messages": [{"role": "user", "content": "hi"}],
        "agent_variables": {}, "tool_call_cache": [], "created_at": "2024-05-01T10:00:00Z",
        "llm_tokens_used": 12, "status": "completed", "error_info": None, "schema_version": 1,
    }
    old = json.loads(envelope.encode("snapshot", v1, compression="none")) | {"schema_version": 1}
    await store.objects.put_if_absent(STEP.format(0), json.dumps(old).encode())
    loaded = await backend.twin(store).load("run-1:main:0")
    assert (loaded.checkpoint_id, loaded.branch_id, loaded.schema_version) == ("run-1:main:0", "main", CURRENT_SCHEMA_VERSION)
    assert (loaded.llm_cost_usd, loaded.prompt_tokens, loaded.model) == (0.0, 0, None)
    # New steps continue the old run as deltas of the migrated document.
    step1 = next_step(loaded, created_at=T0)
    await store.save(step1)
    assert await backend.twin(store).load("run-1:main:1") == step1
    assert b'"kind":"delta"' in envelope.object_json((await store.raw_objects("run-1"))[STEP.format(1)], "")
