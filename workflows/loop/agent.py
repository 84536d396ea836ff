"""AgentWorkflow: the agent loop as a Temporal workflow.

One step = one model call, then the tool calls it asked for, run in parallel
as activities. Everything non-deterministic (the model, tools, clocks of the
outside world) happens in activities; this module only decides what to call
next from what history says, so a replay after a worker crash reaches the
same state without repeating a completed call.

The loop's durable state is a `LoopState`: the conversation by reference
(transcript head), totals, the read-only tool cache. Continue-as-new carries
it into the next run of the same workflow, and a fork or rollback starts a
new workflow seeded with it, so a logical run may span many workflow runs.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows.loop.approvals import INTERRUPT, ApprovalGate, refused
    from workflows.vocabulary.contracts import (
        AgentInput,
        AgentResult,
        ApprovalDecision,
        ApprovalRecord,
        AgentStatus,
        DescribeToolsResponse,
        Ledger,
        LlmRequest,
        LlmResponse,
        LoopState,
        MirrorBatch,
        PendingApproval,
        RedoPlan,
        RunLimits,
        StepRecord,
        STOPPED_MIRROR_DRAIN_S,
        SubagentNotice,
        ToolCallLog,
    )
    from workflows.vocabulary.canonical import canonical_json
    from workflows.loop.describe import describe_here, describe_routed
    from workflows.vocabulary.ids import checkpoint_id, parse_checkpoint_id
    from workflows.vocabulary.text import usd
    from workflows.vocabulary.tool_calls import failure_text, step_label
    from workflows.loop.run_index import RunIndex
    from workflows.vocabulary.summaries import mirror_summary, model_call_summary
    from workflows.loop.tool_step import ToolStep
    from workflows.loop.tracing import RunTrace
    from workflows.loop.events import RunEvents
    from workflows.vocabulary.events import model_completed_data, model_usage, starts_branch, tool_completed_data
    from workflows.vocabulary import metrics

    # The workflow refers to activities by name only, so it does not import
    # the activity implementations (and their I/O libraries).
    from workflows.vocabulary.wire import (
        AGENT_RUN_FAILED,
        AGENT_WORKFLOW,
        CALL_LLM,
        CARRIED_CHECKPOINTS_PATCH,
        CHECKPOINT_CONFLICT,
        DECIDE_UPDATE,
        LLM_REJECTED,
        MIRROR_BATCH_PATCH,
        MIRROR_STEP,
        MIRROR_STEPS,
        RAISE_LIMITS_SIGNAL,
        SEEDED_TOOLS_PATCH,
        STATUS_QUERY,
        STOPPED_DRAIN_PATCH,
        SUBAGENT_STATE_SIGNAL,
        TOOL_QUEUES_PATCH,
    )



def _agent_info(inp: AgentInput) -> dict[str, Any] | None:
    """What a checkpoint says of the agent its branch runs (None: a plain run)."""
    if inp.agent is None:
        return None
    info: dict[str, Any] = {"name": inp.agent}
    caller = inp.called_by
    if caller is not None:
        info.update(called_by=checkpoint_id(inp.run_id, caller.branch_id, caller.step),
                    tool_call_id=caller.tool_call_id, depth=inp.depth)
    return info


class _Opening:
    """What a branch's `run.started` is derived from (vocabulary/events.py run_started_data),
    known before its first step is recorded."""

    def __init__(self, parent_id: str | None, branch_id: str, agent: dict[str, Any] | None) -> None:
        self.parent_id, self.branch_id, self.agent = parent_id, branch_id, agent


# Records per mirror activity at most: a backlog (the store was down, a fast
# run recorded many steps at once) is written in bounded pieces.
MIRROR_BATCH_MAX = 50
# A mirror write's heartbeat timeout. Its beats come from the worker's event
# loop, which a large block merge can hold for a second or so: 10 s is well
# clear of that, and a dead worker's write is retried elsewhere soon after.
MIRROR_HEARTBEAT_S = 10.0


@workflow.defn(name=AGENT_WORKFLOW)
class AgentWorkflow:
    def __init__(self) -> None:
        self._input: AgentInput | None = None
        self._state = LoopState()
        self._status: AgentStatus | None = None
        self._tools: ToolStep | None = None
        self._step_messages: list[dict[str, Any]] = []
        self._step_calls: list[ToolCallLog] = []
        self._model_ledger = Ledger()  # this step's model calls; its tool calls are counted by ToolStep
        self._last_step_ledger = Ledger()  # the next step is assumed to cost about as much
        self._pending: dict[int, StepRecord] = {}
        self._mirror_queue: list[StepRecord] = []
        self._mirroring = False
        self._batched: bool | None = None  # MIRROR_BATCH_PATCH, decided at the first record
        self._carries: bool | None = None  # CARRIED_CHECKPOINTS_PATCH, decided at the first record
        self._held: list[StepRecord] = []  # records waiting for the next model call to carry them
        self._stored_tools: tuple[str, str] | None = None  # (canonical JSON of the tools, their digest)
        self._tools_json: tuple[list[dict[str, Any]], str] | None = None  # (the tools sent, their canonical JSON)
        self._new_limits: RunLimits | None = None
        self._events = RunEvents()  # the run's event stream (docs/streaming.md); nothing while replaying
        self._opening_step: int | None = None  # the step whose events start with the branch's run.started
        self._gate = ApprovalGate(on_change=self._show_state, on_event=self._approval_event)
        self._index = RunIndex(False)
        self._trace = RunTrace()  # spans of the run and its steps; nothing while tracing is off
        self._told_caller = "running"  # a sub-agent's state as its caller last heard it

    # -- queries, signals and updates ------------------------------------------
    @workflow.query(name=STATUS_QUERY)
    def status(self) -> AgentStatus:
        if self._status is None:
            raise ApplicationError("the run has not started its first workflow task yet")
        state, reason = self._shown_state()
        if state == self._status.state and not self._gate.pending:
            return self._status
        return self._status.model_copy(update={
            "state": state, "budget_reason": reason or self._status.budget_reason,
            "pending_approvals": list(self._gate.pending.values()),
        })

    def _shown_state(self) -> tuple[str, str | None]:
        """The state to show: the run's own, or that it waits for a person (one of its calls,
        or one of its sub-agents') or for a sub-agent's raised budget."""
        status = self._status
        assert status is not None
        if status.state != "running":
            return status.state, None
        if self._gate.pending:
            return "waiting_for_approval", None
        child = self._tools.agents.waiting() if self._tools is not None else None
        if child is None:
            return "running", None
        why = f"sub-agent {child.agent} ({child.branch_id}) paused: {child.reason}" if child.reason else None
        return child.state, why

    @workflow.update(name=DECIDE_UPDATE)
    async def decide(self, decision: ApprovalDecision) -> ApprovalRecord:
        """Approve or reject a waiting tool call (rewind approve / rewind reject)."""
        waiting = self._gate.check(decision)
        if (decision.verdict == "approve" and decision.arguments is not None and decision.arguments != waiting.arguments
                and waiting.tool_name != INTERRUPT):
            # Checked by a worker that holds the tool, with the validator the call itself meets.
            tools = self._tools  # set before any call can wait
            spec = tools.spec(waiting.tool_name) if tools is not None else None
            checked = await tools.check(spec, decision.arguments, step=waiting.step) if tools is not None and spec is not None else None
            if checked is None:
                raise refused(f"no worker holding {waiting.tool_name} could check the edited arguments; "
                              "the call still waits, try again when one runs")
            if checked.invalid is not None:
                raise refused(f"the edited arguments fail the schema of {waiting.tool_name}: {checked.invalid}; "
                              "the call still waits with its original arguments")
            if checked.arguments is not None:
                # Run and record them as the validator reads them ("450" -> 450): the effect's
                # identity, compared by later branches, is then the one that ran.
                decision = decision.model_copy(update={"arguments": checked.arguments})
        return self._gate.decide(decision)

    @decide.validator
    def _decision_can_be_taken(self, decision: ApprovalDecision) -> None:
        # Refused before anything reaches history: the run is unchanged.
        self._gate.check(decision)

    @workflow.signal(name=RAISE_LIMITS_SIGNAL)
    async def raise_limits(self, limits: RunLimits) -> None:
        """Continue a run paused by its budget, with new limits; a running run
        takes them at once (an experiment moves budget between its branches), and
        hands the raise on to its sub-agents paused for their share of it."""
        self._new_limits = limits
        if self._status is not None and self._status.state == "running":
            old, self._status.limits = self._status.limits, limits
            if self._tools is not None:
                await self._tools.agents.raise_limits(old, limits)

    @workflow.signal(name=SUBAGENT_STATE_SIGNAL)
    def subagent_state(self, notice: SubagentNotice) -> None:
        """A sub-agent of the step in flight waits (for a person, for budget) or goes on again."""
        if self._tools is not None:
            self._tools.agents.notice(notice)

    # -- the loop -------------------------------------------------------------
    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        try:
            return await self._run(inp)
        except asyncio.CancelledError:
            # Stopped from outside (a rollback of this branch): say so, write
            # the checkpoints already recorded (a rollback that came while a run
            # waited for its last one left that step only in history: found by
            # the seeded soak), and end as cancelled. The mirror runs in tasks
            # of its own, which the cancellation does not reach.
            status = self._status
            if status is not None:
                status.state = "cancelled"
                self._show_state()
                self._events.cancelled(self._state.step)
                if self._pending and workflow.patched(STOPPED_DRAIN_PATCH):
                    await self._drain_mirror(STOPPED_MIRROR_DRAIN_S)
                    self._note_unmirrored("stopped")
            self._trace.run_ended(self._status, state="cancelled")
            raise

    def _begin(self, inp: AgentInput) -> AgentStatus:
        """The run's state and status from its input (a pipeline run starts the same way)."""
        self._input = inp
        self._index = RunIndex(inp.indexed)
        self._state = inp.resume.model_copy(deep=True) if inp.resume else LoopState()
        status = self._status = AgentStatus(
            run_id=inp.run_id, branch_id=inp.branch_id, state="running", model=inp.model,
            limits=inp.limits, continued_as_new=self._state.continued_as_new,
        )
        self._trace.run_started(inp.run_id, inp.branch_id, inp.model)
        self._events.started(inp.run_id, inp.branch_id)
        opening = _Opening(self._state.parent_checkpoint, inp.branch_id, _agent_info(inp))
        if starts_branch(opening):  # a new run, a fork, a resume (not a continued run): said at once
            first = self._state.redo.step if self._state.redo is not None else self._state.step + 1
            self._opening_step = 0 if inp.resume is None else first
            self._events.branch_started(self._opening_step, opening)
        self._sync_status()
        return status

    def _branch_start_events(self, step: int) -> int:
        """How many durable events come before a step's own in `step_events`: its branch's
        `run.started` when the step is the branch's first."""
        return 1 if self._opening_step == step else 0

    async def _run(self, inp: AgentInput) -> AgentResult:
        status = self._begin(inp)
        routed = workflow.patched(TOOL_QUEUES_PATCH)
        describing = describe_routed(inp.tools, inp.tool_wait_s) if routed else describe_here(inp.tools)
        seeded, self._state.tool_specs = self._state.tool_specs, None  # used once: a continued run describes
        pending: asyncio.Future[DescribeToolsResponse] | None = None
        if (seeded is not None and routed and self._state.redo is None and self._budget_exceeded() is None
                and workflow.patched(SEEDED_TOOLS_PATCH)):
            # A fork or rollback that keeps its source's tools: its first model call goes out
            # with the specs the source was described while the tools are described again,
            # instead of after that round trip. The answer is taken before any tool call (and
            # before anything else the first step does), so a tool no worker has still fails
            # the run, naming it; the model saw the source's schemas on this one call.
            pending = asyncio.ensure_future(describing)
            openai_tools = [t.openai_schema() for t in seeded]
        else:
            openai_tools = await self._use_tools(await describing, routed)

        if inp.resume is None:
            self._add_messages(
                {"role": "system", "content": inp.system_prompt},
                {"role": "user", "content": inp.task},
            )
            self._record_step("start")
        for record in self._state.pending_records:  # left unmirrored by the previous run
            self._mirror_later(record)
        self._state.pending_records = []
        if self._state.redo is not None:
            await self._redo(self._state.redo)

        while True:
            reason = self._budget_exceeded()
            if reason is not None:
                if inp.called_by is not None and reason.startswith("max_steps"):
                    # A sub-agent's own steps are its declaration's: used up, it ends and its caller decides.
                    status.state, status.budget_reason = "budget_exceeded", reason
                    self._show_state()
                    return await self._finish_run()
                if not await self._pause_for_budget(reason):
                    return await self._finish_run()
                continue
            self._state.step += 1
            self._trace.step_started(self._state.step)
            response = await self._call_model(inp, openai_tools)
            self._model_answered(response)
            if pending is not None:
                openai_tools = await self._use_tools(await pending, routed)
                pending = None
            message = response.message
            self._add_messages(message)
            calls = message.get("tool_calls") or []
            if calls:
                self._tools.begin_step(calls)
                replies = await asyncio.gather(*(self._tools.answer(self._state.step, c) for c in calls))
                self._add_messages(*replies)
                self._step_calls.extend(self._tools.take_log())
            self._record_step(step_label(message), model_view=response.model_view)
            if not calls:
                status.final_answer = message.get("content") or ""
                status.state = "completed"
                self._show_state()
                return await self._finish_run()
            if self._should_continue_as_new(inp):
                await self._continue_as_new(inp)

    def _model_answered(self, response: LlmResponse) -> None:
        """The loop's model call of the step answered: its `model.completed`, at once (tools may
        take long), as `step_events` will derive it from the step's record."""
        inp, step = self._input, self._state.step
        assert inp is not None
        usage = response.usage
        self._events.durable(step, self._branch_start_events(step), "model.completed", model_completed_data(
            f"{step}/model", response.message, inp.model,
            model_usage(usage.prompt_tokens, usage.completion_tokens, response.cost_usd), attempts=response.attempt))

    def _tool_answered(self, log: ToolCallLog, index: int) -> None:
        """The loop's tool call that completed `index`th in its step: its `tool.completed`, as it
        completes (the step is recorded once all have)."""
        if self._input is None or self._input.pipeline is not None or self._state.redo is not None:
            return  # a pipeline's call is a step of its own, recorded (and told) as it completes
        step = log.step
        n = self._branch_start_events(step) + 1 + index
        self._events.durable(step, n, "tool.completed", tool_completed_data(f"{step}/{log.tool_call_id}", log))

    def _approval_event(self, request: PendingApproval, record: ApprovalRecord | None) -> None:
        call = f"{request.step}/{request.tool_call_id}"
        if record is None:
            self._events.approval_waiting(call, request.step, request)
        else:
            self._events.approval_resolved(call, request.step, request.tool_call_id, record)

    async def _use_tools(self, described: DescribeToolsResponse, routed: bool) -> list[dict[str, Any]]:
        """Run with the tools as the workers described them (fails the run if one is missing);
        their schemas, as the model calls send them."""
        inp = self._input
        assert inp is not None
        if described.missing:
            how = (f"no worker on task queue {workflow.info().task_queue!r} offered them within {inp.tool_wait_s:g}s"
                   if routed else "not registered on the worker")
            await self._fail(
                f"tools {', '.join(described.missing)}: {how}; start a worker with --tool-modules "
                "(or REWIND_TOOL_MODULES) naming the modules that define them"
            )
        self._tools = ToolStep(inp, described.tools, self._state.tool_cache, routed=routed, gate=self._gate,
                               trace=self._trace, budget_left=self._budget_left, on_change=self._subagents_changed,
                               inline_outputs=inp.pipeline is not None, on_answered=self._tool_answered)
        return [t.openai_schema() for t in described.tools]

    # -- redo -----------------------------------------------------------------
    async def _redo(self, plan: RedoPlan) -> None:
        """`rewind redo`: answer a recorded step's tool calls again, each from its recorded
        answer except one, which runs again; then the loop goes on from there."""
        assert self._tools is not None
        state = self._state
        state.step = plan.step
        self._trace.step_started(plan.step)
        message = plan.message
        self._add_messages(message)
        calls = message.get("tool_calls") or []
        override = {k: v for k, v in {"system_prompt": plan.system_prompt, "model": plan.model}.items() if v}
        self._tools.begin_step([c for c in calls if c.get("id") == plan.call_id])

        async def answer(call: dict[str, Any]) -> dict[str, Any]:
            recorded = plan.answers.get(str(call.get("id")))
            if call.get("id") == plan.call_id or recorded is None:
                return await self._tools.answer(plan.step, call, override=override, redo_of=plan.source_checkpoint)  # type: ignore[union-attr]
            return self._tools.answered(plan.step, recorded, plan.source_checkpoint)  # type: ignore[union-attr]

        replies = await asyncio.gather(*(answer(c) for c in calls))
        self._add_messages(*replies)
        self._step_calls.extend(self._tools.take_log())
        state.redo = None
        self._record_step(f"{step_label(message)} ({plan.label or f'redo of {plan.call_id}'})")

    # -- sub-agents -------------------------------------------------------------
    def _budget_left(self) -> tuple[float | None, int | None]:
        """What the run may still spend (USD, tokens; None: no limit): its sub-agents' to share."""
        limits, spent = self._status.limits, self._state.totals.plus(self._step_ledger())  # type: ignore[union-attr]
        return (None if limits.max_cost_usd is None else limits.max_cost_usd - spent.cost_usd,
                None if limits.max_tokens is None else limits.max_tokens - spent.total_tokens)

    def _subagents_changed(self) -> None:
        if self._status is not None and self._tools is not None:
            self._status.subagents = list(self._tools.agents.states)
            self._sync_status()
            self._show_state()

    async def _tell_caller(self, state: str, reason: str | None) -> None:
        """A sub-agent's caller hears when it waits and when it goes on (its status shows which call waits)."""
        caller = self._input.called_by if self._input is not None else None
        if caller is None:
            return
        try:
            await workflow.get_external_workflow_handle(caller.workflow_id).signal(
                SUBAGENT_STATE_SIGNAL, SubagentNotice(tool_call_id=caller.tool_call_id, state=state, reason=reason))
        except Exception:  # noqa: BLE001 - the caller has ended (cancelled): nobody to tell
            pass

    # -- tools ----------------------------------------------------------------
    # -- budgets --------------------------------------------------------------
    def _budget_exceeded(self) -> str | None:
        """Why the next step would exceed a budget, or None."""
        limits, state, last = self._status.limits, self._state, self._last_step_ledger  # type: ignore[union-attr]
        if state.step >= limits.max_steps:
            return f"max_steps: {state.step} of {limits.max_steps} steps used"
        if limits.max_cost_usd is not None and state.totals.cost_usd + last.cost_usd > limits.max_cost_usd:
            return (f"max_cost: {usd(state.totals.cost_usd)} spent and the next step (about "
                    f"{usd(last.cost_usd)}) would pass {usd(limits.max_cost_usd)}")
        if limits.max_tokens is not None and state.totals.total_tokens + last.total_tokens > limits.max_tokens:
            return (f"max_tokens: {state.totals.total_tokens} used and the next step (about "
                    f"{last.total_tokens}) would pass {limits.max_tokens}")
        return None

    async def _pause_for_budget(self, reason: str) -> bool:
        """Wait for `raise_limits`; True to go on, False if the pause ran out."""
        status = self._status
        assert status is not None
        status.state, status.budget_reason = "budget_exceeded", reason
        self._show_state()
        self._events.paused(self._state.step, reason)
        self._flush_held()  # no model call before someone raises the limits
        self._new_limits = None
        try:
            await workflow.wait_condition(
                lambda: self._new_limits is not None, timeout=timedelta(seconds=status.limits.budget_pause_s)
            )
        except asyncio.TimeoutError:
            return False
        assert self._new_limits is not None
        status.limits, status.state, status.budget_reason = self._new_limits, "running", None
        self._show_state()
        return True

    # -- model call -------------------------------------------------------------
    async def _call_model(self, inp: AgentInput, openai_tools: list[dict[str, Any]]) -> LlmResponse:
        state, tuning = self._state, inp.llm
        # Tool schemas go to the first call whole; once a call has stored them, the
        # next ones name them by digest while they stay the same.
        tools_text = self._tools_text(openai_tools)
        stored = self._stored_tools if self._stored_tools is not None and self._stored_tools[0] == tools_text else None
        request = LlmRequest(
            run_id=inp.run_id, step=state.step, model=inp.model,
            transcript_head=state.transcript_head, transcript_len=state.transcript_len,
            new_messages=state.unsent, tools=openai_tools if stored is None else [],
            tools_ref=None if stored is None else stored[1],
            context_tokens=tuning.context_tokens, keep_last=tuning.keep_last,
            temperature=tuning.temperature, seed=tuning.seed,
            tool_result_chars=tuning.tool_result_chars, checkpoints=self._take_held(),
        )
        try:
            try:
                response = await self._model_activity(request, model_call_summary(state.step, inp.model))
            except (ActivityError, asyncio.CancelledError):
                # Whether the call wrote them is unknown: the mirror writes them (a no-op where it
                # did). Not on other BaseExceptions: an evicted workflow's unwinding starts nothing.
                self._carried_back(request.checkpoints, 0)
                raise
        except ActivityError as err:
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            await self._fail(f"model call of step {state.step} failed: {failure_text(err)}")
            raise  # unreachable: _fail raises
        state.transcript_head, state.transcript_len, state.unsent = (
            response.transcript_head, response.transcript_len, [],
        )
        if response.tools_ref is not None:
            self._stored_tools = (tools_text, response.tools_ref)
        if request.checkpoints:
            carried = response.checkpoints
            self._carried_back(request.checkpoints, carried.written if carried is not None else 0)
        self._count_model(response)
        return response

    def _tools_text(self, openai_tools: list[dict[str, Any]]) -> str:
        """The canonical JSON of the tools a call sends, encoded again only when the list is a
        new one (the loop passes the same list every step; encoding it was a step's work that
        grew with the number of tools)."""
        known = self._tools_json
        if known is None or known[0] is not openai_tools:
            known = self._tools_json = (openai_tools, canonical_json(openai_tools))
        return known[1]

    async def _model_activity(self, request: LlmRequest, summary: str, activity_id: str | None = None) -> LlmResponse:
        """The call_llm activity with the run's retry policy and timeouts (raises ActivityError
        once retrying is over). `activity_id`: a pipeline call's (workflows/pipeline/ids.py)."""
        inp = self._input
        assert inp is not None
        tuning = inp.llm
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=tuning.initial_retry_s),
            maximum_interval=timedelta(seconds=tuning.max_retry_s),
            backoff_coefficient=2.0,
            maximum_attempts=tuning.max_attempts,
            non_retryable_error_types=[LLM_REJECTED],
        )
        if inp.fast:
            # On this worker, no round trip through the server; recorded with
            # the workflow task (AgentInput.fast says what that gives up).
            return await workflow.execute_local_activity(
                CALL_LLM, request, result_type=LlmResponse, summary=summary, activity_id=activity_id,
                start_to_close_timeout=timedelta(seconds=tuning.timeout_s), retry_policy=retry,
                schedule_to_close_timeout=timedelta(seconds=max(tuning.retry_for_s, tuning.timeout_s)),
            )
        return await workflow.execute_activity(
            CALL_LLM, request, result_type=LlmResponse, summary=summary, activity_id=activity_id,
            start_to_close_timeout=timedelta(seconds=tuning.timeout_s),
            # The whole call, retries included: a provider outage up to this long costs nothing.
            schedule_to_close_timeout=timedelta(seconds=max(tuning.retry_for_s, tuning.timeout_s)),
            heartbeat_timeout=timedelta(seconds=tuning.heartbeat_s),
            retry_policy=retry,
        )

    def _count_model(self, response: LlmResponse) -> None:
        """A model call's tokens, cost and retries into this step's ledger."""
        usage = response.usage
        self._count_call(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, response.cost_usd,
                         response.priced, response.attempt - 1)

    def _count_call(self, prompt: int, completion: int, total: int, cost_usd: float, priced: bool,
                    retries: int = 0) -> None:
        """One model call into this step's ledger (call_llm's, or one a graph's node-level node made)."""
        ledger = self._model_ledger
        ledger.prompt_tokens += prompt
        ledger.completion_tokens += completion
        ledger.total_tokens += total
        ledger.cost_usd += cost_usd
        ledger.model_calls += 1
        ledger.model_retries += retries
        ledger.unpriced_calls += 0 if priced else 1
        self._sync_status()

    def _add_messages(self, *messages: dict[str, Any]) -> None:
        self._state.unsent.extend(messages)
        self._step_messages.extend(messages)

    def _step_ledger(self) -> Ledger:
        """The current step so far: its model calls and its tool calls."""
        return self._model_ledger.plus(self._tools.ledger) if self._tools is not None else self._model_ledger.model_copy()

    def _show_state(self) -> None:
        """RewindState in Temporal's visibility follows the state `status` reports; a
        sub-agent's caller hears when it starts or stops waiting."""
        if self._status is None:
            return
        state, reason = self._shown_state()
        self._index.show(state)
        waits = state in ("waiting_for_approval", "budget_exceeded")
        if self._input is not None and self._input.called_by is not None and waits != (self._told_caller != "running"):
            self._told_caller = state if waits else "running"
            told = reason or self._status.budget_reason if state == "budget_exceeded" else reason
            asyncio.ensure_future(self._tell_caller(self._told_caller, told))

    def _sync_status(self) -> None:
        status, state = self._status, self._state
        assert status is not None
        step = self._step_ledger()
        totals = state.totals.plus(step)
        status.step = state.step
        status.ledger, status.step_ledger = totals, step
        status.branch_ledger = totals.minus(state.inherited)
        status.mirror_pending = len(self._pending)
        if self._tools is not None and self._tools.last_error:
            state.last_error = self._tools.last_error
        status.last_error = state.last_error

    # -- checkpoints ----------------------------------------------------------
    def _record_step(self, label: str, *, failed: dict[str, Any] | None = None, model_view: dict[str, Any] | None = None,
                     variables: dict[str, Any] | None = None, pipeline: dict[str, Any] | None = None,
                     model: str | None = None) -> StepRecord:
        """Hand what this step added to the mirror, off the loop's critical path. A pipeline
        gives its state as `variables`, which call of its code the step is and its model."""
        inp, state = self._input, self._state
        assert inp is not None
        step_ledger = self._step_ledger()
        state.totals = state.totals.plus(step_ledger)
        totals = state.totals
        record = StepRecord(
            run_id=inp.run_id, branch_id=inp.branch_id, step_index=state.step,
            parent_id=state.parent_checkpoint, step_label=label,
            new_messages=self._step_messages, new_tool_calls=self._step_calls,
            agent_variables=inp.variables if variables is None else variables, created_at=workflow.now(),
            model=model or inp.model,
            prompt_tokens=totals.prompt_tokens, completion_tokens=totals.completion_tokens,
            llm_tokens_used=totals.total_tokens, llm_cost_usd=totals.cost_usd,
            status="failed" if failed else "completed", error_info=failed,
            step_ledger=step_ledger, branch_ledger=totals.minus(state.inherited), total_ledger=totals,
            system_prompt=state.announce_system_prompt,
            model_view=model_view, agent=_agent_info(inp), pipeline=pipeline,
        )
        state.announce_system_prompt = None
        if step_ledger.model_calls and self._status is not None:
            # The newest model call's model: a pipeline's calls and a graph's chat models name their own.
            self._status.model = record.model
        if step_ledger.model_calls:
            meter = workflow.metric_meter()  # records nothing while replaying
            metrics.count(meter, metrics.STEPS, model=record.model)
            metrics.count(meter, metrics.TOKENS, step_ledger.prompt_tokens, model=record.model, kind="prompt")
            metrics.count(meter, metrics.TOKENS, step_ledger.completion_tokens, model=record.model, kind="completion")
            metrics.count(meter, metrics.COST, round(step_ledger.cost_usd * 1e6), model=record.model)
        self._last_step_ledger = record.step_ledger
        self._trace.step_ended(record)
        self._events.recorded(record)
        state.parent_checkpoint = checkpoint_id(inp.run_id, inp.branch_id, state.step)
        self._step_messages, self._step_calls = [], []
        self._mirror_later(record)
        self._model_ledger = Ledger()
        if self._tools is not None:
            self._tools.ledger = Ledger()
        self._sync_status()
        status = self._status
        assert status is not None
        status.step_ledger = record.step_ledger
        return record

    def _mirror_later(self, record: StepRecord) -> None:
        self._pending[record.step_index] = record
        if self._batched is None:
            self._batched = workflow.patched(MIRROR_BATCH_PATCH)
        if not self._batched:
            asyncio.ensure_future(self._mirror([record], MIRROR_STEP, record))
            return
        if self._carries is None:
            self._carries = self._can_carry() and workflow.patched(CARRIED_CHECKPOINTS_PATCH)
        if self._carries and not self._mirroring:
            # The next model call writes it: no activity of its own (two actions a step, not three).
            self._held.append(record)
            return
        # One mirror at a time, with every record that came since the last one:
        # in order, never racing (a step's parent is always written first).
        self._mirror_records([record])

    def _can_carry(self) -> bool:
        """Whether step records ride on this run's model calls. Not on a fast run's (local
        activities: their inputs are not in history, which `rewind mirror` rebuilds from),
        nor a pipeline's, whose code may wait for anything (a timer, a child run) between calls."""
        inp = self._input
        return inp is not None and not inp.fast and inp.pipeline is None

    def _take_held(self) -> list[StepRecord]:
        """The records the model call about to start carries (none while the mirror activity
        writes: it keeps the order, and takes the next records too)."""
        held, self._held = self._held, []
        return held

    def _carried_back(self, records: list[StepRecord], written: int) -> None:
        """A model call that carried `records` wrote the first `written`; the mirror activity
        writes the rest, before anything recorded since."""
        for record in records[:written]:
            self._pending.pop(record.step_index, None)
        rest = records[written:]
        if rest:
            # Why the call could not store them is in its result, in history; the mirror
            # activity's retries, if the store stays down, show in `rewind status`.
            self._held[:0] = rest
            self._flush_held()
        if self._status is not None:
            self._status.mirror_pending = len(self._pending)

    def _flush_held(self) -> None:
        """Held records go to the mirror activity: no model call will carry them soon (the run
        ends, pauses or continues as new), or a carried write could not store them."""
        if self._held:
            held, self._held = self._held, []
            self._mirror_records(held)

    def _mirror_records(self, records: list[StepRecord]) -> None:
        self._mirror_queue.extend(records)
        if not self._mirroring:
            self._mirroring = True
            asyncio.ensure_future(self._mirror_loop())

    async def _mirror_loop(self) -> None:
        try:
            while self._mirror_queue:
                batch = self._mirror_queue[:MIRROR_BATCH_MAX]
                del self._mirror_queue[:MIRROR_BATCH_MAX]
                await self._mirror(batch, MIRROR_STEPS, MirrorBatch(records=batch))
        finally:
            self._mirroring = False

    async def _mirror(self, records: list[StepRecord], activity: str, arg: Any) -> None:
        status = self._status
        assert status is not None
        try:
            await workflow.execute_activity(
                activity,
                arg,
                summary=mirror_summary([r.step_index for r in records]),
                start_to_close_timeout=timedelta(seconds=60),
                # The activity beats while it writes: a worker killed in a write is
                # noticed after this, not after the 60 s above (which, longer than a
                # run's wait for its last checkpoints, could end the run unmirrored).
                heartbeat_timeout=timedelta(seconds=MIRROR_HEARTBEAT_S),
                # A store that is down is retried for as long as it takes; the
                # agent loop does not wait for it. `rewind status` shows the lag
                # and the last store error from the pending activity.
                # Every later step's checkpoint waits on this one (deltas are
                # written in order), so keep the backoff short.
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=250),
                    maximum_interval=timedelta(seconds=3),
                    non_retryable_error_types=[CHECKPOINT_CONFLICT],
                ),
            )
        except ActivityError as err:
            # Permanent (a conflicting or unstorable checkpoint): say why, and do
            # not make the run's end wait for a write that cannot happen.
            steps = ", ".join(str(r.step_index) for r in records)
            status.mirror_error = f"checkpoint of step {steps}: {failure_text(err)}"
        for record in records:
            self._pending.pop(record.step_index, None)
        status.mirror_pending = len(self._pending)

    async def _drain_mirror(self, timeout_s: float) -> None:
        self._flush_held()
        try:
            await workflow.wait_condition(lambda: not self._pending, timeout=timedelta(seconds=timeout_s))
        except asyncio.TimeoutError:
            pass

    def _note_unmirrored(self, how: str) -> None:
        """Say in the status how many checkpoints the run ends without, and the fix (`how`: ended, stopped)."""
        status, inp = self._status, self._input
        assert status is not None and inp is not None
        if self._pending and status.mirror_error is None:
            status.mirror_error = (
                f"{len(self._pending)} checkpoint(s) not mirrored when the run {how}; "
                f"run `rewind mirror {inp.run_id}` once the store is reachable"
            )

    # -- ending and continuing ------------------------------------------------
    def _should_continue_as_new(self, inp: AgentInput) -> bool:
        info = workflow.info()
        return info.is_continue_as_new_suggested() or info.get_current_history_size() > inp.history_limit_bytes

    async def _continue_as_new(self, inp: AgentInput) -> None:
        await self._drain_mirror(min(inp.mirror_drain_s, 10.0))
        state = self._state
        state.pending_records = list(self._pending.values())
        state.continued_as_new += 1
        assert self._status is not None
        next_input = inp.model_copy(update={"resume": state, "limits": self._status.limits})
        self._trace.run_ended(self._status, state="continued_as_new")
        if inp.fast:  # keeps the short workflow task timeout that paces recording (runs.start_agent)
            workflow.continue_as_new(next_input, task_timeout=workflow.info().task_timeout)
        workflow.continue_as_new(next_input)

    async def _finish_run(self) -> AgentResult:
        status, inp = self._status, self._input
        assert status is not None and inp is not None
        await self._drain_mirror(inp.mirror_drain_s)
        self._note_unmirrored("ended")
        self._sync_status()
        self._trace.run_ended(status)
        return AgentResult(status=status, final_answer=status.final_answer)

    async def _fail(self, reason: str) -> None:
        assert self._status is not None and self._input is not None
        state = self._state
        if state.parent_checkpoint is not None and parse_checkpoint_id(state.parent_checkpoint)[2] == state.step:
            # The failure is the next step's, not the recorded one's: also on a branch that fails before
            # its first step, whose recorded step is its fork point, of another branch.
            state.step += 1
        state.last_error = reason
        self._record_step("failed", failed={"reason": reason})
        self._status.state = "failed"
        self._show_state()
        await self._finish_run()
        # The status rides along: a sub-agent's caller reads what it spent from it.
        raise ApplicationError(reason, self._status.model_dump(mode="json"), type=AGENT_RUN_FAILED, non_retryable=True)
