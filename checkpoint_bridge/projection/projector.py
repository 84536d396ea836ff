"""History -> AgentCheckpoints.

Every step of a run ends with a `StepRecord` that says what the step added
(messages, tool calls, totals), as the input of the activity that writes its
checkpoint: the next model call, which carries it (`LlmRequest.checkpoints`; a
pipeline's tool call too, `ToolRequest.checkpoints`, and a graph's node-level node,
`GraphNodeRequest.checkpoints`), or the mirror activity (`mirror_steps`, `mirror_step` in older runs). Those
inputs are in the workflow's history as soon as the step ends, whatever
happens to the write afterwards. Projecting a run is therefore a fold of its
step records, in step order, over the previous checkpoint: the live mirror
and `rewind mirror` run the same fold and produce the same bytes.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter

from checkpoint_bridge.document.schema import AgentCheckpoint, StepParts, ToolCallRecord, checkpoint_to_dict
from workflows.vocabulary.contracts import (
    SUBAGENT_LEDGER_FIELDS,
    ApprovalRecord,
    EffectRef,
    McpToolInfo,
    Ledger,
    LlmRequest,
    MirrorBatch,
    StepRecord,
    SubagentCall,
    ToolCallLog,
    ToolRequest,
)
from workflows.vocabulary.errors import ProjectionError
from workflows.vocabulary.ids import checkpoint_id
from workflows.vocabulary.tool_calls import with_system_prompt
from workflows.vocabulary.code_runs import GraphNodeRequest
from workflows.vocabulary.wire import CALL_LLM, MIRROR_STEP, MIRROR_STEPS, RUN_GRAPH_NODE, RUN_TOOL



_COUNTED_LATER = ("model_retries", "tool_retries", "reused_calls", "dry_run_calls", *SUBAGENT_LEDGER_FIELDS)


def ledger_dict(ledger: Ledger) -> dict[str, Any]:
    """A ledger as a checkpoint stores it: counters added after a run may have been
    mirrored are left out while 0, so re-mirroring an older run gives the same document."""
    return ledger.model_dump(exclude={name for name in _COUNTED_LATER if getattr(ledger, name) == 0})


def tool_record(log: ToolCallLog) -> ToolCallRecord:
    arguments = log.arguments if isinstance(log.arguments, dict) else {"_unparsed_arguments": log.arguments}
    return ToolCallRecord(
        tool_name=log.tool_name,
        tool_input=arguments,
        tool_output=log.output,
        called_at=log.called_at,
        duration_ms=log.duration_ms,
        error=log.error,
        cache_key=log.cache_key or "",
        tool_call_id=log.tool_call_id,
        idempotency_key=log.idempotency_key,
        side_effects=log.side_effects,
        served_from_cache=log.served_from_cache,
        approval=log.approval.model_dump(mode="json") if log.approval is not None else None,
        reused=log.reused.model_dump(mode="json") if log.reused is not None else None,
        attempts=log.attempts,
        subagent=_subagent_dict(log),
        answered_from=log.answered_from,
        redo_of=log.redo_of,
        dry_run=log.dry_run,
        mcp=log.mcp.model_dump(mode="json") if log.mcp is not None else None,
    )


def log_of(record: ToolCallRecord, step: int) -> ToolCallLog:
    """A checkpoint's tool record as the run logged it (`tool_record` read back): what a
    redo answers a kept call with."""
    return ToolCallLog(
        step=step, tool_call_id=record.tool_call_id or "", tool_name=record.tool_name,
        arguments=record.tool_input, output=record.tool_output, error=record.error, called_at=record.called_at,
        duration_ms=record.duration_ms, cache_key=record.cache_key or None, idempotency_key=record.idempotency_key,
        side_effects=record.side_effects, served_from_cache=record.served_from_cache,
        approval=ApprovalRecord.model_validate(record.approval) if record.approval else None,
        reused=EffectRef.model_validate(record.reused) if record.reused else None,
        attempts=record.attempts,
        subagent=SubagentCall.model_validate(record.subagent) if record.subagent else None,
        dry_run=record.dry_run,
        mcp=McpToolInfo.model_validate(record.mcp) if record.mcp else None,
    )


def _subagent_dict(log: ToolCallLog) -> dict[str, Any] | None:
    if log.subagent is None:
        return None
    data = log.subagent.model_dump(mode="json", exclude_none=True)
    if log.subagent.ledger is not None:
        data["ledger"] = ledger_dict(log.subagent.ledger)
    return data


def _checkpoint(record: StepRecord, messages: list[dict[str, Any]], tools: list[ToolCallRecord]) -> AgentCheckpoint:
    return AgentCheckpoint(
        checkpoint_id=checkpoint_id(record.run_id, record.branch_id, record.step_index),
        run_id=record.run_id,
        parent_id=record.parent_id,
        branch_id=record.branch_id,
        step_index=record.step_index,
        step_label=record.step_label,
        messages=messages,
        agent_variables=dict(record.agent_variables),
        tool_call_cache=tools,
        created_at=record.created_at,
        llm_tokens_used=record.llm_tokens_used,
        llm_cost_usd=record.llm_cost_usd,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        model=record.model,
        status=record.status,
        error_info=record.error_info,
        ledger={
            "step": ledger_dict(record.step_ledger),
            "branch": ledger_dict(record.branch_ledger),
            "total": ledger_dict(record.total_ledger),
        },
        model_view=record.model_view,
        agent=record.agent,
        pipeline=record.pipeline,
    )


def apply_record(parent: AgentCheckpoint | None, record: StepRecord) -> AgentCheckpoint:
    """The checkpoint after `record`'s step, given the checkpoint before it."""
    _check_parent(parent.checkpoint_id if parent is not None else None, record)
    messages = [*(parent.messages if parent else []), *record.new_messages]
    if record.system_prompt is not None:
        # A fork with a new system prompt: the branch's conversation uses it from here on.
        messages = with_system_prompt(messages, record.system_prompt)
    tools = [*(parent.tool_call_cache if parent else []), *map(tool_record, record.new_tool_calls)]
    return _checkpoint(record, messages, tools)


