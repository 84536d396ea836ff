"""Hostile and bad input: ids, tampered checkpoints, smuggled objects, hostile tool arguments."""

from __future__ import annotations

import pickle
import sys
import uuid
from pathlib import Path

import pytest
from helpers import read_events, start_agent

from rewind import fork, rollback
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.client import branch_workflows
from workflows.vocabulary.errors import CorruptCheckpointError, InvalidIdError

HOSTILE_IDS = ["../../x", "/etc/passwd", "%2e%2e", "a/b", "a\\b", "a\x00b", "line\nbreak", "x" * 300, "", ".", ".."]


def _store_root(settings) -> Path:
    return Path(settings.store_url[len("file://"):])


@pytest.mark.parametrize("bad", HOSTILE_IDS, ids=range(len(HOSTILE_IDS)))
async def test_hostile_run_and_branch_ids_are_refused_before_anything_is_written(client, settings, bad, tmp_path):
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(InvalidIdError):
        await start_agent(client, settings, "x", run_id=bad)
    with pytest.raises(InvalidIdError):
        await start_agent(client, settings, "x", branch_id=bad)
    async with open_checkpoint_store(settings.store_url) as store:
        with pytest.raises(InvalidIdError):
            await store.list_checkpoints(bad)
        with pytest.raises(InvalidIdError):
            await fork(client, settings, store, "some-run", 1, branch=bad)
    assert sorted(p for p in tmp_path.rglob("*")) == before


async def _research(client, settings) -> str:
    handle = await start_agent(client, settings, "Research these companies: Acme, Globex.")
    assert (await handle.result()).status.state == "completed"
    return handle.id


@pytest.mark.parametrize("tamper", ["flipped-byte", "swapped-document"])
async def test_tampered_checkpoints_are_detected_and_refused_before_any_workflow(worker, client, settings, model, events_file, tamper):
    run = await _research(client, settings)
    steps = _store_root(settings) / "runs" / run / "branches" / "main" / "steps"
    target = steps / "00000001.json"
    if tamper == "flipped-byte":
        data = bytearray(target.read_bytes())  # gzip'd: a flip in its deflate stream fails its CRC
        at = data.index(b"Acme") if data[:1] == b"{" else len(data) // 2
        data[at] ^= 0x01
        target.write_bytes(bytes(data))
    else:
        target.write_bytes((steps / "00000002.json").read_bytes())
    async with open_checkpoint_store(settings.store_url) as store:
        with pytest.raises(CorruptCheckpointError, match="00000001"):
            await store.load(f"{run}:main:1")
        with pytest.raises(CorruptCheckpointError):
            await fork(client, settings, store, run, 1, branch="from-tampered")
        with pytest.raises(CorruptCheckpointError):
            await rollback(client, settings, store, run, 1)
    assert await branch_workflows(client, run, "from-tampered") == []
    assert [h.id for _, h in await branch_workflows(client, run, "main")] == [run]  # no continuation started


async def test_smuggled_objects_stay_inert_data(settings, tmp_path):
    """Checkpoints are parsed as plain JSON: nothing is imported, constructed or executed."""
    from checkpoint_bridge.document.schema import AgentCheckpoint
    from workflows.vocabulary.ids import checkpoint_id

    marker = tmp_path / "pwned"
    evil = {
        "py/object": "rewind_pwned_module.Evil", "__class__": "os.system",
        "$type": "System.Diagnostics.Process", "__reduce__": ["os.system", [f"touch {marker}"]],
        "!!python/object/apply:os.system": [f"touch {marker}"],
    }
    cp = AgentCheckpoint(
        checkpoint_id=checkpoint_id("smuggle", "main", 0), run_id="smuggle", step_index=0,
        created_at="2026-01-01T00:00:00Z", messages=[{"role": "user", "content": "hi", **evil}],
        agent_variables={"payload": evil},
    )
    async with open_checkpoint_store(settings.store_url) as store:
        await store.save(cp)
        loaded = await store.load(cp.checkpoint_id)
    assert loaded.agent_variables["payload"] == evil and loaded.messages[0]["py/object"] == evil["py/object"]
    assert "rewind_pwned_module" not in sys.modules and not marker.exists()


@pytest.mark.parametrize("raw", [
    pickle.dumps({"__reduce__": "os.system"}),
    b'{"format": "rewind.checkpoint/v1", "kind": "snapshot", "schema_version": 3, "sha256": "x", "payload": {"a": "\\ud800"}}',
    b"\xff\xfe not utf-8",
    b'[1, 2, 3]',
    b'{"format": "rewind.checkpoint/v1", "kind": "snapshot", "schema_version": 3, "payload": NaN}',
], ids=["pickle", "lone-surrogate", "not-utf8", "not-an-object", "nan"])
async def test_malformed_objects_are_rejected_with_a_clear_error(settings, raw):
    steps = _store_root(settings) / "runs" / "evil" / "branches" / "main" / "steps"
    steps.mkdir(parents=True)
    (steps / "00000000.json").write_bytes(raw)
    async with open_checkpoint_store(settings.store_url) as store:
        with pytest.raises(CorruptCheckpointError, match="00000000"):
            await store.load("evil:main:0")


async def test_hostile_tool_arguments_are_rejected_before_any_side_effect(worker, client, settings, model, events_file):
    from checkpoint_bridge.checkpoints.store import open_checkpoint_store as open_store

    name = f"hostile-{uuid.uuid4().hex[:6]}"
    model.add_script(name, [
        {"tool_calls": [
            {"name": "write_note", "arguments": {"path": "../../etc/passwd", "flag": "ok", "body": "x"}},
            {"name": "write_note", "arguments": {"path": "/etc/cron.d/x", "flag": "ok", "body": "x"}},
            {"name": "write_note", "arguments": {"path": "%2e%2e/x", "flag": "ok", "body": "x"}},
            {"name": "write_note", "arguments": {"path": "notes/a.txt", "flag": "--output=/etc/shadow", "body": "x"}},
            {"name": "write_note", "arguments": {"path": "notes/b.txt", "flag": "ok", "body": "x" * 200_001}},
            {"name": "write_note", "arguments": {"path": "notes/ok.txt", "flag": "fine", "body": "hello"}},
        ]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "hostile", model=f"script:{name}")
    result = await handle.result()
    assert result.status.state == "completed"
    writes = [e["path"] for e in read_events(events_file) if e["kind"] == "write_note"]
    assert writes == ["notes/ok.txt"]  # only the valid call ran
    answer = result.final_answer
    assert answer.count("invalid arguments for write_note") == 5
    assert "must not leave its folder" in answer and "must be relative" in answer
    assert "URL-encoded" in answer and "command-line option" in answer and "at most 100000 characters" in answer
    async with open_store(settings.store_url) as store:
        records = (await store.load_latest(handle.id)).tool_call_cache
    assert sum(1 for r in records if r.error and "invalid arguments" in r.error) == 5  # recorded
