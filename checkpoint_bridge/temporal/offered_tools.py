"""The tools a branch's model was offered, as its history records them.

The checkpoint store keeps a run's tool calls, not the tool schemas the model saw: those
go to the model with each `call_llm` activity, inline the first time a run sends a set
(`LlmRequest.tools`) and after that by the digest under which the model-call activity
stored them in the payload store (`tools_ref`). This reads the last `call_llm` a branch's
workflow scheduled (its newest run's history: a continued run offers its tools again) and
says which: the list itself, or the digest to read (activities/model/transcript.py reads it).
None when Temporal no longer has the history (past its retention) or the branch made no
model call.
"""

from __future__ import annotations

from typing import Any

from workflows.vocabulary.contracts import LlmRequest
from workflows.vocabulary.ids import workflow_id_for
from workflows.vocabulary.wire import CALL_LLM


async def offered_tools(client: Any, run_id: str, branch_id: str) -> tuple[list[dict[str, Any]], str | None] | None:
    """(the tools inline, or [] with the digest they are stored under) of the branch's last
    model call, or None (no history, no model call)."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.service import RPCError, RPCStatusCode

    handle = client.get_workflow_handle(workflow_id_for(run_id, branch_id))
    last = None
    try:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == CALL_LLM:
                    last = attrs.input
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            return None
        raise
    if last is None or not last.payloads:
        return None
    request = (await client.data_converter.decode(last.payloads, [LlmRequest]))[0]
    if request.tools:
        return request.tools, None
    return ([], request.tools_ref) if request.tools_ref else None


__all__ = ["offered_tools"]
