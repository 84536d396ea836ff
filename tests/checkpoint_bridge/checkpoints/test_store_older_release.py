"""Checkpoints an earlier release wrote load, list and continue (every backend).

`older_release/runs/` holds, byte for byte, the step objects Rewind wrote at commit
c461ee2 (schema v5, storage format v2: a snapshot and three deltas with tool records,
each leaving out what it implies: its ids, zero ledger fields, totals that repeat the
ledger, default record fields); `older_release/expected.json` is what that release
loaded from them. Every release since must read them as that one did (upgraded to its
own schema version): a user's store outlives the code that wrote it. Until this test,
every object of an earlier schema version failed to load ("run_id: Field required"):
only current-version objects had what they imply put back.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from store_backends import Backend

from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.contracts import Ledger, StepRecord
from workflows.vocabulary.ids import checkpoint_id

HERE = Path(__file__).parent / "older_release"


async def _older_run(backend: Backend) -> CheckpointStore:
    """A store on `backend` holding the earlier release's objects, as that release wrote them."""
    objects = backend.objects()
    for path in sorted((HERE / "runs").rglob("*.json")):
        await objects.put_if_absent(path.relative_to(HERE).as_posix(), path.read_bytes())
    return CheckpointStore(objects)


async def test_an_earlier_release_s_checkpoints_load_and_list_as_it_loaded_them(backend: Backend) -> None:
    store = await _older_run(backend)
    expected = json.loads((HERE / "expected.json").read_text())
    summaries = await store.list_checkpoints("old-run")
    assert [(s.checkpoint_id, s.status) for s in summaries] == [(cid, "completed") for cid in sorted(expected)]
    for cid, doc in expected.items():
        got = json.loads((await store.load(cid)).model_dump_json())
        assert got["schema_version"] == CURRENT_SCHEMA_VERSION
        for name, value in doc.items():
            if name == "schema_version":
                continue
            if name == "tool_call_cache":  # records gained fields since, each absent or default when unused
                assert [{k: r[k] for k in old} for r, old in zip(got[name], value, strict=True)] == value, cid
            else:
                assert got[name] == value, (cid, name)


async def test_a_run_an_earlier_release_wrote_goes_on_in_this_one(backend: Backend) -> None:
    store = await _older_run(backend)
    parent = await store.load("old-run:main:3")
    step = Ledger(prompt_tokens=400, completion_tokens=5, total_tokens=405, model_calls=1)
    assert parent.ledger is not None
    total = Ledger.model_validate(parent.ledger["total"]).plus(step)
    record = StepRecord(
        run_id="old-run", branch_id="main", step_index=4, parent_id=parent.checkpoint_id, step_label="answer",
        new_messages=[{"role": "assistant", "content": "done"}], new_tool_calls=[],
        created_at=datetime(2026, 12, 1, tzinfo=timezone.utc), model="gpt-4o-mini",
        prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens,
        llm_tokens_used=total.total_tokens, llm_cost_usd=total.cost_usd,
        step_ledger=step, branch_ledger=total, total_ledger=total,
    )
    await store.save_step(record_parts(record))
    fresh = backend.twin(store)  # nothing cached: the old chain is read back from the backend
    loaded = await fresh.load(checkpoint_id("old-run", "main", 4))
    assert loaded.messages == [*parent.messages, {"role": "assistant", "content": "done"}]
    assert [r.tool_name for r in loaded.tool_call_cache] == ["lookup"] * 3
    assert loaded.llm_tokens_used == total.total_tokens