def record_parts(record: StepRecord) -> StepParts:
    """What `record`'s step adds to its parent, as the store writes it (`save_step`):
    the same checkpoint as `apply_record` once loaded, built from the step alone."""
    doc = checkpoint_to_dict(_checkpoint(record, list(record.new_messages), list(map(tool_record, record.new_tool_calls))))
    messages, tools, variables = doc.pop("messages"), doc.pop("tool_call_cache"), doc.pop("agent_variables")
    return StepParts(doc, messages, tools, variables, record.system_prompt)


def _check_parent(parent_id: str | None, record: StepRecord) -> None:
    if (parent_id is None) != (record.parent_id is None):
        raise ProjectionError(
            f"step {record.step_index} of run {record.run_id!r} names parent {record.parent_id!r} "
            f"but {'none' if parent_id is None else repr(parent_id)} was given"
        )
    if parent_id is not None and parent_id != record.parent_id:
        raise ProjectionError(f"step {record.step_index}: parent is {record.parent_id}, got {parent_id}")


def project(records: Iterable[StepRecord], base: AgentCheckpoint | None = None) -> list[AgentCheckpoint]:
    """Pure: the checkpoints of one branch from its step records (any order, repeats allowed).

    `base` is the checkpoint the first record continues from when it lies
    outside these records (a fork point, or the step a rollback continued from).
    """
    by_step: dict[int, StepRecord] = {}
    for record in records:
        by_step.setdefault(record.step_index, record)
    checkpoints: list[AgentCheckpoint] = []
    parent: AgentCheckpoint | None = base
    for step in sorted(by_step):
        record = by_step[step]
        if record.parent_id is not None and parent is None:
            raise ProjectionError(f"step {step} of run {record.run_id!r} has no parent record in this history")
        parent = apply_record(parent, record)
        checkpoints.append(parent)
    return checkpoints


