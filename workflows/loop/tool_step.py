"""Answering the tool calls of one model reply (workflow code: deterministic).

Each call becomes exactly one `tool` message with the call's id, whatever the
model sent: bad JSON, an unknown tool, arguments that fail validation and a
tool that keeps failing all become messages the model can act on. Read-only
calls already answered in the run are served from the run's cache without an
activity; identical calls within one reply run once. A side-effecting call
may first wait for a person's decision (workflows/loop/approvals.py), and one that
repeats an effect of the branch's lineage follows its tool's `on_repeat`
(workflows/loop/effects.py).
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any, Callable

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows.loop.approvals import ApprovalGate, rejection_text
    from workflows.vocabulary.canonical import cache_key, canonical_json
    from workflows.vocabulary.contracts import (
        AgentInput,
        Ledger,
        PendingApproval,
        StepRecord,
        ToolCallLog,
        ToolCheck,
        ToolCheckRequest,
        ToolOutcome,
        ToolRequest,
        ToolSpec,
    )
    from workflows.loop.effects import LineageEffects, reference
    from workflows.vocabulary import metrics
    from workflows.loop.subagents import SubagentCalls, task_problem, task_text
    from workflows.vocabulary.tool_calls import (
        BAD_ARGUMENTS,
        UNKNOWN_TOOL,
        canonical_arguments,
        dry_run_stub,
        failed_after_retries,
        failure_text,
        idempotency_key,
        tool_message,
    )
    from workflows.vocabulary.summaries import tool_call_summary
    from workflows.vocabulary.wire import CHECK_TOOL_CALL, RUN_TOOL, TOOL_NOT_REGISTERED, tool_task_queue



# A cached output that is stored by reference (LoopState.tool_cache holds outputs).
_CACHED_REF = "$rewind_output_ref"


def _from_cache(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_CACHED_REF), str):
        return {"output_ref": value[_CACHED_REF]}
    return {"output": value}


class ToolStep:
    def __init__(
        self, inp: AgentInput, specs: list[ToolSpec], cache: dict[str, Any], *, routed: bool = False,
        gate: ApprovalGate | None = None, trace: Any = None,
        budget_left: Callable[[], tuple[float | None, int | None]] = lambda: (None, None),
        on_change: Callable[[], None] = lambda: None, inline_outputs: bool = False,
        on_answered: Callable[[ToolCallLog, int], None] = lambda _log, _index: None,
    ) -> None:
        self._inp = inp
        # Told of each call as it is answered, with how many of the step's calls were before it.
        self._on_answered = on_answered
        # A pipeline hands outputs to its code: never by reference (ToolRequest.inline_output).
        self._inline_outputs = inline_outputs
        # A pipeline call's activity id (workflows/pipeline/ids.py), by tool call id.
        self._activity_ids: dict[str, str] = {}
        # A pipeline call's carried step records, and how many its activity wrote, by tool call id.
        self._carry: dict[str, list[StepRecord]] = {}
        self._carried: dict[str, int] = {}
        self.gate = gate or ApprovalGate()
        self._trace = trace  # workflows.loop.tracing.RunTrace: a span per sub-agent call
        # Each call on its tool's own task queue (see workflows.vocabulary.wire.tool_task_queue).
        self._routed = routed
        self._specs = {s.name: s for s in specs}
        # A fork or rollback seeds the lineage's effects through `resume`; a sub-agent's
        # first run gets its caller's.
        resumed = inp.resume.lineage_effects if inp.resume is not None else inp.lineage_effects
        self._lineage = LineageEffects(resumed, self._specs)
        self.agents = SubagentCalls(inp, resumed, budget_left, on_change)
        self._cache = cache  # cache key -> output; lives in LoopState, so it survives continue-as-new
        self._inflight: dict[str, asyncio.Future[ToolOutcome | str]] = {}
        # This step's tool calls and cache hits; the loop adds them to the step's
        # ledger and starts a new one when it records the step.
        self.ledger = Ledger()
        self._log: list[ToolCallLog] = []  # this step's calls, until taken
        self.last_error: str | None = None

    def begin_step(self, calls: list[dict[str, Any]]) -> None:
        """The tool calls of a new step are about to be answered (its sub-agents share the budget)."""
        names = [str((c.get("function") or {}).get("name", "")) for c in calls]
        self.agents.begin_step(sum(1 for n in names if (s := self._specs.get(n)) is not None and s.agent is not None))

    def names(self) -> list[str]:
        return sorted(self._specs)

    async def call(self, step: int, call: dict[str, Any], *, activity_id: str | None = None,
                   carry: list[StepRecord] | None = None) -> tuple[ToolCallLog, int]:
        """A pipeline's tool call (`ctx.tool`): answered as the loop answers one, returned as its log.
        `activity_id` names the call's activity, so a replay on changed code is told apart. `carry`:
        step records the tool activity writes beside the call (ToolRequest.checkpoints); the number
        it wrote comes back with the log (0 where the call ran no activity of the run's own)."""
        call_id = str(call.get("id", ""))
        if activity_id is not None:
            self._activity_ids[call_id] = activity_id
        if carry:
            self._carry[call_id] = carry
        try:
            await self.answer(step, call)
        finally:
            self._activity_ids.pop(call_id, None)
            self._carry.pop(call_id, None)
        index = max(i for i, log in enumerate(self._log) if log.tool_call_id == call_id)
        return self._log.pop(index), self._carried.pop(call_id, 0)

    def take_log(self) -> list[ToolCallLog]:
        """The calls logged since the last take (one step's worth)."""
        taken, self._log = self._log, []
        return taken

    async def answer(self, step: int, call: dict[str, Any], *, override: dict[str, str] | None = None,
                     redo_of: str | None = None) -> dict[str, Any]:
        """One tool message answering `call`; never raises for bad model output. `override`
        (a redo) runs a sub-agent with another system prompt or model; `redo_of` names the
        recorded step whose call this one runs again (the tool-result cache is not asked)."""
        call_id = str(call.get("id", ""))
        function = call.get("function") or {}
        name = str(function.get("name", ""))
        log = ToolCallLog(step=step, tool_call_id=call_id, tool_name=name,
                          arguments=function.get("arguments"), called_at=workflow.now())
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs)) or "none"
            return self._finish(log, error=f"{UNKNOWN_TOOL} {name!r}; available tools: {known}")
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError as exc:
            return self._finish(log, error=f"{BAD_ARGUMENTS} {name} are not valid JSON ({exc}); send a JSON object")
        if not isinstance(args, dict):
            return self._finish(log, error=f"{BAD_ARGUMENTS} {name} must be a JSON object, got {type(args).__name__}")
        log.arguments = args
        log.redo_of = redo_of
        log.mcp = spec.mcp  # why an MCP call was cached, reused or gated, for show and diff

        if spec.agent is not None:
            return await self._subagent(step, call_id, spec, args, log, override)
        if spec.side_effects:
            log.side_effects = True
            log.idempotency_key = idempotency_key(workflow.info().workflow_id, self._inp.branch_id, step, call_id)
            return await self._side_effect(step, call_id, spec, args, log)

        key = log.cache_key = cache_key(name, canonical_arguments(args, spec))
        if key in self._cache and redo_of is None:
            self.ledger.cache_hits += 1
            log.served_from_cache = True
            return self._finish(log, **_from_cache(self._cache[key]))
        pending = self._inflight.get(key)
        if pending is not None:
            # The same read-only call is already running in this step: share it.
            self.ledger.cache_hits += 1
            log.served_from_cache = True
            return self._apply(log, await pending, executed=False)
        task = asyncio.ensure_future(self._execute(step, call_id, spec, args, None))
        self._inflight[key] = task
        try:
            result = await task
        finally:
            del self._inflight[key]
        return self._apply(log, result, executed=True)

    def spec(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def answered(self, step: int, recorded: ToolCallLog, source: str) -> dict[str, Any]:
        """A call of a redone step answered from its recorded answer (`rewind redo`)."""
        log = recorded.model_copy(update={"step": step, "answered_from": source, "redo_of": None})
        tool = log.tool_name if log.tool_name in self._specs else "unknown"
        metrics.count(workflow.metric_meter(), metrics.TOOL_CALLS, tool=tool, outcome="recorded")
        self._log.append(log)
        return tool_message(log)

    async def _subagent(self, step: int, call_id: str, spec: ToolSpec, args: dict[str, Any], log: ToolCallLog,
                        override: dict[str, str] | None) -> dict[str, Any]:
        """A sub-agent call: its run's final answer, or why there is none (workflows/loop/subagents.py)."""
        agent = spec.agent
        assert agent is not None
        # A child pipeline's arguments are checked by the worker that describes it (its run fails in one line).
        if agent.task_only and not agent.pipeline:
            problem = task_problem(spec, args)
            if problem is not None:
                return self._finish(log, error=f"{BAD_ARGUMENTS} {spec.name} are invalid: {problem}")
        elif not agent.pipeline:
            # A declared argument model: a worker that holds the sub-agent validates the arguments.
            checked = await self.check(spec, args, step=step)
            if checked is None:
                return self._finish(log, error=f"no worker holding sub-agent {spec.name} could check its arguments")
            if checked.invalid is not None:
                return self._finish(log, error=f"{BAD_ARGUMENTS} {spec.name} are invalid: {checked.invalid}")
            args = checked.arguments if checked.arguments is not None else args
        token = self._trace.call_started(step, call_id) if self._trace is not None else None
        started = workflow.now()
        try:
            task = f"{spec.name}({canonical_json(args)})" if agent.pipeline else task_text(agent, args)
            record, answer, error, spent = await self.agents.run(step, call_id, spec, task, override=override,
                                                                 arguments=args)
        finally:
            if self._trace is not None:
                self._trace.call_ended(token)
        log.subagent = record
        log.duration_ms = int((workflow.now() - started).total_seconds() * 1000)
        if record.state != "refused":
            self.ledger = self.ledger.plus(spent.rolled_up())
        return self._finish(log, output=answer, error=error)

    async def _side_effect(self, step: int, call_id: str, spec: ToolSpec, args: dict[str, Any], log: ToolCallLog) -> dict[str, Any]:
        repeat = self._lineage.repeat_of(spec, args)
        checked: ToolCheck | None = None
        earlier = self._lineage.of_tool(spec.name)
        if repeat is None and earlier:
            # The same effect may be spelled differently ("450" and 450): a worker that
            # holds the tool compares the validated values.
            checked = await self.check(spec, args, [e.arguments for e in earlier], step=step)
            if checked is not None and checked.repeat_index is not None and checked.repeat_index < len(earlier):
                repeat = earlier[checked.repeat_index]
        mode = self._inp.side_effects
        if repeat is not None and (spec.on_repeat == "reuse" or mode != "run"):
            # The effect happened on this branch's lineage: its result, not a second effect
            # (a reuse or dry-run branch never repeats one, whatever the tool's on_repeat).
            log.reused = reference(repeat)
            self.ledger.reused_calls += 1
            return self._finish(log, output=repeat.output)
        if mode == "dry-run":
            # Exploring: no effect happens, and nobody is asked to approve one.
            log.dry_run = True
            self.ledger.dry_run_calls += 1
            if spec.dry_run:
                result = await self._execute(step, call_id, spec, args, log.idempotency_key, dry_run=True)
                return self._apply(log, result, executed=True)
            return self._finish(log, output=dry_run_stub(spec.name, args))
        asks = spec.approval == "always" or (repeat is not None and spec.on_repeat == "ask")
        if not asks and spec.approval == "by_arguments":
            checked = checked or await self.check(spec, args, step=step)
            # Invalid arguments are refused by the tool activity, as for any call.
            asks = checked is not None and checked.invalid is None and checked.needs_approval
        if asks:
            waiting = PendingApproval(
                run_id=self._inp.run_id, branch_id=self._inp.branch_id, step=step, tool_call_id=call_id,
                tool_name=spec.name, arguments=args, idempotency_key=log.idempotency_key,
                requested_at=workflow.now(), on_timeout=spec.approval_default,
                repeat_of=reference(repeat) if repeat is not None else None,
            )
            metrics.count(workflow.metric_meter(), metrics.APPROVALS_REQUESTED, tool=spec.name)
            record, args = await self.gate.wait(waiting, spec.approval_timeout_s)
            metrics.count(workflow.metric_meter(), metrics.APPROVALS_DECIDED, tool=spec.name, verdict=record.verdict,
                          timed_out=record.timed_out)
            log.approval = record
            if record.verdict == "rejected":
                return self._finish(log, output=rejection_text(record, spec.name))
            log.arguments = args
        return self._apply(log, await self._execute(step, call_id, spec, args, log.idempotency_key), executed=True)

    async def check(self, spec: ToolSpec, args: dict[str, Any], candidates: list[dict[str, Any]] | None = None,
                    *, step: int) -> ToolCheck | None:
        """What a worker holding the tool says of these arguments (None: no worker could say)."""
        request = ToolCheckRequest(tool_name=spec.name, arguments=args, candidates=candidates or [])
        summary = tool_call_summary(step, spec.name, args, what="check")
        try:
            return await self._dispatch(CHECK_TOOL_CALL, request, ToolCheck, spec, summary=summary)
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            return None

    async def _execute(self, step: int, call_id: str, spec: ToolSpec, args: dict[str, Any], idem_key: str | None,
                       *, dry_run: bool = False) -> ToolOutcome | str:
        """The tool activity's outcome, or the text of its final failure.

        A call goes to the run's own task queue first: there it can be handed
        to the workflow's worker at once (eager dispatch), which is the common
        case of workers that all hold the same tools. A worker that lacks the
        tool refuses it before running anything (ToolNotRegistered); the call
        is then scheduled again on the tool's own queue, which only workers
        holding the tool poll. Runs from before tool queues stop at the refusal.
        """
        here = spec.fast or (self._inp.fast and not spec.side_effects)
        # A local activity's input is not in history, which `rewind mirror` rebuilds from: it carries nothing.
        carry = [] if here else self._carry.pop(call_id, [])
        request = ToolRequest(
            run_id=self._inp.run_id, branch_id=self._inp.branch_id, step=step, tool_call_id=call_id,
            tool_name=spec.name, arguments=args, idempotency_key=idem_key, dry_run=dry_run,
            inline_output=self._inline_outputs, checkpoints=[r.model_dump(mode="json") for r in carry],
        )
        try:
            outcome = await self._dispatch(RUN_TOOL, request, ToolOutcome, spec, here=here,
                                           summary=tool_call_summary(step, spec.name, args),
                                           activity_id=self._activity_ids.get(call_id))
            if carry and outcome.checkpoints is not None:
                self._carried[call_id] = outcome.checkpoints.written
            return outcome
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err  # the run is being stopped
            return failed_after_retries(spec.name, failure_text(err))

    async def _dispatch(self, activity: str, request: Any, result_type: type, spec: ToolSpec, *, summary: str,
                        here: bool = False, activity_id: str | None = None) -> Any:
        """On the run's own queue (or as a local activity, `here`), then on the tool's queue
        if the worker that took it lacks the tool (see `_execute`)."""
        try:
            if here:
                return await self._run_here(request, spec, summary, activity_id)
            return await self._schedule(activity, request, result_type, spec, None, summary, activity_id)
        except ActivityError as err:
            if not (self._routed and isinstance(err.cause, ApplicationError) and err.cause.type == TOOL_NOT_REGISTERED):
                raise
        return await self._schedule(activity, request, result_type, spec, tool_task_queue(workflow.info().task_queue, spec.name),
                                    summary, None if activity_id is None else f"{activity_id}:queue")

    async def _run_here(self, request: ToolRequest, spec: ToolSpec, summary: str,
                        activity_id: str | None = None) -> ToolOutcome:
        """A fast call: a local activity on the workflow's own worker (if that worker
        lacks the tool it refuses, and the call goes to the tool's queue as usual)."""
        return await workflow.execute_local_activity(
            RUN_TOOL, request, result_type=ToolOutcome, summary=summary, activity_id=activity_id,
            start_to_close_timeout=timedelta(seconds=spec.timeout_s),
            retry_policy=RetryPolicy(maximum_attempts=spec.max_attempts, non_retryable_error_types=[TOOL_NOT_REGISTERED]),
        )

    async def _schedule(self, activity: str, request: Any, result_type: type, spec: ToolSpec, task_queue: str | None,
                        summary: str, activity_id: str | None = None) -> Any:
        return await workflow.execute_activity(
            activity, request, result_type=result_type, task_queue=task_queue, summary=summary, activity_id=activity_id,
            start_to_close_timeout=timedelta(seconds=spec.timeout_s),
            heartbeat_timeout=timedelta(seconds=spec.heartbeat_s),
            retry_policy=RetryPolicy(maximum_attempts=spec.max_attempts, non_retryable_error_types=[TOOL_NOT_REGISTERED]),
        )

    def _apply(self, log: ToolCallLog, result: ToolOutcome | str, *, executed: bool) -> dict[str, Any]:
        if isinstance(result, str):
            return self._finish(log, error=result)
        if executed:
            self.ledger.tool_calls += 1
            self.ledger.tool_time_ms += result.duration_ms
            log.called_at = result.started_at
            log.duration_ms = result.duration_ms
            log.attempts = result.attempt
            self.ledger.tool_retries += result.attempt - 1
        if result.error is not None:
            return self._finish(log, error=result.error)
        if log.cache_key is not None and log.cache_key not in self._cache:
            self._cache[log.cache_key] = result.output if result.output_ref is None else {_CACHED_REF: result.output_ref}
        return self._finish(log, output=result.output, output_ref=result.output_ref)

    def _finish(
        self, log: ToolCallLog, *, output: Any = None, output_ref: str | None = None, error: str | None = None,
    ) -> dict[str, Any]:
        log.output, log.output_ref, log.error = output, output_ref, error
        outcome = ("subagent" if log.subagent is not None and error is None
                   else "reused" if log.reused is not None
                   else "dry_run" if log.dry_run
                   else "rejected" if log.approval is not None and log.approval.verdict == "rejected"
                   else "cached" if log.served_from_cache else "error" if error is not None else "ok")
        # A name the model made up is not a label (it would be a new series each time).
        tool = log.tool_name if log.tool_name in self._specs else "unknown"
        metrics.count(workflow.metric_meter(), metrics.TOOL_CALLS, tool=tool, outcome=outcome)
        if error is not None:
            self.last_error = f"step {log.step}: {error}"
        self._on_answered(log, len(self._log))
        self._log.append(log)
        return tool_message(log)
