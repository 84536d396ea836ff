"""Conformance: hostile ids are refused before any storage call, on every backend."""

from __future__ import annotations

import pytest
from checkpoint_factory import T0, first_step
from store_backends import Backend

from checkpoint_bridge.document.schema import AgentCheckpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import InvalidIdError

BAD_IDS = [
    "../../x",
    "/etc/passwd",
    "a/b",
    "%2e%2e",
    "a\x00b",
    "\n",
    "x" * 300,
    "..",
    ".hidden",
    "a\\b",
    "run 1",
    "",
    "run:1",
]


def _unchecked(run_id: str, branch_id: str = "main") -> AgentCheckpoint:
    """A checkpoint carrying a bad id, built past validation as buggy code could."""
    return AgentCheckpoint.model_construct(
        checkpoint_id=f"{run_id}:{branch_id}:0", run_id=run_id, branch_id=branch_id,
        parent_id=None, step_index=0, step_label="", messages=[], agent_variables={},
        tool_call_cache=[], created_at=T0, llm_tokens_used=0, llm_cost_usd=0.0,
        status="completed", error_info=None, schema_version=3, prompt_tokens=0,
        completion_tokens=0, model=None, model_view=None,
    )


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_bad_ids_are_refused_and_nothing_is_written(bad: str, store: CheckpointStore, backend: Backend) -> None:
    await store.save(first_step())  # something legitimate, to prove it stays the only thing
    legit = backend.all_keys()
    calls = [
        lambda: store.save(_unchecked(bad)),
        lambda: store.save(_unchecked("run-1", bad)),
        lambda: store.load(f"{bad}:main:0"),
        lambda: store.load(f"run-1:{bad}:0"),
        lambda: store.load_latest(bad),
        lambda: store.load_latest("run-1", bad),
        lambda: store.list_checkpoints(bad),
        lambda: store.branches(bad),
        lambda: store.existing_steps(bad, "main"),
        lambda: store.invalidate_after(bad, "main", 1, "x"),
        lambda: store.invalidate_after("run-1", bad, 1, "x"),
        lambda: store.raw_objects(bad),
        lambda: store.export(f"{bad}:main:0"),
    ]
    for call in calls:
        with pytest.raises(InvalidIdError) as caught:
            await call()
        assert repr(bad)[:40] in str(caught.value) or "checkpoint id" in str(caught.value)
    assert backend.all_keys() == legit
    assert (await store.load("run-1:main:0")) == first_step()


UNSAFE_KEYS = ["../../x.json", "/etc/passwd", "a/../../b.json", "a//b.json", "./a.json", "a\x00.json"]


@pytest.mark.parametrize("key", UNSAFE_KEYS)
async def test_object_stores_refuse_unsafe_keys(key: str, backend: Backend) -> None:
    objects = backend.objects()
    with pytest.raises(InvalidIdError, match="unsafe"):
        await objects.put_if_absent(key, b"{}")
    with pytest.raises(InvalidIdError, match="unsafe"):
        await objects.get(key)
    with pytest.raises(InvalidIdError):
        await objects.delete_prefix(key)
    assert backend.all_keys() == []


async def test_deleting_everything_needs_an_explicit_prefix(backend: Backend) -> None:
    objects = backend.objects()
    await objects.put_if_absent("keep/me.json", b"{}")
    with pytest.raises(InvalidIdError, match="prefix is empty"):
        await objects.delete_prefix("")
    assert await objects.list("") == ["keep/me.json"]


async def test_file_store_refuses_symlinks_out_of_its_root(backend: Backend, tmp_path) -> None:
    if backend.name != "file":
        pytest.skip("S3 keys cannot be links")
    objects = backend.objects()
    await objects.put_if_absent("runs/placeholder.json", b"{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (objects.root / "runs" / "escape").symlink_to(outside)  # type: ignore[attr-defined]
    with pytest.raises(InvalidIdError, match="outside the store root"):
        await objects.put_if_absent("runs/escape/x.json", b"{}")
    assert list(outside.iterdir()) == []
