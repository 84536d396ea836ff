"""Conformance: what goes in comes out, byte-stable, in order (every backend)."""

from __future__ import annotations

import pytest
from checkpoint_factory import first_step, make_run, next_step
from store_backends import Backend

from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.migrations import load_document
from checkpoint_bridge.document.schema import dump_checkpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import CheckpointNotFoundError


async def test_round_trip_returns_equal_checkpoints(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(30)
    for cp in run:
        await store.save(cp)
    cold = backend.twin(store)  # an empty cache: everything is rebuilt from storage
    for cp in run:
        assert await store.load(cp.checkpoint_id) == cp
        assert await cold.load(cp.checkpoint_id) == cp


async def test_save_returns_the_layout_key(store: CheckpointStore) -> None:
    key = await store.save(first_step("run-7", step=0))
    assert key == "runs/run-7/branches/main/steps/00000000.json"


async def test_loaded_checkpoints_do_not_share_state(store: CheckpointStore) -> None:
    run = make_run(3)
    for cp in run:
        await store.save(cp)
    loaded = await store.load(run[2].checkpoint_id)
    loaded.messages[0]["content"] = "tampered in memory"
    loaded.agent_variables.clear()
    assert await store.load(run[2].checkpoint_id) == run[2]


async def test_same_run_gives_identical_bytes_in_every_store(backend: Backend) -> None:
    run = make_run(30)  # crosses the step-25 snapshot
    first, second = backend.checkpoint_store(), backend.checkpoint_store()
    for cp in run:
        await first.save(cp)
    for cp in run:  # a re-mirror, into another location, with reloaded models
        await second.save(await first.load(cp.checkpoint_id))
    assert await first.raw_objects("run-1") == await second.raw_objects("run-1")
    before = await first.raw_objects("run-1")
    for cp in run:  # saving again is a no-op
        await first.save(cp)
    assert await first.raw_objects("run-1") == before
    assert dump_checkpoint(await second.load(run[-1].checkpoint_id)) == dump_checkpoint(run[-1])


async def test_out_of_order_saves_still_load_and_stay_idempotent(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(6)
    for cp in [run[0], run[1], run[2], run[5], run[3], run[4]]:
        await store.save(cp)
    remirror, reader = backend.twin(store), backend.twin(store)
    for cp in run:  # step 5 was a snapshot, an in-order re-mirror would write a delta
        await remirror.save(cp)
    for cp in run:
        assert await reader.load(cp.checkpoint_id) == cp


async def test_list_checkpoints_is_ordered_and_cheap_to_read(store: CheckpointStore) -> None:
    run = make_run(12)
    for cp in reversed(run):
        await store.save(cp)
    summaries = await store.list_checkpoints("run-1")
    assert [s.checkpoint_id for s in summaries] == [cp.checkpoint_id for cp in run]
    last = summaries[-1]
    assert (last.run_id, last.branch_id, last.step_index) == ("run-1", "main", 11)
    assert last.parent_id == "run-1:main:10"
    assert last.step_label == run[-1].step_label
    assert last.status == "completed"
    assert last.llm_cost_usd == run[-1].llm_cost_usd
    assert last.llm_tokens_used == run[-1].llm_tokens_used
    assert last.created_at == run[-1].created_at


async def test_latest_head_and_existing_steps(store: CheckpointStore) -> None:
    run = make_run(5)
    for cp in run:
        await store.save(cp)
    assert await store.load_latest("run-1") == run[-1]
    assert await store.existing_steps("run-1", "main") == {0, 1, 2, 3, 4}
    assert await store.branches("run-1") == ["main"]


async def test_unknown_run_is_empty_and_unknown_checkpoint_is_not_found(store: CheckpointStore) -> None:
    assert await store.list_checkpoints("nobody") == []
    assert await store.branches("nobody") == []
    assert await store.load_latest("nobody") is None
    assert await store.existing_steps("nobody", "main") == set()
    assert await store.raw_objects("nobody") == {}
    with pytest.raises(CheckpointNotFoundError, match=r"nobody:main:3"):
        await store.load("nobody:main:3")


async def test_export_is_a_standalone_document(store: CheckpointStore) -> None:
    run = make_run(8)
    for cp in run:
        await store.save(cp)
    exported = await store.export("run-1:main:7")
    assert exported.startswith(b"{\n") and exported.endswith(b"}\n")
    assert load_document(exported, "export.json") == run[-1]


async def test_steps_that_rewrite_history_are_stored_as_snapshots(store: CheckpointStore, backend: Backend) -> None:
    # A step that edits earlier messages (context compression) is not a delta.
    run = make_run(4)
    compressed = next_step(run[-1], messages=[run[-1].messages[0], {"role": "user", "content": "summary"}])
    for cp in [*run, compressed]:
        await store.save(cp)
    assert await backend.twin(store).load(compressed.checkpoint_id) == compressed
    raw = await store.raw_objects("run-1")
    assert b'"kind":"snapshot"' in object_json(raw["runs/run-1/branches/main/steps/00000004.json"], "4")
    assert b'"kind":"delta"' in object_json(raw["runs/run-1/branches/main/steps/00000003.json"], "3")


async def test_variables_that_change_type_or_disappear(store: CheckpointStore, backend: Backend) -> None:
    # 1, 1.0 and True are equal in Python but not the same JSON: each change must be stored.
    run = make_run(2)
    values = [1, 1.0, True, "1", None, {"n": 1}]
    for value in values:
        run.append(next_step(run[-1], agent_variables={"flag": value, "gone": 0}))
    run.append(next_step(run[-1], agent_variables={"flag": "last"}))
    for cp in run:
        await store.save(cp)
    cold = backend.twin(store)
    for cp in run:
        loaded = await cold.load(cp.checkpoint_id)
        assert dump_checkpoint(loaded) == dump_checkpoint(cp)
