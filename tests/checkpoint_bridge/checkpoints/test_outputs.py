"""Tool outputs by reference in the payload store: one object per distinct output,
found by any reader, refused clearly when missing, altered or malformed.
Runs on every backend (a local folder and S3)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from store_backends import Backend

from checkpoint_bridge.checkpoints.outputs import OutputStore, output_key
from workflows.vocabulary.contracts import StepRecord, ToolCallLog
from workflows.vocabulary.errors import TranscriptError
from workflows.vocabulary.tool_calls import OUTPUT_REF, tool_message

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


async def test_outputs_round_trip_through_any_reader(backend: Backend) -> None:
    objects = backend.objects()
    writer = OutputStore(objects)
    values = ["text " * 200, {"rows": [1, 2.5, None, True], "é": "ü"}, [], 0, ""]
    digests = [await writer.put(v) for v in values]
    assert len(set(digests)) == len(values) and await writer.put(values[0]) == digests[0]
    reader = OutputStore(backend.reopen(objects))
    backend.opened.append(reader._objects)  # noqa: SLF001 - closed with the backend
    assert [await reader.get(d) for d in digests] == values


async def test_a_record_and_messages_come_back_whole(backend: Backend) -> None:
    store = OutputStore(backend.objects())
    big = {"table": list(range(300))}
    digest = await store.put(big)
    log = ToolCallLog(step=1, tool_call_id="c1", tool_name="t", arguments={}, output_ref=digest, called_at=T)
    ref_message = tool_message(log)
    assert ref_message == {"role": "tool", "tool_call_id": "c1", OUTPUT_REF: digest}
    whole = tool_message(log.model_copy(update={"output": big, "output_ref": None}))
    assert await store.resolve_messages([{"role": "user", "content": "hi"}, ref_message]) == [
        {"role": "user", "content": "hi"}, whole]
    record = StepRecord(run_id="r", branch_id="main", step_index=1, parent_id="r:main:0", step_label="t",
                        new_messages=[ref_message], new_tool_calls=[log], created_at=T, model="m")
    back = await store.resolve_record(record)
    assert back.new_messages == [whole] and back.new_tool_calls[0].output == big and back.new_tool_calls[0].output_ref is None


async def test_missing_altered_or_malformed_outputs_are_clear_errors(backend: Backend) -> None:
    objects = backend.objects()
    digest = await OutputStore(objects).put("x" * 600)
    backend.tamper(objects, output_key(digest), b'{"format":"rewind.tool-output/v1","output":"y"}')
    with pytest.raises(TranscriptError, match="does not match its hash"):
        await OutputStore(objects).get(digest)
    with pytest.raises(TranscriptError, match="missing from .*same REWIND_PAYLOADS"):
        await OutputStore(objects).get("0" * 64)
    with pytest.raises(TranscriptError, match="not a sha256 digest"):
        await OutputStore(objects).get("../../etc/passwd")
