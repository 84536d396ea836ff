"""The run's event stream: one vocabulary for every kind of run (docs/streaming.md).

A run tells what it does as events: a loop run, a pipeline, a graph run, a sub-agent
and a child pipeline alike. Two kinds:

- **Durable** events are facts of the record: a model call's whole message, a tool
  call's outcome, a checkpoint, the run's start and end, a pipeline's or graph node's
  custom event, a graph node's update. Each is derived from a step of the record by
  `step_events` (the same function on the worker, as the step happens, and on a reader
  replaying the store), so its id, `STEP.N` (the Nth event of step STEP), is the same on
  every read, and a finished run's events come back from the store alone.
- **Live** events say what happens between two steps: a call starting, the model's
  deltas as it writes, a retry, a tool's progress, a call waiting for a person, a
  pause. They are never stored; their ids (`CALL~...`) only tell copies apart. After a
  reconnect, a call still in flight is told again from its start, with its attempt.

Workflow code imports this module (it emits the durable events as the steps happen):
pure, deterministic, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from workflows.vocabulary.status import Ledger

# The version of the event form (`RunEvent.v`): readers refuse a newer one, as the
# checkpoint store refuses a newer AgentCheckpoint.
EVENTS_VERSION = 1

EventType = Literal[
    "run.started", "model.started", "model.delta", "model.completed", "model.retrying",
    "tool.started", "tool.completed", "approval.waiting", "approval.resolved", "checkpoint", "custom",
    "run.paused", "run.completed", "run.failed", "run.cancelled", "graph.update",
]
EVENT_TYPES: tuple[str, ...] = EventType.__args__  # type: ignore[attr-defined]
# The events that end a branch's stream.
END_TYPES = ("run.completed", "run.failed", "run.cancelled")
# Events that only ever go out live (their facts are not in a checkpoint).
LIVE_TYPES = ("model.started", "model.delta", "model.retrying", "tool.started", "approval.waiting",
              "approval.resolved", "run.paused", "run.cancelled")


class RunEvent(BaseModel):
    """One event of a run's stream."""

    v: int = EVENTS_VERSION
    id: str
    """`STEP.N` for a durable event (the same on every read), `CALL~...` for a live one; in a
    parent's stream, a child run's events are prefixed with their path (`s3-call_1/4.2`)."""
    type: str
    run_id: str
    branch: str
    """The branch the event happened on (a sub-agent's own branch, `main.s3-call_1`)."""
    step: int | None = None
    """The step a durable event belongs to; for a live one, the step in flight when known."""
    time: datetime
    data: dict[str, Any] = Field(default_factory=dict)
    path: list[str] = Field(default_factory=list)
    """From the branch being watched to the run this happened in: [] for its own events,
    ["s3-call_1"] for a sub-agent's (each part the child's branch suffix)."""
    cursor: str | None = None
    """Set by a reader on a durable event: where a reader resumes after it (`after=`, SSE's
    `Last-Event-ID`); it names the last durable event of each run of the stream."""

    @property
    def durable(self) -> bool:
        return "~" not in self.id


def durable_id(step: int, n: int) -> str:
    return f"{step}.{n}"


def parse_durable_id(event_id: str) -> tuple[int, int] | None:
    """(step, n) of a durable id (its path left out), or None for a live id or garbage."""
    own = event_id.rsplit("/", 1)[-1]
    step, dot, n = own.partition(".")
    if not dot or not step.isdigit() or not n.isdigit():
        return None
    return int(step), int(n)


# -- calls: the key every event of one model or tool call carries ----------------------
def model_call_key(step: int, activity_id: str | None = None) -> str:
    """A model call's key: `p12` (or `p12.r1` for a repair) for a pipeline's or graph's call
    (its position, from its activity id), `7/model` for the loop's call of step 7."""
    position = _position(activity_id)
    if position is not None:
        return position
    return f"{step}/model"


def tool_call_key(step: int, tool_call_id: str, activity_id: str | None = None) -> str:
    """A tool call's key: `p12` for a pipeline's or graph's call, `7/call_abc` for the loop's."""
    position = _position(activity_id)
    if position is not None:
        return position
    return f"{step}/{tool_call_id}"


