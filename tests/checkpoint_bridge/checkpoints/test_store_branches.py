"""Conformance: forks and rollback markers."""

from __future__ import annotations

from checkpoint_factory import first_step, make_run, next_step
from store_backends import Backend

from checkpoint_bridge.checkpoints.store import CheckpointStore


async def _fork(store: CheckpointStore, at: int = 5, length: int = 4) -> tuple[list, list]:
    """main: steps 0..9; "alt": forked after main step ``at`` with a new system prompt."""
    main = make_run(10)
    for cp in main:
        await store.save(cp)
    parent = main[at]
    seeded = next_step(parent, branch_id="alt")
    seeded = seeded.model_copy(update={"messages": [{"role": "system", "content": "Be brief."}, *seeded.messages[1:]]})
    alt = [seeded]
    while len(alt) < length:
        alt.append(next_step(alt[-1]))
    for cp in alt:
        await store.save(cp)
    return main, alt


async def test_a_fork_loads_across_branches(store: CheckpointStore, backend: Backend) -> None:
    main, alt = await _fork(store)
    assert alt[0].parent_id == "run-1:main:5"
    cold = backend.twin(store)
    for cp in [*alt, *main]:
        assert await cold.load(cp.checkpoint_id) == cp
    assert await store.branches("run-1") == ["main", "alt"]
    assert await store.load_latest("run-1", "alt") == alt[-1]
    assert await store.load_latest("run-1", "main") == main[-1]
    assert await store.existing_steps("run-1", "alt") == {6, 7, 8, 9}


async def test_listing_orders_branches_by_creation_then_step(store: CheckpointStore) -> None:
    main, alt = await _fork(store, at=2)
    late = next_step(main[7], branch_id="late")
    await store.save(late)
    ids = [s.checkpoint_id for s in await store.list_checkpoints("run-1")]
    assert ids == [cp.checkpoint_id for cp in [*main, *alt, late]]
    assert await store.branches("run-1") == ["main", "alt", "late"]
    fork_point = [s for s in await store.list_checkpoints("run-1") if s.branch_id == "alt"][0]
    assert fork_point.parent_id == "run-1:main:2"


async def test_invalidation_marks_later_steps_without_rewriting_them(store: CheckpointStore, backend: Backend) -> None:
    main, alt = await _fork(store)
    before = await store.raw_objects("run-1")
    await store.invalidate_after("run-1", "main", 6, reason="rolled back to step 6")
    after = await store.raw_objects("run-1")
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == {"runs/run-1/branches/main/invalidations/00000006.json"}

    for reader in (store, backend.twin(store)):
        assert (await reader.load("run-1:main:6")).status == "completed"
        assert (await reader.load("run-1:main:7")).status == "invalidated"
        assert (await reader.load("run-1:alt:9")).status == "completed"  # other branches untouched
        latest = await reader.load_latest("run-1")
        assert latest is not None and latest.checkpoint_id == "run-1:main:6"
    statuses = {s.checkpoint_id: s.status for s in await store.list_checkpoints("run-1")}
    assert [statuses[f"run-1:main:{i}"] for i in range(10)] == ["completed"] * 7 + ["invalidated"] * 3
    assert await store.existing_steps("run-1", "main") == set(range(10))

    await store.invalidate_after("run-1", "main", 6, reason="again, other words")  # idempotent
    await store.invalidate_after("run-1", "main", 3, reason="further back")
    latest = await store.load_latest("run-1")
    assert latest is not None and latest.step_index == 3


async def test_steps_saved_after_an_invalidation_read_as_invalidated(store: CheckpointStore) -> None:
    await store.save(first_step())
    await store.invalidate_after("run-1", "main", 0, reason="keep only the start")
    assert (await store.load_latest("run-1")) is not None
    await store.save(next_step(first_step()))
    latest = await store.load_latest("run-1")
    assert latest is not None and latest.step_index == 0


async def test_stored_runs_are_each_runs_stored_steps_from_one_listing(store: CheckpointStore) -> None:
    await _fork(store)
    await store.invalidate_after("run-1", "main", 6, reason="rolled back to step 6")
    for cp in make_run(3, run_id="run-2"):
        await store.save(cp)
    found = await store.stored_runs()
    assert list(found) == ["run-1", "run-2"]
    assert found == {run_id: await store.stored_steps(run_id) for run_id in found}
    assert found["run-1"]["main"] == (set(range(10)), 6) and found["run-2"] == {"main": ({0, 1, 2}, None)}
