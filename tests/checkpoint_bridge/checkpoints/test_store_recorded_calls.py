"""A pipeline's record: the calls of a checkpoint's lineage (``CheckpointStore.recorded_calls``),
which a fork of the pipeline answers again without running them.

It is read as a load of the checkpoint reads its chain: the merged content of a
finished block lists the pipeline calls in it (document/blocks.py, ``calls``), so
a record of hundreds of calls is a few packs and the steps after the last
finished block, never one read per call. Whatever the way (packs, step objects,
blocks an older Rewind packed without the list, a pack that is gone), it says
exactly what the step objects of the lineage say.
"""

from __future__ import annotations

import logging

import pytest
from checkpoint_factory import first_step, next_step
from counting_objects import CountingObjects
from store_backends import Backend

import checkpoint_bridge.checkpoints.store as store_module
from checkpoint_bridge.checkpoints.lineage import lineage_in
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.blocks import BlockCall, merge_block

MAIN = "runs/run-1/branches/main"


def _call(step: int) -> dict | None:
    """Step k's pipeline call: a model call or a tool call; every 7th step (a sleep's, the
    start) is none."""
    if step % 7 == 0:
        return None
    return {"pipeline": "report", "position": step, "label": f"call#{step}", "kind": "llm" if step % 2 else "tool",
            "digest": f"{step:064x}"}


def _pipeline_steps(parent, last: int, branch_id: str | None = None) -> list:  # type: ignore[no-untyped-def]
    steps = [parent]
    while steps[-1].step_index < last:
        step = steps[-1].step_index + 1
        steps.append(next_step(steps[-1], branch_id=branch_id if step == parent.step_index + 1 else None,
                               result_size=96, pipeline=_call(step)))
    return steps[1:]


async def _saved(store: CheckpointStore, steps: int) -> list:
    run = [first_step()]
    run += _pipeline_steps(run[0], steps - 1)
    for cp in run:
        await store.save(cp)
    return run


async def _from_step_objects(store: CheckpointStore, cid: str) -> list[BlockCall]:
    """The record as one read per step of the lineage gives it: what it must equal."""
    run_id = cid.split(":")[0]
    line = lineage_in(await store.list_checkpoints(run_id), cid.split(":")[1], store.url)
    line = line[: [s.checkpoint_id for s in line].index(cid) + 1]
    ends = await store.step_ends([s.checkpoint_id for s in line])
    return [BlockCall(step=e.fields["step_index"], call=e.fields["pipeline"], last_message=e.last_message,
                      last_tool_record=e.last_tool_record, records=e.records)
            for e in ends if isinstance(e.fields.get("pipeline"), dict)]


async def _counted(backend: Backend, store: CheckpointStore, cid: str) -> tuple[list[BlockCall], CountingObjects]:
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    calls = await CheckpointStore(counting, concurrency=256).recorded_calls(cid)  # type: ignore[arg-type]
    return calls, counting


async def test_the_record_of_a_hundred_calls_is_a_few_reads(store: CheckpointStore, backend: Backend) -> None:
    await _saved(store, 140)
    for step in (0, 3, 4, 47, 100, 139):
        cid = f"run-1:main:{step}"
        calls, counting = await _counted(backend, store, cid)
        assert calls == await _from_step_objects(store, cid)
        assert [c.step for c in calls] == [s for s in range(step + 1) if _call(s)]
        # An older checkpoint's own packs may be gone (a newer one holds its blocks): a listing
        # of the branch names it, as for a load of the checkpoint.
        assert counting.gets <= 8 and counting.lists <= 1, (step, counting.gets)
    # A model call answers with the step's last message, a tool call with its record, whose
    # output (stored once, in the tool message) is back in place.
    calls, _ = await _counted(backend, store, "run-1:main:139")
    tool = next(c for c in calls if c.call["kind"] == "tool")
    assert tool.last_tool_record is not None and isinstance(tool.last_tool_record["tool_output"], str)
    assert tool.last_tool_record["tool_output"] == tool.last_message["content"]


async def test_a_fork_of_a_fork_reads_its_lineage_across_branches(store: CheckpointStore, backend: Backend) -> None:
    run = await _saved(store, 60)
    fork = _pipeline_steps(run[30], 80, branch_id="b")
    again = _pipeline_steps(fork[50 - 31], 90, branch_id="c")  # c forks b at step 50
    for cp in [*fork, *again]:
        await store.save(cp)
    for cid in ("run-1:b:80", "run-1:b:35", "run-1:c:90", "run-1:c:51"):
        calls, counting = await _counted(backend, store, cid)
        assert calls == await _from_step_objects(store, cid)
        loading = CountingObjects(backend.reopen(store.objects))
        await CheckpointStore(loading).load(cid)  # type: ignore[arg-type]
        assert counting.gets <= loading.gets and counting.lists <= loading.lists, cid  # no more than a load
    steps = [c.step for c in await store.recorded_calls("run-1:c:90")]
    assert steps == [s for s in range(91) if _call(s)], steps  # main's to 30, b's to 50, c's own


async def test_a_missing_pack_costs_reads_not_calls(store: CheckpointStore, backend: Backend) -> None:
    await _saved(store, 100)
    await store.objects.delete_prefix(f"{MAIN}/packs/00000000-00000063.json.gz")
    calls, counting = await _counted(backend, store, "run-1:main:99")
    assert calls == await _from_step_objects(store, "run-1:main:99")
    assert counting.gets > 64  # blocks 0-63 from their steps


async def test_blocks_an_older_rewind_packed_without_the_calls(
    store: CheckpointStore, backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Before blocks listed their calls, a pipeline run's packs and digests were made without
    them: its record is read from those blocks' step objects, and a load that merges such a
    block from its steps (its pack gone) still adds up to the digest its head records."""

    def unlisted(*args, **kwargs):  # type: ignore[no-untyped-def]
        content = merge_block(*args, **kwargs)
        content.pop("calls", None)
        return content

    monkeypatch.setattr(store_module, "merge_block", unlisted)
    run = await _saved(store, 70)
    monkeypatch.undo()
    calls, counting = await _counted(backend, store, "run-1:main:69")
    assert calls == await _from_step_objects(store, "run-1:main:69")
    assert counting.gets > 64  # the blocks' steps, in one more round
    await store.objects.delete_prefix(f"{MAIN}/packs/00000000-00000063.json.gz")
    with caplog.at_level(logging.WARNING, logger="rewind.store"):
        assert await CheckpointStore(backend.reopen(store.objects)).load("run-1:main:69") == run[69]
        assert await CheckpointStore(backend.reopen(store.objects)).recorded_calls("run-1:main:69") == calls
    assert not [r for r in caplog.records if "blocks_sha256" in r.getMessage()]


async def test_a_snapshot_that_is_a_call_is_its_own_record(store: CheckpointStore) -> None:
    await store.save(first_step(pipeline=_call(1)))
    calls = await store.recorded_calls("run-1:main:0")
    assert calls == await _from_step_objects(store, "run-1:main:0") and [c.step for c in calls] == [0]
