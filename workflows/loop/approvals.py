"""Tool calls that wait for a person's decision (workflow code: deterministic).

A call that needs approval waits in the workflow, so the wait is as durable
as the run: days if need be, across worker restarts and crashes (a replay
rebuilds the wait from history, where every decision is an accepted update).
Each call waits for its own decision; parallel calls of one step go on as
each is decided. Decisions arrive through the `decide_tool_call` update:
its validator refuses an unknown call or one already decided before
anything is written to history, so a refused decision leaves the run as it was.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Callable

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.vocabulary.contracts import ApprovalDecision, ApprovalRecord, PendingApproval
from workflows.vocabulary.wire import DECISION_REFUSED


# The tool name a graph run's interrupt() waits under (`rewind pending`, `rewind approve --value`).
INTERRUPT = "interrupt"


def refused(message: str) -> ApplicationError:
    """An error to the caller of the update; the run is unchanged."""
    return ApplicationError(message, type=DECISION_REFUSED, non_retryable=True)


class ApprovalGate:
    def __init__(self, on_change: Callable[[], None] = lambda: None,
                 on_event: Callable[[PendingApproval, ApprovalRecord | None], None] = lambda _p, _r: None) -> None:
        self._on_change = on_change  # called when a call starts or stops waiting
        # Told when a call starts waiting (None) and when it is decided (the record): its live events.
        self._on_event = on_event
        self.pending: dict[str, PendingApproval] = {}
        self._decided: dict[str, ApprovalRecord] = {}
        self._edited: dict[str, dict[str, Any]] = {}

    def check(self, decision: ApprovalDecision) -> PendingApproval:
        """The waiting call the decision is for; raises `refused` if it cannot be taken."""
        call = decision.tool_call_id
        waiting = self.pending.get(call)
        if waiting is None or call in self._decided:
            if call in self._decided:
                raise refused(f"tool call {call!r} was already decided ({self._decided[call].verdict} "
                              f"by {self._decided[call].by}); a decision cannot be changed")
            known = ", ".join(sorted(self.pending)) or "none"
            raise refused(f"no tool call {call!r} is waiting for a decision in this run; waiting: {known} "
                          "(see `rewind pending`)")
        if not decision.by.strip():
            raise refused("say who decides (--by NAME)")
        if decision.verdict == "reject":
            if not (decision.reason or "").strip():
                raise refused("a rejection needs a reason (--reason TEXT): the model receives it as the tool result")
            if decision.arguments is not None:
                raise refused("edited arguments go with an approval, not a rejection")
            if decision.value is not None:
                raise refused("a value goes with an approval, not a rejection")
        if decision.value is not None and waiting.tool_name != INTERRUPT:
            raise refused(f"{call!r} is a call of tool {waiting.tool_name}: --value answers a graph's interrupt(); "
                          "edit a tool call's arguments with --args")
        return waiting

    def decide(self, decision: ApprovalDecision) -> ApprovalRecord:
        waiting = self.check(decision)
        edited = decision.arguments is not None and decision.arguments != waiting.arguments
        now = workflow.now()
        decided = decision.decided_at if decision.decided_at is not None and decision.decided_at < now else now
        record = ApprovalRecord(
            verdict="approved" if decision.verdict == "approve" else "rejected",
            by=decision.by, requested_at=waiting.requested_at, decided_at=decided,
            applied_at=now if (now - decided).total_seconds() > 1 else None,
            reason=decision.reason, original_arguments=waiting.arguments if edited else None,
            repeat_of=waiting.repeat_of, value=decision.value,
        )
        self._decided[decision.tool_call_id] = record
        if edited:
            assert decision.arguments is not None
            self._edited[decision.tool_call_id] = decision.arguments
        return record

    async def wait(
        self, request: PendingApproval, timeout_s: float | None,
    ) -> tuple[ApprovalRecord, dict[str, Any]]:
        """The decision on `request`, and the arguments to run it with."""
        call = request.tool_call_id
        # Decisions are addressed by call id. Some models number their calls anew at
        # every turn (`call_0` again and again): a later call with the id of an
        # earlier one starts undecided, and one that repeats an id within a step
        # waits until the first has been decided.
        if call in self.pending:
            await workflow.wait_condition(lambda: call not in self.pending)
        self._decided.pop(call, None)
        self._edited.pop(call, None)
        if timeout_s is not None:
            request = request.model_copy(update={"deadline": request.requested_at + timedelta(seconds=timeout_s)})
        self.pending[call] = request
        self._on_change()
        self._on_event(request, None)
        try:
            try:
                await workflow.wait_condition(
                    lambda: call in self._decided,
                    timeout=timedelta(seconds=timeout_s) if timeout_s is not None else None,
                )
            except asyncio.TimeoutError:
                self._decided[call] = ApprovalRecord(
                    verdict="approved" if request.on_timeout == "approve" else "rejected",
                    by="timeout", requested_at=request.requested_at, decided_at=workflow.now(),
                    reason=f"no decision within {timeout_s:g} s; the tool's default is to {request.on_timeout}",
                    timed_out=True, repeat_of=request.repeat_of,
                )
            self._on_event(request, self._decided[call])
            return self._decided[call], self._edited.get(call, request.arguments)
        finally:
            self.pending.pop(call, None)
            self._on_change()


def rejection_text(record: ApprovalRecord, tool_name: str) -> str:
    """The tool result the model receives for a rejected call."""
    return f"{tool_name} was not run: rejected by {record.by}: {record.reason or 'no reason given'}"


__all__ = ["ApprovalGate", "refused", "rejection_text", "INTERRUPT"]
