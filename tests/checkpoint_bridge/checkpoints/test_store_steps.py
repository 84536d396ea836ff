"""Conformance: a step written from what it added (`save_step`, the mirror's way)
is the checkpoint `apply_record` builds, byte-stable and idempotent; objects
of the older format v1 are read and continued."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from checkpoint_factory import T0, make_run, text_of
from store_backends import Backend

from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.projection.projector import apply_record, record_parts
from checkpoint_bridge.document.schema import checkpoint_to_dict
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.contracts import Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.errors import CheckpointExistsError, CheckpointNotFoundError
from workflows.vocabulary.ids import checkpoint_id

from test_store_linear_storage import CountingObjects


def _record(step: int, branch: str = "main", parent: str | None = "auto", run_id: str = "run-1",
            system_prompt: str | None = None, variables: dict | None = None, total: Ledger | None = None) -> StepRecord:
    if parent == "auto":
        parent = checkpoint_id(run_id, branch, step - 1) if step else None
    at = T0 + timedelta(seconds=step)
    step_ledger = Ledger(prompt_tokens=100 + step, completion_tokens=7, total_tokens=107 + step, cost_usd=0.0001 * step,
                         model_calls=1, tool_calls=1, tool_time_ms=3)
    total = (total or Ledger()).plus(step_ledger)
    if step == 0:
        messages = [{"role": "system", "content": "You research."}, {"role": "user", "content": "Look things up."}]
        calls: list[ToolCallLog] = []
    else:
        call_id = f"call_{branch}_{step}"
        output = text_of(600, f"{branch}/{step}")
        messages = [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": f'{{"term": "t{step}"}}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": output},
        ]
        calls = [ToolCallLog(step=step, tool_call_id=call_id, tool_name="lookup", arguments={"term": f"t{step}"},
                             output=output, called_at=at, duration_ms=3,
                             cache_key=hashlib.sha256(f"lookup{step}".encode()).hexdigest())]
    return StepRecord(
        run_id=run_id, branch_id=branch, step_index=step, parent_id=parent, step_label="start" if step == 0 else "lookup",
        new_messages=messages, new_tool_calls=calls, agent_variables=variables or {}, created_at=at, model="gpt-4o-mini",
        prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens, llm_tokens_used=total.total_tokens,
        llm_cost_usd=total.cost_usd, step_ledger=step_ledger, branch_ledger=total, total_ledger=total,
        system_prompt=system_prompt,
    )


def _records() -> list[StepRecord]:
    """A run of 8 steps, and a fork at step 4 with a new system prompt and variables."""
    main, total = [], Ledger()
    for step in range(8):
        main.append(_record(step, total=total))
        total = main[-1].total_ledger
    fork, total = [], main[4].total_ledger
    for step in range(5, 9):
        fork.append(_record(step, "fork", checkpoint_id("run-1", "main", 4) if step == 5 else "auto",
                            system_prompt="Be brief." if step == 5 else None, variables={"tone": "dry"}, total=total))
        total = fork[-1].total_ledger
    return main + fork


async def test_save_step_stores_the_checkpoint_apply_record_builds(backend: Backend) -> None:
    records = _records()
    by_steps, by_documents = backend.checkpoint_store(), backend.checkpoint_store()
    built = {}
    for record in records:
        assert await by_steps.save_step(record_parts(record)) is True
        parent = built.get(record.parent_id)
        built[checkpoint_id(record.run_id, record.branch_id, record.step_index)] = cp = apply_record(parent, record)
        await by_documents.save(cp)
    fresh = backend.twin(by_steps)
    for cid, cp in built.items():
        assert await fresh.load(cid) == cp
        assert await backend.twin(by_documents).load(cid) == cp
    assert built["run-1:fork:5"].messages[0]["content"] == "Be brief."
    # Deterministic: the same records give the same bytes in another store.
    again = backend.checkpoint_store()
    for record in records:
        await again.save_step(record_parts(record))
    assert await again.raw_objects("run-1") == await by_steps.raw_objects("run-1")
    # Idempotent, and immutable.
    assert await by_steps.save_step(record_parts(records[3])) is False
    changed = records[3].model_copy(update={"step_label": "something else"})
    with pytest.raises(CheckpointExistsError, match="run-1:main:3 already exists"):
        await backend.twin(by_steps).save_step(record_parts(changed))
    # Written as whole documents (the other format of the same content), the mirror still finds them equal.
    assert await backend.twin(by_documents).save_step(record_parts(records[6])) is False


async def test_save_step_reads_one_small_object_or_nothing(backend: Backend) -> None:
    records = _records()[:8]
    store = backend.checkpoint_store()
    for record in records[:5]:
        await store.save_step(record_parts(record))
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    writer = CheckpointStore(counting)  # type: ignore[arg-type]
    await writer.save_step(record_parts(records[5]))
    assert counting.gets == 1  # the parent's object, not its chain
    counting.reset()
    await writer.save_step(record_parts(records[6]))
    assert counting.gets == 0  # this writer wrote the parent
    counting.reset()
    await writer.save_step(record_parts(records[7]))
    # Step 7 finishes the block 4-7: step 4, which another writer wrote; and the level-1 pack of
    # blocks 0-7 (the 2nd block of 0-15): the pack of 0-3, which another writer wrote, and step 0
    # (the digest the blocks before it start from).
    assert counting.gets == 3
    with pytest.raises(CheckpointNotFoundError):
        await writer.save_step(record_parts(_record(12)))  # parent 11 was never written


def _v1_envelope(kind: str, payload: dict) -> bytes:
    """What Rewind stored before format v2."""
    sha = hashlib.sha256(canonical_json(payload).encode()).hexdigest()
    return canonical_json({"format": "rewind.checkpoint/v1", "kind": kind, "schema_version": 3,
                           "sha256": sha, "payload": payload}).encode()


async def test_format_v1_objects_are_read_and_continued(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(8, result_size=300)
    docs = [checkpoint_to_dict(cp) for cp in run]
    await store.objects.put_if_absent("runs/run-1/branches/main/steps/00000000.json", _v1_envelope("snapshot", docs[0]))
    for step in range(1, 6):
        doc, parent = docs[step], docs[step - 1]
        payload = {k: v for k, v in doc.items() if k not in ("messages", "tool_call_cache", "agent_variables")}
        payload.update(
            base_message_count=len(parent["messages"]), new_messages=doc["messages"][len(parent["messages"]):],
            base_tool_count=len(parent["tool_call_cache"]), new_tool_records=doc["tool_call_cache"][len(parent["tool_call_cache"]):],
            variables_set={k: v for k, v in doc["agent_variables"].items() if parent["agent_variables"].get(k) != v},
            variables_removed=[],
        )
        await store.objects.put_if_absent(f"runs/run-1/branches/main/steps/{step:08d}.json", _v1_envelope("delta", payload))
    assert await backend.twin(store).load("run-1:main:5") == run[5]
    # New steps continue the old chain in format v2 (which has no digests), naming the old objects in their chain.
    writer = backend.twin(store)
    await writer.save(run[6])
    await backend.twin(store).save(run[7])
    raw = await store.raw_objects("run-1")
    newest = json.loads(object_json(raw["runs/run-1/branches/main/steps/00000007.json"], "7"))
    assert newest["format"] == "rewind.checkpoint/v2" and newest["payload"]["chain"] == [["main", 0, 6]]
    counting = CountingObjects(backend.reopen(store.objects), hold=7)
    backend.opened.append(counting.inner)
    assert await CheckpointStore(counting).load("run-1:main:7") == run[7]  # type: ignore[arg-type]
    # The head, then 0..6 at once; and, asked for with the head, what a chain of the current
    # format would read whatever its packs are (steps 4..6, after its last finished block).
    assert counting.gets == 8 + 3 and counting.most_in_flight >= 7
