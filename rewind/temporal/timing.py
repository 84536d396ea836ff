"""Step timing read from a run's Temporal history."""

from __future__ import annotations

import statistics
from typing import Any, Iterable

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from workflows.vocabulary.wire import CALL_LLM


def step_marks(events: Iterable[Any], model_activity: str = CALL_LLM) -> list[float]:
    """Event times (s) at which each step's model activity was scheduled, plus the workflow's end."""
    marks: list[float] = []
    end: float | None = None
    for event in events:
        t = event.event_time.ToDatetime().timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == model_activity:
                marks.append(t)
        elif event.event_type in (
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
            EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
        ):
            end = t
    if end is not None:
        marks.append(end)
    return marks


async def step_durations(client: Client, workflow_id: str) -> list[float]:
    """Seconds per step: from one model call's scheduling to the next (or to the end)."""
    marks = step_marks([e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()])
    return [b - a for a, b in zip(marks, marks[1:])]


async def retried_attempts(client: Client, workflow_id: str) -> dict[str, int]:
    """Per activity type, how many attempts beyond the first the run needed."""
    retries: dict[str, int] = {}
    names: dict[int, str] = {}
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            if attrs.attempt > 1:
                name = names.get(attrs.scheduled_event_id, "?")
                retries[name] = retries.get(name, 0) + attrs.attempt - 1
    return retries


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
