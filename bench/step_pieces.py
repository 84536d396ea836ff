"""Where each step of a run spends its time, read from the run's history.

A step runs from its model activity's scheduling to the next one's (as
`rewind.temporal.timing.step_marks`). In between, one after the other: the
model activity waits for a worker (queue) and runs, a workflow task takes its
result and schedules the tool calls, they wait and run, and a workflow task
schedules the next model call. Each piece is charged to the step that
scheduled it; what no piece covers (the server's own hops between them, a
continue-as-new) is the step's rest. Activities off the step's path (a mirror
activity) are not counted, and tool calls that run side by side count as the
longest of them. Works across a continue-as-new chain (event ids restart in
each run).
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType

_CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
}
_ENDS = (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
         EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)

PIECES = ("model queue", "model run", "tool queue", "tool run", "workflow tasks", "rest")


def step_pieces(events: list[Any], model_activity: str, tool_activity: str) -> tuple[list[dict[str, float]], list[int]]:
    """Per step (1-based order; the last one ends at the workflow's end): seconds in each of
    PIECES and in `total`; and the steps during which the run continued as new."""
    steps: list[dict[str, float]] = []
    continued: list[int] = []
    scheduled: dict[tuple[int, int], tuple[str, int, float]] = {}  # (run, event id) -> (activity, step, time)
    started: dict[tuple[int, int], float] = {}
    tasks: dict[tuple[int, int], tuple[int, float]] = {}  # workflow tasks: (run, event id) -> (step, time)
    tools: dict[int, float] = {}  # step -> its longest tool call (queue + run), and its parts
    tool_parts: dict[int, tuple[float, float]] = {}
    marks: list[float] = []
    run = 0
    for e in events:
        t = e.event_time.ToDatetime().timestamp()
        et = e.event_type
        step = len(marks)  # 0 before the first model call
        if et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            run += 1
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            if name == model_activity:
                marks.append(t)
                steps.append(dict.fromkeys((*PIECES, "total"), 0.0))
                step = len(marks)
            scheduled[(run, e.event_id)] = (name, step, t)
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[(run, e.activity_task_started_event_attributes.scheduled_event_id)] = t
        elif et in _CLOSED:
            key = (run, getattr(e, _CLOSED[et]).scheduled_event_id)
            name, at_step, at = scheduled.get(key, ("?", 0, t))
            begun = started.get(key, at)
            if at_step and name == model_activity:
                steps[at_step - 1]["model queue"] += begun - at
                steps[at_step - 1]["model run"] += t - begun
            elif at_step and name == tool_activity and t - at > tools.get(at_step, -1.0):
                tools[at_step], tool_parts[at_step] = t - at, (begun - at, t - begun)
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            tasks[(run, e.event_id)] = (step, t)
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            at_step, at = tasks.get((run, e.workflow_task_completed_event_attributes.scheduled_event_id), (0, t))
            if at_step:
                steps[at_step - 1]["workflow tasks"] += t - at
        if et in _ENDS:
            if et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW and step:
                continued.append(step)
            else:
                marks.append(t)
    for i, piece in enumerate(steps):
        queue, ran = tool_parts.get(i + 1, (0.0, 0.0))
        piece["tool queue"], piece["tool run"] = queue, ran
        if i + 1 < len(marks):
            piece["total"] = marks[i + 1] - marks[i]
            piece["rest"] = piece["total"] - sum(piece[p] for p in PIECES if p != "rest")
    return steps, continued