def pipeline_call_key(position: int, attempt: int = 0) -> str:
    return f"p{position}" if not attempt else f"p{position}.r{attempt}"


def _position(activity_id: str | None) -> str | None:
    """A pipeline call's activity id is `POSITION:KIND:LABEL:DIGEST[:rN]` (workflows/pipeline/ids.py)."""
    if not activity_id:
        return None
    parts = activity_id.split(":")
    if len(parts) not in (4, 5) or not parts[0].isdigit():
        return None
    repair = int(parts[4].removeprefix("r") or 0) if len(parts) == 5 else 0
    return pipeline_call_key(int(parts[0]), repair)


def live_id(call: str, what: str) -> str:
    return f"{call}~{what}"


# -- what durable events say -------------------------------------------------------------
def model_usage(prompt_tokens: int, completion_tokens: int, cost_usd: float) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "cost_usd": round(cost_usd, 9)}


def model_completed_data(call: str, message: dict[str, Any], model: str, usage: dict[str, Any],
                         label: str | None = None, node: str | None = None,
                         attempts: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"call": call, "model": model, "message": message, "usage": usage}
    if attempts is not None:
        data["attempts"] = attempts  # how many attempts the answer took (a retried call: 2 or more)
    if label is not None:
        data["label"] = label
    if node is not None:
        data["node"] = node
    return data


def tool_completed_data(call: str, log: Any, node: str | None = None) -> dict[str, Any]:
    """What a tool call's `tool.completed` says, from its log (ToolCallLog): its output (or the
    reference a reader resolves: `output_ref`), its error, how it was answered."""
    data: dict[str, Any] = {
        "call": call, "tool": log.tool_name, "tool_call_id": log.tool_call_id,
        "arguments": log.arguments, "output": log.output, "error": log.error,
        "failed": log.error is not None, "cached": log.served_from_cache, "reused": log.reused is not None,
        "dry_run": log.dry_run, "attempt": log.attempts, "duration_ms": log.duration_ms,
    }
    if log.output_ref is not None:
        data["output_ref"] = log.output_ref
    if log.approval is not None:
        data["approval"] = {"verdict": log.approval.verdict, "by": log.approval.by}
    if log.subagent is not None:
        data["subagent"] = {"branch": log.subagent.branch_id, "state": log.subagent.state}
    if node is not None:
        data["node"] = node
    return data


def _tool_key(record: Any, log: Any, node_call: dict[str, Any] | None) -> str:
    if node_call is not None and isinstance(node_call.get("position"), int):
        return pipeline_call_key(node_call["position"])
    pipeline = record.pipeline or {}
    if isinstance(pipeline.get("position"), int):
        return pipeline_call_key(pipeline["position"])
    return f"{record.step_index}/{log.tool_call_id}"


def starts_branch(record: Any) -> bool:
    """Whether `record` is its branch's first step of its own: step 0, or the first step after
    a fork point (its parent on another branch)."""
    if record.parent_id is None:
        return True
    return record.parent_id.rsplit(":", 2)[-2] != record.branch_id


def is_final(record: Any) -> bool:
    """Whether `record` ends its run: a failure, a pipeline's or graph's result, or a loop
    step whose model answered without tool calls."""
    if record.status == "failed":
        return True
    if record.pipeline is not None or record.step_label == "result":
        return record.step_label == "result"
    if record.step_index == 0 or record.step_label == "start":
        return False
    assistant = next((m for m in reversed(record.new_messages) if m.get("role") == "assistant"), None)
    return assistant is not None and not assistant.get("tool_calls") and not record.new_tool_calls


