"""Shared helpers of the test-suite."""

from __future__ import annotations

import gzip
import json
import uuid
import zlib
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from rewind.client import start_run
from rewind.settings.config import Settings
from workflows.vocabulary.contracts import AgentInput, AgentResult


async def start_agent(client: Client, settings: Settings, task: str, **fields: Any) -> WorkflowHandle[Any, AgentResult]:
    fields.setdefault("run_id", f"test-{uuid.uuid4().hex[:10]}")
    return await start_run(client, settings, AgentInput(task=task, **fields))


def turns_seen(requests: list[dict], task: str) -> list[int]:
    """Turn index (assistant messages so far) of each model request of one run."""
    out = []
    for r in requests:
        msgs = r["messages"]
        if any(m.get("role") == "user" and m.get("content") == task for m in msgs):
            out.append(sum(1 for m in msgs if m.get("role") == "assistant"))
    return out


def folder_bytes(url_or_path: str | Path) -> bytes:
    """Every file under a folder (a `file://` store's too), gzip'd ones (step objects, packs)
    unpacked: the bytes a search for a secret or a marker must look at; b"" if it is not there."""
    root = Path(str(url_or_path).removeprefix("file://"))
    if not root.exists():
        return b""
    return b"".join(unpacked(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file())


def unpacked(data: bytes) -> bytes:
    """`data` gunzipped if it is gzip (a step object, a pack), else as it is."""
    try:
        return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    except (OSError, EOFError, zlib.error):
        return data  # not gzip after all (encrypted bytes may start so)


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def final_transcript(settings, run_id: str, branch_id: str = "main") -> list[dict]:
    """The run's full conversation, from its newest checkpoint."""
    from checkpoint_bridge.checkpoints.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        latest = await store.load_latest(run_id, branch_id)
    assert latest is not None, f"no checkpoints for {run_id}"
    return latest.messages


def scripted(model, turns: list[dict]) -> str:
    """Register a turn script on the scripted model; returns the model name to run it."""
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, turns)
    return f"script:{name}"


def outputs_of(settings):  # type: ignore[no-untyped-def]
    """The tool outputs that history names by reference (the run's payload store)."""
    from checkpoint_bridge.stores import open_object_store
    from checkpoint_bridge.checkpoints.outputs import OutputStore

    return OutputStore(open_object_store(settings.payload_url))


async def chain_events(client: Client, workflow_id: str) -> list:
    """Every event of every run of the workflow (its continue-as-new chain)."""
    events = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        events += [e async for e in handle.fetch_history_events()]
    return events