async def step_records(events: Sequence[HistoryEvent], converter: DataConverter) -> list[StepRecord]:
    """Decode the StepRecords found in history events: carried by model calls, and the
    inputs of `mirror_steps` (and of `mirror_step` in runs from before batches). A record
    can be in two places (a carried write that failed goes to the mirror too): the same."""
    records: list[StepRecord] = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            continue
        attrs = event.activity_task_scheduled_event_attributes
        if attrs.activity_type.name == MIRROR_STEPS:
            (batch,) = await converter.decode(attrs.input.payloads, [MirrorBatch])
            records.extend(batch.records)
        elif attrs.activity_type.name == MIRROR_STEP:
            (record,) = await converter.decode(attrs.input.payloads, [StepRecord])
            records.append(record)
        elif attrs.activity_type.name == CALL_LLM:
            (request,) = await converter.decode(attrs.input.payloads, [LlmRequest])
            records.extend(request.checkpoints)
        elif attrs.activity_type.name == RUN_TOOL:
            (call,) = await converter.decode(attrs.input.payloads, [ToolRequest])
            records.extend(StepRecord.model_validate(r) for r in call.checkpoints)  # a pipeline's tool call's
        elif attrs.activity_type.name == RUN_GRAPH_NODE:
            (node,) = await converter.decode(attrs.input.payloads, [GraphNodeRequest])
            records.extend(node.checkpoints)  # a graph's node-level node's
    return records


async def chain_events(client: Client, workflow_id: str) -> list[HistoryEvent]:
    """Every event of a workflow, across its continue-as-new chain, oldest first."""
    histories: list[list[HistoryEvent]] = []
    run_id: str | None = None
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        events = [e async for e in handle.fetch_history_events()]
        histories.append(events)
        first: Any = events[0].workflow_execution_started_event_attributes if events else None
        previous = first.continued_execution_run_id if first is not None else ""
        if not previous:
            break
        run_id = previous
    return [e for history in reversed(histories) for e in history]


async def first_events(client: Client, workflow_id: str, count: int, run_id: str | None = None) -> list[HistoryEvent]:
    """The first `count` events of one run of a workflow (its newest run unless `run_id`
    names one): one page, one request, however long the run."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    events: list[HistoryEvent] = []
    async for event in handle.fetch_history_events(page_size=count):
        events.append(event)
        if len(events) >= count:
            break
    if not events:
        raise ProjectionError(f"workflow {workflow_id} has an empty history")
    return events


async def first_started_event(client: Client, workflow_id: str, run_id: str | None = None) -> HistoryEvent:
    """The start event of the first run of a workflow's continue-as-new chain, reading
    one event per run from `run_id` (default: the newest) back (a long run's whole
    history is not needed for its start input)."""
    while True:
        first = (await first_events(client, workflow_id, 1, run_id))[0]
        previous = first.workflow_execution_started_event_attributes.continued_execution_run_id
        if not previous:
            return first
        run_id = previous


async def project_workflow(client: Client, workflow_id: str, base_loader=None, outputs=None) -> list[AgentCheckpoint]:  # type: ignore[no-untyped-def]
    """Checkpoints of one branch workflow; `base_loader(checkpoint_id)` supplies a fork point,
    `outputs` (an OutputStore) the tool outputs history names by reference."""
    events = await chain_events(client, workflow_id)
    records = await step_records(events, client.data_converter)
    if outputs is not None:
        records = [await outputs.resolve_record(r) for r in records]
    base = None
    if records:
        first = min(records, key=lambda r: r.step_index)
        if first.parent_id is not None and base_loader is not None:
            base = await base_loader(first.parent_id)
    return project(records, base)