def step_events(record: Any) -> list[RunEvent]:
    """The durable events of one step, in order, from its record (a StepRecord, or one rebuilt
    from the store): what the worker emits as the step happens and a reader replays from the
    store, so both give the same ids. The last one is always `checkpoint`."""
    out: list[dict[str, Any]] = []

    def add(kind: str, data: dict[str, Any]) -> None:
        out.append({"type": kind, "data": data})

    if starts_branch(record):
        add("run.started", run_started_data(record))
    pipeline = record.pipeline or {}
    for custom in pipeline.get("emitted") or []:
        add("custom", dict(custom))
    if "superstep" in pipeline:  # a graph's super-step: its calls, in the order they completed
        logs = {log.tool_call_id: log for log in record.new_tool_calls}
        for call in pipeline.get("calls") or []:
            if call.get("kind") == "custom":
                add("custom", {"data": call.get("data"), "source": "graph", "node": call.get("node")})
            elif call.get("kind") == "llm" and call.get("message") is not None:
                add("model.completed", model_completed_data(
                    pipeline_call_key(int(call.get("position", 0)), int(call.get("attempt", 0))), call["message"],
                    str(call.get("model") or record.model),
                    model_usage(int(call.get("prompt_tokens", 0)), int(call.get("completion_tokens", 0)),
                                float(call.get("cost_usd", 0.0))),
                    label=call.get("label"), node=call.get("node")))
            elif call.get("tool_call_id") in logs:
                log = logs[call["tool_call_id"]]
                add("tool.completed", tool_completed_data(_tool_key(record, log, call), log, node=call.get("node")))
        for update in pipeline.get("updates") or ():  # each node's (a Send's once per send), as they ended
            add("graph.update", {"node": update.get("node"), "update": update.get("update")})
    else:
        assistant = None
        if record.step_ledger.model_calls and record.status != "failed":
            assistant = next((m for m in reversed(record.new_messages) if m.get("role") == "assistant"), None)
        if assistant is not None:
            ledger: Ledger = record.step_ledger
            key = (pipeline_call_key(int(pipeline["position"]), int(pipeline.get("attempt", 0)))
                   if isinstance(pipeline.get("position"), int) else f"{record.step_index}/model")
            add("model.completed", model_completed_data(
                key, assistant, record.model,
                model_usage(ledger.prompt_tokens - ledger.subagent_prompt_tokens,
                            ledger.completion_tokens - ledger.subagent_completion_tokens,
                            ledger.cost_usd - ledger.subagent_cost_usd),
                label=pipeline.get("label") if pipeline else None, attempts=ledger.model_retries + 1))
        for log in record.new_tool_calls:
            add("tool.completed", tool_completed_data(_tool_key(record, log, None), log))
    add("checkpoint", checkpoint_data(record))
    if is_final(record):  # after its checkpoint: a run that ended has its record stored
        if record.status == "failed":
            add("run.failed", {"reason": (record.error_info or {}).get("reason")})
        else:
            add("run.completed", {"answer": final_answer(record)})
    return [RunEvent(id=durable_id(record.step_index, n), type=e["type"], run_id=record.run_id,
                     branch=record.branch_id, step=record.step_index, time=record.created_at, data=e["data"])
            for n, e in enumerate(out)]


def run_started_data(record: Any) -> dict[str, Any]:
    """What `run.started` says: the checkpoint a fork or resume starts from (None for a new run)
    and the declared agent the branch runs, if any (a sub-agent: who called it)."""
    data: dict[str, Any] = {"forked_from": record.parent_id}
    if record.agent is not None:
        data["agent"] = record.agent
    return data


def final_answer(record: Any) -> str | None:
    assistant = next((m for m in reversed(record.new_messages) if m.get("role") == "assistant"), None)
    if assistant is None:
        return None
    content = assistant.get("content")
    return content if isinstance(content, str) else None


def checkpoint_data(record: Any) -> dict[str, Any]:
    ledger: Ledger = record.step_ledger
    return {
        "checkpoint_id": f"{record.run_id}:{record.branch_id}:{record.step_index}", "label": record.step_label,
        "status": record.status, "tokens": record.llm_tokens_used, "cost_usd": round(record.llm_cost_usd, 9),
        "step_tokens": ledger.total_tokens, "step_cost_usd": round(ledger.cost_usd, 9),
    }


def checkpoint_event(record: Any) -> RunEvent:
    """The step's `checkpoint` event (the checkpoint writer's, once the checkpoint is stored)."""
    return next(e for e in step_events(record) if e.type == "checkpoint")


__all__ = [
    "EVENTS_VERSION", "EVENT_TYPES", "END_TYPES", "LIVE_TYPES", "RunEvent", "durable_id", "parse_durable_id",
    "model_call_key", "tool_call_key", "pipeline_call_key", "live_id", "model_usage", "model_completed_data",
    "tool_completed_data", "starts_branch", "is_final", "step_events", "checkpoint_data", "checkpoint_event",
]
