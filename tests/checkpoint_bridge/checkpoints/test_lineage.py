"""Conformance: a step of a branch, as fork, redo and rollback resolve it.

`resolve_step` answers the common case (the step is on the branch's newest live
revision itself) from one listing and one read, and everything else by walking
the lineage; either way its answer is the lineage's, which this checks for every
step of every branch name of a run with a fork and a rollback.
"""

from __future__ import annotations

import pytest
from checkpoint_factory import make_run, next_step
from counting_objects import CountingObjects
from store_backends import Backend

from checkpoint_bridge.branches.branching import checkpoint_at
from checkpoint_bridge.checkpoints.lineage import lineage, resolve_step
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import CheckpointNotUsableError, RunNotFoundError, StepNotFoundError


async def _run_with_fork_and_rollback(store: CheckpointStore) -> None:
    """main 0..9, rolled back after step 6 and continued as main.r1 (7..8);
    alt forked after main step 4 (5..7)."""
    main = make_run(10)
    for cp in main:
        await store.save(cp)
    alt = [next_step(main[4], branch_id="alt")]
    while len(alt) < 3:
        alt.append(next_step(alt[-1]))
    for cp in alt:
        await store.save(cp)
    await store.invalidate_after("run-1", "main", 6, reason="rolled back to step 6")
    revision = [next_step(main[6], branch_id="main.r1")]
    revision.append(next_step(revision[-1]))
    for cp in revision:
        await store.save(cp)


async def test_every_step_resolves_to_its_lineage_entry(store: CheckpointStore, backend: Backend) -> None:
    await _run_with_fork_and_rollback(store)
    for name in ("main", "alt", "main.r0", "main.r1"):
        line = {s.step_index: s for s in await lineage(store, "run-1", name)}
        for step in range(0, 11):
            if step in line:
                assert await resolve_step(store, "run-1", name, step) == line[step], (name, step)
            else:
                with pytest.raises(StepNotFoundError):
                    await resolve_step(store, "run-1", name, step)
    with pytest.raises(RunNotFoundError):
        await resolve_step(store, "no-such-run", "main", 0)
    with pytest.raises(RunNotFoundError):
        await resolve_step(store, "run-1", "nope", 0)


async def test_a_step_of_the_branch_itself_costs_one_read(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(40)
    for cp in run:
        await store.save(cp)
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    reader = CheckpointStore(counting)  # type: ignore[arg-type]
    point = await resolve_step(reader, "run-1", "main", 30)
    assert point.checkpoint_id == "run-1:main:30" and counting.gets == 1, counting.gets


async def test_a_branch_starts_from_the_checkpoint_load_gives_without_a_listing(store: CheckpointStore,
                                                                                 backend: Backend) -> None:
    """`checkpoint_at` (fork, redo, rollback) validates the store's document in place of
    `load`'s copy, with the status resolve_step found: the same checkpoint, an
    invalidated one refused as before, and no listing of the rollback markers."""
    await _run_with_fork_and_rollback(store)
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    reader = CheckpointStore(counting)  # type: ignore[arg-type]
    refused = 0
    for name in ("main", "alt", "main.r0", "main.r1"):
        for summary in await lineage(store, "run-1", name):
            point = await resolve_step(reader, "run-1", name, summary.step_index)
            loaded = await store.load(point.checkpoint_id)
            counting.reset()
            if loaded.status == "invalidated":
                refused += 1
                with pytest.raises(CheckpointNotUsableError, match="invalidated"):
                    await checkpoint_at(reader, point)
            else:
                assert await checkpoint_at(reader, point) == loaded, (name, summary.step_index)
            # (A listing of the branch's packs may run beside the first reads: see chain.py.)
            assert not [p for p in counting.listed if "/packs/" not in p], (name, summary.step_index)
    assert refused == 3  # main.r0 names main's steps 7..9 as they were
