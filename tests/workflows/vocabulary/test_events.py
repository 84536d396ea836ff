"""A step's durable events, derived from its record (workflows/vocabulary/events.py): what each
kind of step says, in which order, under which ids, and the keys of its calls."""

from __future__ import annotations

from datetime import datetime, timezone

from workflows.vocabulary.contracts import Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.events import (
    checkpoint_event,
    model_call_key,
    parse_durable_id,
    step_events,
    tool_call_key,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _record(**fields) -> StepRecord:
    base = dict(run_id="r", branch_id="main", step_index=3, parent_id="r:main:2", step_label="x", created_at=T0,
                model="m")
    return StepRecord(**{**base, **fields})


def _log(call_id: str, **fields) -> ToolCallLog:
    return ToolCallLog(step=3, tool_call_id=call_id, tool_name="t", arguments={"q": call_id}, called_at=T0, **fields)


def test_a_loop_step_says_its_answer_then_each_call_in_the_order_they_completed_then_its_checkpoint():
    calls = [{"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ("a", "b")]
    record = _record(new_messages=[{"role": "assistant", "content": None, "tool_calls": calls},
                                   {"role": "tool", "tool_call_id": "a", "content": "A"},
                                   {"role": "tool", "tool_call_id": "b", "content": "B"}],
                     new_tool_calls=[_log("b", output="B"), _log("a", output="A", error=None)],
                     step_ledger=Ledger(prompt_tokens=100, completion_tokens=10, total_tokens=110, cost_usd=0.5,
                                        model_calls=1, subagent_prompt_tokens=40, subagent_completion_tokens=4,
                                        subagent_cost_usd=0.2))
    events = step_events(record)
    assert [(e.id, e.type) for e in events] == [("3.0", "model.completed"), ("3.1", "tool.completed"),
                                                 ("3.2", "tool.completed"), ("3.3", "checkpoint")]
    assert events[0].data["usage"] == {"prompt_tokens": 60, "completion_tokens": 6, "total_tokens": 66,
                                       "cost_usd": 0.3}  # the sub-agents' spending is theirs
    assert [e.data["tool_call_id"] for e in events[1:3]] == ["b", "a"]
    assert events[1].data["call"] == "3/b" and checkpoint_event(record).id == "3.3"


def test_a_forks_first_step_starts_with_run_started_and_a_final_step_ends_with_the_run():
    record = _record(parent_id="r:other:2", branch_id="alt", new_messages=[{"role": "assistant", "content": "42"}],
                     step_ledger=Ledger(model_calls=1))
    assert [e.type for e in step_events(record)] == ["run.started", "model.completed", "checkpoint", "run.completed"]
    assert step_events(record)[0].data == {"forked_from": "r:other:2"}
    assert step_events(record)[-1].data == {"answer": "42"}
    failed = _record(status="failed", error_info={"reason": "boom"}, step_label="failed")
    assert [(e.type, e.data.get("reason")) for e in step_events(failed)][-2:] == [("checkpoint", None),
                                                                                   ("run.failed", "boom")]


def test_a_pipelines_call_and_a_graphs_super_step():
    model_call = _record(pipeline={"pipeline": "p", "position": 4, "kind": "llm", "label": "plan", "digest": "d",
                                   "attempt": 1}, new_messages=[{"role": "assistant", "content": "ok"}],
                         step_ledger=Ledger(model_calls=1, prompt_tokens=5, completion_tokens=1, total_tokens=6))
    first = step_events(model_call)[0]
    assert first.data["call"] == "p4.r1" and first.data["label"] == "plan"
    graph = _record(pipeline={"graph": "g:app", "superstep": 2, "nodes": ["a", "b"], "calls": [
        {"position": 7, "kind": "llm", "label": "a", "node": "a", "message": {"role": "assistant", "content": "hi"},
         "model": "m2", "prompt_tokens": 3, "completion_tokens": 1, "cost_usd": 0.1},
        {"position": 8, "kind": "interrupt", "node": "b", "resume": True},
        {"position": 9, "kind": "tool", "label": "t", "node": "b", "tool_call_id": "call_9"}],
        "updates": [{"node": "a", "update": {"x": 1}}]}, new_tool_calls=[_log("call_9", output="T")])
    events = step_events(graph)
    assert [(e.type, e.data.get("call"), e.data.get("node")) for e in events] == [
        ("model.completed", "p7", "a"), ("tool.completed", "p9", "b"), ("graph.update", None, "a"),
        ("checkpoint", None, None)]


def test_keys_and_ids():
    assert model_call_key(7) == "7/model" and model_call_key(7, "12:llm:plan:abc") == "p12"
    assert model_call_key(7, "12:llm:plan:abc:r2") == "p12.r2" and model_call_key(7, "3") == "7/model"
    assert tool_call_key(7, "call_x") == "7/call_x" and tool_call_key(7, "call_12", "12:tool:t:abc") == "p12"
    assert parse_durable_id("4.2") == (4, 2) and parse_durable_id("s3-call_1/4.2") == (4, 2)
    assert parse_durable_id("p3~a1.d2") is None
