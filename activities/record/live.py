"""The live events of one activity attempt: a call starting, the model's deltas, a retry and
its reason, a tool's progress (`rewind.emit`), and the end of the attempt (docs/streaming.md).

They go to the worker's bus (checkpoint_bridge/events/bus.py) and nowhere else: not to
Temporal history, not to the store. Each carries the call's key and the attempt, so a
reader that reconnects gets the call in flight from its current attempt's start and tells
an attempt's deltas from the next one's. Publishing never waits and never raises.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from temporalio import activity

from checkpoint_bridge.events.bus import Publisher
from checkpoint_bridge.events.window import ended_message
from workflows.vocabulary.events import EVENTS_VERSION, live_id


def branch_of(run_id: str, workflow_id: str) -> str:
    """The branch a workflow id names (workflows/vocabulary/ids.py workflow_id_for)."""
    if workflow_id == run_id:
        return "main"
    prefix = f"{run_id}--"
    return workflow_id[len(prefix):] if workflow_id.startswith(prefix) else "main"


class CallEvents:
    """What one attempt of one call publishes."""

    def __init__(self, publisher: Publisher | None, run_id: str, branch: str, step: int | None, call: str,
                 attempt: int) -> None:
        self._publisher = publisher
        self.run_id, self.branch, self.step, self.call, self.attempt = run_id, branch, step, call, attempt
        self._seq = 0

    @classmethod
    def of_activity(cls, publisher: Publisher | None, run_id: str, step: int | None, call: str) -> "CallEvents":
        """The running activity's (its branch and attempt from Temporal's activity info)."""
        info = activity.info()
        return cls(publisher, run_id, branch_of(run_id, info.workflow_id or ""), step, call, info.attempt)

    @property
    def on(self) -> bool:
        return self._publisher is not None

    def publish(self, kind: str, what: str, data: dict[str, Any]) -> None:
        if self._publisher is None:
            return
        self._publisher.publish({
            "v": EVENTS_VERSION, "id": live_id(self.call, f"a{self.attempt}.{what}"), "type": kind,
            "run_id": self.run_id, "branch": self.branch, "step": self.step,
            "time": datetime.now(timezone.utc).isoformat(), "path": [],
            "data": {"call": self.call, "attempt": self.attempt, **data},
        })

    def started(self, kind: str, data: dict[str, Any]) -> None:
        """`model.started` / `tool.started` on a first attempt, `model.retrying` on a later one
        (`reason`: why the attempt before ended, when it said so)."""
        if self.attempt > 1 and kind == "model.started":
            self.retrying(self.attempt, data.pop("reason", None) or
                          f"attempt {self.attempt - 1} ended without an answer (its worker stopped or timed out)")
        self.publish(kind, "start", data)

    def retrying(self, attempt: int, reason: str) -> None:
        """The call goes again as `attempt` (said by the attempt that failed, and by the next one
        as it starts: one id, so a reader gets it once)."""
        if self._publisher is None:
            return
        self._publisher.publish({
            "v": EVENTS_VERSION, "id": live_id(self.call, f"a{attempt}.retry"), "type": "model.retrying",
            "run_id": self.run_id, "branch": self.branch, "step": self.step,
            "time": datetime.now(timezone.utc).isoformat(), "path": [],
            "data": {"call": self.call, "attempt": attempt, "reason": reason},
        })

    def delta(self, data: dict[str, Any]) -> None:
        self._seq += 1
        self.publish("model.delta", f"d{self._seq}", {"index": self._seq, **data})

    def custom(self, value: Any, source: str = "tool") -> None:
        """A value the call's code tells its watchers (`rewind.emit` in a tool, a node-level graph
        node's stream writer)."""
        self._seq += 1
        self.publish("custom", f"c{self._seq}", {"data": json.loads(json.dumps(value, default=str)), "source": source})

    def ended(self) -> None:
        if self._publisher is not None:
            self._publisher.publish(ended_message(self.run_id, self.branch, self.call, self.attempt))



__all__ = ["CallEvents", "branch_of"]
