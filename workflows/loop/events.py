"""A run's events from workflow code: each durable event as it happens, the live ones of
the workflow (a call waiting for a person, a pause, a cancellation) (docs/streaming.md).

Workflow code does no I/O, so it only hands each event, when it is not replaying, to an
extern function the worker registers (rewind/worker/events.py), which publishes it without
ever making the workflow wait. A replay emits nothing: what a worker emitted before it died
is emitted again only for the part it did not finish, under the same ids (a reader drops
the copies), and the durable events of a step are in its checkpoint whatever the live
path lost.

A durable event's id is `STEP.N`: the Nth of `step_events(record)` (workflows/vocabulary/
events.py). Some go out before their step is recorded, as they happen (a loop step's
model answer, each of its tool calls as it completes, a graph node's calls): this module
counts them per step so that they take the ids `step_events` gives them, and once the
step is recorded it emits the rest of the step's events (the checkpoint's own event is
the checkpoint writer's, once the checkpoint is stored).
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.vocabulary.events import RunEvent, durable_id, live_id, run_started_data, step_events

EXTERN_EVENT = "__rewind_event"  # (RunEvent) -> None


class RunEvents:
    """The events of one workflow run (a branch's; a continued run gets another)."""

    def __init__(self) -> None:
        self._on = False
        self._run_id = ""
        self._branch = ""
        self._emitted: dict[int, set[int]] = {}  # step -> the durable events of it emitted already
        self._live = 0  # live events of the workflow so far (their ids)

    def started(self, run_id: str, branch: str) -> None:
        self._on = EXTERN_EVENT in workflow.extern_functions()
        self._run_id, self._branch = run_id, branch

    def _emit(self, event: RunEvent) -> None:
        if self._on and not workflow.unsafe.is_replaying():
            workflow.extern_functions()[EXTERN_EVENT](event)

    def _event(self, event_id: str, kind: str, step: int | None, data: dict[str, Any]) -> RunEvent:
        return RunEvent(id=event_id, type=kind, run_id=self._run_id, branch=self._branch, step=step,
                        time=workflow.now(), data=data)

    # -- durable events, as they happen ----------------------------------------------------
    def branch_started(self, step: int, opening: Any) -> None:
        """The branch starts (a new run, a fork, a resume): its `run.started`, the first event of
        its first step (`step`), before anything of that step happens."""
        self.durable(step, 0, "run.started", run_started_data(opening))

    def durable(self, step: int, n: int, kind: str, data: dict[str, Any]) -> None:
        """Durable event `n` of `step`, before the step is recorded (a model's answer, a tool call
        that completed): `n` is where `step_events` puts it."""
        self._emitted.setdefault(step, set()).add(n)
        self._emit(self._event(durable_id(step, n), kind, step, data))

    def recorded(self, record: Any) -> None:
        """A step is recorded: its durable events not emitted yet (but its checkpoint's, which the
        checkpoint writer emits once the checkpoint is stored)."""
        done = self._emitted.pop(record.step_index, set())
        if not self._on or workflow.unsafe.is_replaying():
            return
        for n, event in enumerate(step_events(record)):
            if n not in done and event.type != "checkpoint":
                self._emit(event)

    # -- live events of the workflow -------------------------------------------------------
    def live(self, call: str, what: str, kind: str, step: int | None, data: dict[str, Any]) -> None:
        self._emit(self._event(live_id(call, what), kind, step, data))

    def approval_waiting(self, call: str, step: int, pending: Any) -> None:
        self.live(call, "approval.waiting", "approval.waiting", step, {
            "call": call, "tool_call_id": pending.tool_call_id, "tool": pending.tool_name,
            "arguments": pending.arguments,
            "approve": f"rewind approve {pending.run_id} {pending.tool_call_id} --branch {pending.branch_id}",
            "reject": f"rewind reject {pending.run_id} {pending.tool_call_id} --branch {pending.branch_id}"})

    def approval_resolved(self, call: str, step: int, tool_call_id: str, record: Any) -> None:
        self.live(call, "approval.resolved", "approval.resolved", step, {
            "call": call, "tool_call_id": tool_call_id, "verdict": record.verdict, "by": record.by,
            "reason": record.reason})

    def paused(self, step: int, reason: str) -> None:
        self._live += 1
        self.live(f"{step}/run", f"paused.{self._live}", "run.paused", step, {"reason": reason})

    def cancelled(self, step: int) -> None:
        self.live(f"{step}/run", "cancelled", "run.cancelled", step, {})


__all__ = ["RunEvents", "EXTERN_EVENT"]
