"""Canonical JSON, cache keys, the AgentCheckpoint schema and its migrations."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import pytest
from checkpoint_factory import T0, first_step, make_run
from pydantic import ValidationError

from checkpoint_bridge.document.migrations import MIGRATIONS, load_document, migrate
from checkpoint_bridge.document.schema import (
    CURRENT_SCHEMA_VERSION,
    AgentCheckpoint,
    ToolCallRecord,
    dump_checkpoint,
)
from workflows.vocabulary.canonical import cache_key, canonical_json
from workflows.vocabulary.errors import CheckpointError, CorruptCheckpointError, FutureSchemaError


def test_canonical_json_is_order_independent_and_compact() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'
    assert canonical_json({"a": 1, "b": 2}) == canonical_json({"b": 2, "a": 1})
    assert canonical_json({"text": "café ✓"}) == '{"text":"café ✓"}'


def test_canonical_json_sorts_sets() -> None:
    assert canonical_json({"s": {"b", "c", "a"}}) == '{"s":["a","b","c"]}'
    assert canonical_json(frozenset({3, 1, 2})) == "[1,2,3]"
    assert canonical_json({1, "a"}) == canonical_json({"a", 1})  # mixed types: still one order


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), b"bytes", datetime(2024, 1, 1)])
def test_canonical_json_refuses_what_is_not_json(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        canonical_json({"v": value})


def test_cache_key() -> None:
    expected = hashlib.sha256(b'{"input":{"n":2,"q":"x"},"tool":"search"}').hexdigest()
    assert cache_key("search", {"q": "x", "n": 2}) == expected
    assert cache_key("search", {"n": 2, "q": "x"}) == expected
    assert cache_key("search", {"tags": {"b", "a"}}) == cache_key("search", {"tags": ["a", "b"]})
    assert cache_key("fetch", {"q": "x", "n": 2}) != expected
    assert cache_key("search", {"q": "x", "n": 2.5}) != expected


def test_tool_call_record_defaults_and_time() -> None:
    record = ToolCallRecord(tool_name="search", tool_input={"q": "x"},
                            called_at=datetime(2025, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))
    assert record.cache_key == cache_key("search", {"q": "x"})
    assert record.called_at == datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert record.called_at.tzinfo == timezone.utc
    explicit = ToolCallRecord(tool_name="search", called_at=T0, cache_key="given")
    assert explicit.cache_key == "given"
    assert (record.side_effects, record.served_from_cache, record.error) == (False, False, None)


@pytest.mark.parametrize(
    "change",
    [{"called_at": datetime(2025, 1, 1)}, {"surprise": 1}, {"duration_ms": -1}],
    ids=["naive-time", "extra-field", "negative-duration"],
)
def test_tool_call_record_rejects(change: dict) -> None:
    with pytest.raises(ValidationError):
        ToolCallRecord(**({"tool_name": "t", "called_at": T0} | change))


@pytest.mark.parametrize(
    "change",
    [
        {"checkpoint_id": "run-1:main:1"},
        {"run_id": "../x", "checkpoint_id": "../x:main:0"},
        {"parent_id": "not-an-id"},
        {"status": "exploded"},
        {"schema_version": 2},
        {"unknown": True},
        {"created_at": datetime(2025, 1, 1)},
        {"llm_cost_usd": float("nan")},
        {"step_index": -1},
    ],
    ids=["id-mismatch", "unsafe-run", "bad-parent", "status", "old-version", "extra", "naive", "nan", "negative"],
)
def test_agent_checkpoint_rejects(change: dict) -> None:
    valid = first_step().model_dump()
    AgentCheckpoint.model_validate(valid)
    with pytest.raises(ValidationError):
        AgentCheckpoint.model_validate(valid | change)


def test_dump_is_deterministic_canonical_json() -> None:
    one = first_step(agent_variables={"b": 1, "a": {"y", "x"}})
    two = first_step(agent_variables={"a": {"x", "y"}, "b": 1})
    assert dump_checkpoint(one) == dump_checkpoint(two)
    data = dump_checkpoint(one)
    assert data == canonical_json(json.loads(data)).encode()
    assert b'"created_at":"2025-01-01T12:00:00.000000Z"' in data
    assert b'"a":["x","y"]' in data


def test_dump_refuses_values_that_are_not_json() -> None:
    with pytest.raises(CheckpointError, match=r"run-1:main:0 holds a value that is not plain JSON"):
        dump_checkpoint(first_step(agent_variables={"when": datetime(2024, 1, 1)}))


def test_load_document_round_trips_a_dump() -> None:
    cp = make_run(3)[-1]
    assert load_document(dump_checkpoint(cp), "x.json") == cp
    assert load_document(json.loads(dump_checkpoint(cp)), "x.json") == cp


V1 = {
    "checkpoint_id": "run-1:3", "run_id": "run-1", "parent_id": "run-1:2", "step_index": 3,
    "step_label": "tool", "messages": [{"role": "user", "content": "hi"}], "agent_variables": {"k": 1},
    "tool_call_cache": [], "created_at": "2024-05-01T10:00:00+00:00", "llm_tokens_used": 50,
    "status": "completed", "error_info": None, "schema_version": 1,
}


def test_v1_document_is_migrated() -> None:
    cp = load_document(json.dumps(V1).encode(), "old.json")
    assert (cp.checkpoint_id, cp.parent_id, cp.branch_id) == ("run-1:main:3", "run-1:main:2", "main")
    assert (cp.llm_cost_usd, cp.prompt_tokens, cp.completion_tokens, cp.model, cp.model_view) == (0.0, 0, 0, None, None)
    assert cp.schema_version == CURRENT_SCHEMA_VERSION


def test_migrations_are_pure_and_complete() -> None:
    original = json.loads(json.dumps(V1))
    migrate(original, "x")
    assert original == V1  # the input is left alone
    assert sorted(MIGRATIONS) == list(range(1, CURRENT_SCHEMA_VERSION))
    v2 = MIGRATIONS[1](V1)
    assert v2["schema_version"] == 2 and "prompt_tokens" not in v2


def test_future_documents_ask_for_an_upgrade() -> None:
    doc = json.loads(dump_checkpoint(first_step())) | {"schema_version": CURRENT_SCHEMA_VERSION + 1, "new": 1}
    with pytest.raises(FutureSchemaError, match=r"future\.json .*upgrade rewind"):
        load_document(json.dumps(doc).encode(), "future.json")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "JSON list, not an object"),
        (b'"text"', "JSON str, not an object"),
        (b'{"schema_version": NaN}', "not valid JSON"),
        (b'{"checkpoint_id": "r:main:0"}', "schema_version None"),
        (b'{"schema_version": "3"}', "schema_version '3'"),
        (b'{"schema_version": true}', "schema_version True"),
        (b'{"schema_version": 0}', "schema_version 0"),
        (b'{"schema_version": 3, "run_id": "r"}', "not a valid AgentCheckpoint"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_broken_documents_are_corrupt_and_named(raw: bytes, match: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=match) as caught:
        load_document(raw, "runs/r/x.json")
    assert "runs/r/x.json" in str(caught.value)


def test_documents_are_data_only() -> None:
    # Anything beyond the schema, such as a would-be type tag, is rejected, not interpreted.
    doc = json.loads(dump_checkpoint(first_step())) | {"__class__": "os.system"}
    with pytest.raises(CorruptCheckpointError, match="__class__"):
        load_document(doc, "x")
