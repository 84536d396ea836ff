"""Temporal Cloud billable actions of a run, estimated from its history.

Temporal Cloud bills per action (docs.temporal.io/cloud/actions): a workflow
start (a client's, a continue-as-new's, a child's), each activity scheduled and
each retry of it (the attempt number of its started event, minus one), the
local activities of one workflow task as one action (plus their retries), a
timer started, a signal, an accepted update, a search attribute upsert, a child
workflow started (two actions), and heartbeats that reach the server. All but
heartbeats and queries are in history; those two are counted apart (the
benchmarks' calls end before an activity's first beat, 0.25 s, and send no
query). Billed actions are metered by Temporal Cloud itself: this is the
estimate the docs describe from event histories, not an invoice.

`per_step` splits a run's actions into those of its steps (from its first model
call scheduled to its last model call's completion) and those of the run around
them (the start, describing the tools, the last checkpoint written at the end).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from temporalio.api.enums.v1 import EventType

E = EventType
# Local activities are recorded as markers of this name (the Python SDK's core).
LOCAL_ACTIVITY_MARKER = "core_local_activity"
CHANGE_VERSION_ATTRIBUTE = "TemporalChangeVersion"  # exempt from billing


def _actions_of(event: Any, local_tasks: set[int]) -> tuple[str, int]:
    """(kind, number of actions) of one history event."""
    et = event.event_type
    if et == E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        return "workflow start", 1
    if et == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return event.activity_task_scheduled_event_attributes.activity_type.name, 1
    if et == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        return "activity retries", max(event.activity_task_started_event_attributes.attempt - 1, 0)
    if et == E.EVENT_TYPE_MARKER_RECORDED:
        attrs = event.marker_recorded_event_attributes
        task = attrs.workflow_task_completed_event_id
        if attrs.marker_name == LOCAL_ACTIVITY_MARKER and task not in local_tasks:
            local_tasks.add(task)  # every local activity of one workflow task: one action
            return "local activities", 1
        return "local activities", 0
    if et == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
        meter = event.workflow_task_completed_event_attributes.metering_metadata
        return "local activity retries", meter.nonfirst_local_activity_execution_attempts
    if et == E.EVENT_TYPE_TIMER_STARTED:
        return "timers", 1
    if et == E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
        return "signals", 1
    if et == E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
        return "updates", 1
    if et == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
        return "child workflow starts", 2
    if et == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        return "search attribute upserts", 0 if set(fields) <= {CHANGE_VERSION_ATTRIBUTE} else 1
    return "", 0


def billable_actions(events: list[Any], model_activity: str) -> dict[str, Any]:
    """A run's estimated billable actions: in total, by kind, and split into its steps'
    and the run's own (outside the steps; see the module's docstring)."""
    scheduled: dict[int, str] = {}
    first_call = last_call_done = None
    for index, event in enumerate(events):
        if event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            if scheduled[event.event_id] == model_activity and first_call is None:
                first_call = index
        elif event.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id) == model_activity:
                last_call_done = index
    by_kind: Counter[str] = Counter()
    in_steps = around = 0
    local_tasks: set[int] = set()
    for index, event in enumerate(events):
        kind, count = _actions_of(event, local_tasks)
        if not count:
            continue
        by_kind[kind] += count
        inside = first_call is not None and last_call_done is not None and first_call <= index <= last_call_done
        in_steps += count if inside else 0
        around += 0 if inside else count
    return {"total": in_steps + around, "in_steps": in_steps, "per_run": around, "by_kind": dict(by_kind)}


def add_up(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' billable_actions summed."""
    by_kind: Counter[str] = Counter()
    for f in figures:
        by_kind.update(f["by_kind"])
    return {"total": sum(f["total"] for f in figures), "in_steps": sum(f["in_steps"] for f in figures),
            "per_run": sum(f["per_run"] for f in figures), "by_kind": dict(by_kind), "runs": len(figures)}
