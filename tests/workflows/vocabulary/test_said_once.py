"""What a run puts in Temporal history is said about once (workflows/vocabulary/said_once.py).

A StepRecord's wire form leaves out what its own messages say (a tool call's
output, reference, id, name, arguments and cache key), default fields and
derivable totals, and reads back whole; a record carried by a model call
leaves out the messages the call sends; model calls name the run's tool
schemas by digest once they are stored.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from helpers import scripted, start_agent
from temporalio.api.enums.v1 import EventType
from pydantic_core import to_jsonable_python
from temporalio.contrib.pydantic import pydantic_data_converter

from workflows.vocabulary.canonical import cache_key
from workflows.vocabulary.contracts import (
    Ledger, LlmRequest, LlmResponse, LoopState, MirrorBatch, StepRecord, ToolCallLog, ToolOutcome, Usage,
)
from workflows.vocabulary.status import ToolRequest
from workflows.vocabulary.tool_calls import tool_message

T = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _record(outputs: list[tuple[object, str | None]], **fields: object) -> StepRecord:
    calls, messages = [], [{"role": "assistant", "content": None, "tool_calls": []}]
    for i, (output, content) in enumerate(outputs):
        log = ToolCallLog(step=1, tool_call_id=f"c{i}", tool_name="t", arguments={"i": i}, output=output, called_at=T)
        calls.append(log)
        messages.append(tool_message(log) if content is None else {"role": "tool", "tool_call_id": f"c{i}", "content": content})
    return StepRecord(run_id="r", branch_id="main", step_index=1, parent_id="r:main:0", step_label="t",
                      new_messages=messages, new_tool_calls=calls, created_at=T, model="m", **fields)  # type: ignore[arg-type]


def _whole(record: StepRecord) -> dict:  # type: ignore[type-arg]
    """A record as JSON field by field, as versions before its wire form wrote it."""
    return {name: to_jsonable_python(getattr(record, name)) for name in StepRecord.model_fields}


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
    assert "branch_ledger" not in wire and wire["total_ledger"] == [7, 0, 0, 0.25]  # LEDGER_WIRE order
    assert data.count(b"plain text") == 50  # the tool message's copy only
    back = _back(payload, MirrorBatch)
    assert back == MirrorBatch(records=[record])  # type: ignore[comparison-overlap]
    assert back.records[0].new_tool_calls[1].output == {"rows": [1, 2.5, True, None], "name": "é"}  # type: ignore[attr-defined]


def test_a_record_written_whole_by_an_older_version_reads_as_it_is() -> None:
    record = _record([("text", None)], branch_ledger=Ledger(), total_ledger=Ledger(tool_calls=3))
    # What older workers wrote: every field, outputs repeated, no wire marker.
    old = _whole(record)
    assert old["new_tool_calls"][0]["output"] == "text" and "said_once" not in old
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


def _step(step: int, *, arguments: dict | None = None, asked: str | None = None, parent: str | None = None,  # type: ignore[type-arg]
          **call: object) -> StepRecord:
    """Step `step` of a run as the loop records it: one assistant message asking one tool call
    (its arguments as text `asked`), the tool's message, the call's log, the ledgers."""
    arguments = {"term": f"t{step}", "n": 1.0} if arguments is None else arguments
    asked = json.dumps(arguments) if asked is None else asked
    log = ToolCallLog(step=step, tool_call_id=f"call_{step}", tool_name="lookup", arguments=arguments, called_at=T,
                      duration_ms=3, cache_key=cache_key("lookup", arguments), **call)  # type: ignore[arg-type]
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"id": f"call_{step}", "type": "function", "function": {"name": "lookup", "arguments": asked}}]}
    step_ledger = Ledger(prompt_tokens=100, completion_tokens=7, total_tokens=107, model_calls=1, tool_calls=1, tool_time_ms=3)
    total = Ledger(prompt_tokens=100 * step, completion_tokens=7 * step, total_tokens=107 * step, cost_usd=0.001 * step,
                   model_calls=step, tool_calls=step)
    return StepRecord(
        run_id="run-1", branch_id="main", step_index=step, parent_id=parent or f"run-1:main:{step - 1}", step_label="lookup",
        new_messages=[message, tool_message(log)], new_tool_calls=[log], created_at=T, model="gpt-x",
        prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens, llm_tokens_used=total.total_tokens,
        llm_cost_usd=total.cost_usd, step_ledger=step_ledger, branch_ledger=total, total_ledger=total)


def test_a_carried_record_names_what_its_model_call_sends_and_reads_back_whole() -> None:
    records = [_step(3, output_ref="a" * 64), _step(4, output={"rows": [1]})]
    sent = [m for r in records for m in r.new_messages]
    request = LlmRequest(run_id="run-1", step=5, model="gpt-x", transcript_head="b" * 64, transcript_len=7,
                         new_messages=sent, checkpoints=records)
    payload = _wire(request)
    # Each message, argument text, reference and digest once: the request's messages.
    assert payload.data.count(b"call_3") == 2  # the assistant's call id and its tool message's
    assert payload.data.count(b"a" * 64) == 1 and payload.data.count(b"gpt-x") == 1
    assert payload.data.count(records[0].new_tool_calls[0].cache_key.encode()) == 0  # type: ignore[union-attr]
    wire = json.loads(payload.data)
    assert all("new_messages" not in r and "parent_id" not in r for r in wire["checkpoints"])
    assert [r["said_once"]["sent"] for r in wire["checkpoints"]] == [[0, 2], [2, 4]]
    assert all("run_id" not in r and "model" not in r for r in wire["checkpoints"])
    assert "temperature" not in wire and "keep_last" not in wire  # options at their defaults
    back = _back(payload, LlmRequest)
    assert back == request
    # What the store gets from the record is what it got before the wire form.
    for record, again in zip(records, back.checkpoints):
        assert _whole(again) == _whole(record)
    # A record whose messages its request holds cannot be read without it: a clear error, not a hollow record.
    try:
        StepRecord.model_validate(wire["checkpoints"][0])
    except ValueError as exc:
        assert "validate the LlmRequest" in str(exc)
    else:
        raise AssertionError("a carried record was read without its request")


def test_what_a_record_cannot_say_by_reference_stays_in_it() -> None:
    edited = _step(6, arguments={"term": "approved edit"}, asked='{"term": "asked"}')  # a person changed them
    respelled = _step(7, arguments={"n": 1}, asked='{"n": 1.0}')  # 1 and 1.0: not the same JSON
    forked = _step(8, parent="run-1:other:3")  # a fork's first step: its parent is on another branch
    volatile = _step(9)
    volatile.new_tool_calls[0].cache_key = cache_key("lookup", {"term": "t9"})  # an ignored argument
    unparsable = _step(10, arguments={"_unparsed_arguments": "{oops"}, asked="{oops")
    for record in (edited, respelled, forked, volatile, unparsable):
        payload = _wire(MirrorBatch(records=[record]))
        assert _back(payload, MirrorBatch).records[0] == record
        assert _whole(_back(payload, MirrorBatch).records[0]) == _whole(record)
    wire = json.loads(_wire(edited).data)
    assert wire["new_tool_calls"][0]["arguments"] == {"term": "approved edit"} and "asked" not in wire["said_once"]
    assert json.loads(_wire(forked).data)["parent_id"] == "run-1:other:3"
    assert "cache_key" in json.loads(_wire(volatile).data)["new_tool_calls"][0]


def test_a_carried_record_written_whole_by_an_older_version_reads_as_it_is() -> None:
    record = _step(3)
    old = {"run_id": "run-1", "step": 4, "model": "gpt-x", "new_messages": _whole(record)["new_messages"],
           "checkpoints": [_whole(record)], "temperature": None, "keep_last": 6}
    assert LlmRequest.model_validate(old).checkpoints == [record]


def test_results_and_tool_inputs_leave_their_defaults_out() -> None:
    outcome = ToolOutcome(output_ref="c" * 64, started_at=T, duration_ms=4)
    assert json.loads(_wire(outcome).data) == {"output_ref": "c" * 64, "started_at": "2026-01-01T00:00:00Z", "duration_ms": 4}
    assert _back(_wire(outcome), ToolOutcome) == outcome
    response = LlmResponse(message={"role": "assistant", "content": "hi"}, usage=Usage(prompt_tokens=3), cost_usd=0.0,
                           transcript_head="d" * 64, transcript_len=2)
    assert "attempt" not in json.loads(_wire(response).data) and _back(_wire(response), LlmResponse) == response
    traced = response.model_copy(update={"response_id": "chatcmpl-1"})  # on the call's span, not in history
    assert b"chatcmpl-1" not in _wire(traced).data
    request = ToolRequest(run_id="r", branch_id="main", step=1, tool_call_id="c", tool_name="t", arguments={})
    assert "dry_run" not in json.loads(_wire(request).data) and _back(_wire(request), ToolRequest) == request


def test_a_model_calls_result_leaves_out_what_its_message_and_usage_imply() -> None:
    view = {"budget_tokens": 9000, "tokens_before": 12000, "tokens_after": 8800, "over_budget": False, "actions": [
        {"action": "truncated_tool_results", "from_index": 3, "to_index": 40, "to_chars": 400, "count": 19},
        {"action": "inserted_note", "omitted": 2}]}
    asked = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                    "function": {"name": "t", "arguments": "{}"}}]}
    for message, reason in ((asked, "tool_calls"), ({"role": "assistant", "content": "done"}, "stop"),
                            ({"role": "assistant", "content": "cut"}, "length"), ({"role": "assistant", "content": "x"}, None)):
        response = LlmResponse(message=message, usage=Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12),
                               cost_usd=0.0, finish_reason=reason, model_view=view)
        wire = json.loads(_wire(response).data)
        assert ("finish_reason" in wire) == (reason in ("length", None)) and "total_tokens" not in wire["usage"]
        assert "budget_tokens" not in json.dumps(wire)
        assert _back(_wire(response), LlmResponse) == response
    # Results written before this form say both, and a total that is not the sum stays.
    odd = LlmResponse(message={"role": "assistant", "content": "x"}, usage=Usage(prompt_tokens=1, total_tokens=5), cost_usd=0.0)
    assert json.loads(_wire(odd).data)["usage"]["total_tokens"] == 5 and _back(_wire(odd), LlmResponse) == odd
    old = {"message": {"role": "assistant", "content": "x"}, "usage": {"prompt_tokens": 1, "completion_tokens": 1,
           "total_tokens": 2}, "cost_usd": 0.0, "finish_reason": None, "model_view": view}
    assert LlmResponse.model_validate(old).finish_reason is None and LlmResponse.model_validate(old).model_view == view
    record = _step(3)
    record.model_view = view
    assert _back(_wire(MirrorBatch(records=[record])), MirrorBatch).records[0] == record


def test_the_loop_state_names_its_cached_outputs_by_reference_once() -> None:
    cached = {f"k{i}": {"$rewind_output_ref": f"{i:064x}"} for i in range(3)}
    state = LoopState(step=4, tool_cache=cached)
    wire = json.loads(_wire(state).data)
    assert "$rewind_output_ref" not in json.dumps(wire) and list(wire["tool_cache_refs"]) == ["k0", "k1", "k2"]
    assert _back(_wire(state), LoopState) == state
    mixed = LoopState(tool_cache={**cached, "k9": {"inline": 1}})  # an output kept in the cache itself
    assert json.loads(_wire(mixed).data)["tool_cache"] == mixed.tool_cache and _back(_wire(mixed), LoopState) == mixed
