"""What a run puts in Temporal history is said about once.

A StepRecord's wire form leaves out a tool call's output when its tool
message already holds it (and default fields), and reads back whole; model
calls name the run's tool schemas by digest once they are stored.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from helpers import scripted, start_agent
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter

from workflows.contracts import Ledger, LlmRequest, MirrorBatch, StepRecord, ToolCallLog
from workflows.tool_calls import tool_message

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _record(outputs: list[tuple[object, str | None]], **fields: object) -> StepRecord:
    calls, messages = [], [{"role": "assistant", "content": None, "tool_calls": []}]
    for i, (output, content) in enumerate(outputs):
        log = ToolCallLog(step=1, tool_call_id=f"c{i}", tool_name="t", arguments={"i": i}, output=output, called_at=T)
        calls.append(log)
        messages.append(tool_message(log) if content is None else {"role": "tool", "tool_call_id": f"c{i}", "content": content})
    return StepRecord(run_id="r", branch_id="main", step_index=1, parent_id="r:main:0", step_label="t",
                      new_messages=messages, new_tool_calls=calls, created_at=T, model="m", **fields)  # type: ignore[arg-type]


def _wire(value: object):  # type: ignore[no-untyped-def]
    """The payload Temporal records for `value` (the data converter workers use)."""
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


def _back(payload, kind: type):  # type: ignore[no-untyped-def]
    return pydantic_data_converter.payload_converter.from_payloads([payload], [kind])[0]


def test_an_output_its_tool_message_holds_is_written_once_and_read_back_whole() -> None:
    outputs = [("plain text " * 50, None), ({"rows": [1, 2.5, True, None], "name": "é"}, None),
               ("the whole output " * 20, "shortened for the model"), (None, "error: it failed"),
               ({"n": 1}, '{"n": 1.0}')]  # 1 and 1.0 are not the same JSON: kept
    ledger = Ledger(prompt_tokens=7, cost_usd=0.25)
    record = _record(outputs, step_ledger=ledger, branch_ledger=ledger, total_ledger=ledger)
    payload = _wire(MirrorBatch(records=[record]))
    data = payload.data
    wire = json.loads(data)["records"][0]
    assert "plain text plain text" not in json.dumps(wire["new_tool_calls"])
    assert [c.get("output") for c in wire["new_tool_calls"]] == [None, None, "the whole output " * 20, None, {"n": 1}]
    assert "branch_ledger" not in wire and wire["total_ledger"] == {"prompt_tokens": 7, "cost_usd": 0.25}
    assert data.count(b"plain text") == 50  # the tool message's copy only
    back = _back(payload, MirrorBatch)
    assert back == MirrorBatch(records=[record])  # type: ignore[comparison-overlap]
    assert back.records[0].new_tool_calls[1].output == {"rows": [1, 2.5, True, None], "name": "é"}  # type: ignore[attr-defined]


def test_a_record_written_whole_by_an_older_version_reads_as_it_is() -> None:
    record = _record([("text", None)], branch_ledger=Ledger(), total_ledger=Ledger(tool_calls=3))
    whole = record.model_dump(mode="json", round_trip=True)
    old = json.loads(json.dumps(whole))
    # What older workers wrote: every field, outputs repeated, no wire marker.
    old.pop("said_once", None)
    old["new_tool_calls"][0]["output"] = "text"
    old["branch_ledger"] = Ledger().model_dump()
    old["total_ledger"] = Ledger(tool_calls=3).model_dump()
    assert StepRecord.model_validate(old) == record
    assert StepRecord.model_validate_json(record.model_dump_json()) == record


async def test_model_calls_send_the_tool_schemas_once_then_their_digest(worker, client, settings, model, events_file):
    turns = [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i}"}}]} for i in range(3)]
    handle = await start_agent(client, settings, "tools once", model=scripted(model, [*turns, {"content": "done"}]),
                               limits={"max_steps": 10})
    result = await handle.result()
    assert result.status.state == "completed"
    requests = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "call_llm":
                requests.append(_back(attrs.input.payloads[0], LlmRequest))
    assert len(requests) == 4
    assert requests[0].tools and requests[0].tools_ref is None
    assert all(r.tools == [] and r.tools_ref == requests[1].tools_ref for r in requests[1:]) and requests[1].tools_ref
    # The model got the whole tool list every time.
    names = [r["tools"] for r in model.requests() if r["model"].endswith(requests[0].model.split(":", 1)[1])]
    assert len(names) == 4 and all(n == names[0] and "lookup" in n for n in names)
