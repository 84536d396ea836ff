"""A branch's durable events from the store alone: each stored step read back as the record
the run made, and `step_events` applied to it, as the worker applied it to that record when
the step happened (workflows/vocabulary/events.py). So the events of a finished run come
back with Temporal down and its history gone, under the ids a live reader saw."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.schema import StepParts, ToolCallRecord
from checkpoint_bridge.projection.projector import log_of
from workflows.vocabulary.contracts import Ledger, StepRecord
from workflows.vocabulary.events import RunEvent, step_events


def record_of(parts: StepParts) -> StepRecord:
    """The step's record as the run made it, from what the store holds of the step."""
    fields = parts.scalars
    step = int(fields["step_index"])
    created = fields.get("created_at")
    ledgers = fields.get("ledger") or {}
    return StepRecord.model_construct(
        run_id=fields["run_id"], branch_id=fields.get("branch_id", "main"), step_index=step,
        parent_id=fields.get("parent_id"), step_label=fields.get("step_label", ""),
        new_messages=list(parts.new_messages),
        new_tool_calls=[log_of(ToolCallRecord.model_validate(r), step) for r in parts.new_tool_records],
        agent_variables=parts.agent_variables,
        created_at=datetime.fromisoformat(created) if isinstance(created, str) else created,
        model=fields.get("model") or "", status=fields.get("status", "completed"), error_info=fields.get("error_info"),
        llm_tokens_used=int(fields.get("llm_tokens_used", 0)), llm_cost_usd=float(fields.get("llm_cost_usd", 0.0)),
        step_ledger=Ledger.model_validate(ledgers.get("step") or {}),
        agent=fields.get("agent"), pipeline=fields.get("pipeline"),
    )


async def stored_events(store: CheckpointStore, run_id: str, branch_id: str, after_step: int = -1) -> list[RunEvent]:
    """The durable events of the branch's stored steps after `after_step`, in order."""
    out: list[RunEvent] = []
    for parts in await store.branch_steps(run_id, branch_id, after_step):
        out.extend(step_events(record_of(parts)))
    return out


def hydrated(event: RunEvent | dict[str, Any], outputs: dict[str, Any]) -> None:
    """A live tool.completed whose output went by reference gets its output (`outputs`: digest ->
    output), as the stored step has it."""
    data = event.data if isinstance(event, RunEvent) else event.get("data") or {}
    ref = data.get("output_ref")
    if ref is not None and ref in outputs:
        data["output"] = outputs[ref]
        del data["output_ref"]


__all__ = ["record_of", "stored_events", "hydrated"]
