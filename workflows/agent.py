"""AgentWorkflow: the agent loop as a Temporal workflow.

One step = one model call, then the tool calls it asked for, run in parallel
as activities. Everything non-deterministic (the model, tools, clocks of the
outside world) happens in activities; this module only decides what to call
next from what history says, so a replay after a worker crash reaches the
same state without repeating a completed call.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from checkpoint_bridge.canonical import cache_key
    from checkpoint_bridge.ids import checkpoint_id
    from workflows.contracts import (
        AgentInput,
        AgentResult,
        AgentStatus,
        DescribeToolsRequest,
        DescribeToolsResponse,
        LlmRequest,
        LlmResponse,
        MirrorAck,
        StepRecord,
        ToolCallLog,
        ToolOutcome,
        ToolRequest,
        ToolSpec,
    )
    from workflows.tool_calls import canonical_arguments, idempotency_key, step_label, tool_message

# Activity names: the workflow refers to activities by name only, so it does
# not import the activity implementations (and their I/O libraries).
CALL_LLM = "call_llm"
RUN_TOOL = "run_tool"
DESCRIBE_TOOLS = "describe_tools"
MIRROR_STEP = "mirror_step"
MIRROR_CONFLICT = "CheckpointConflict"
LLM_REJECTED = "LlmRequestRejected"
TOOL_NOT_REGISTERED = "ToolNotRegistered"


def _failure_text(err: BaseException) -> str:
    cause = err.cause if isinstance(err, ActivityError) and err.cause is not None else err
    return str(cause) or type(cause).__name__


@workflow.defn(name="AgentWorkflow")
class AgentWorkflow:
    def __init__(self) -> None:
        self._status: AgentStatus | None = None
        # The conversation lives in the transcript store; the workflow keeps
        # only its head and the messages the next model call must add to it.
        self._head: str | None = None
        self._head_len = 0
        self._unsent: list[dict[str, Any]] = []
        self._step_messages: list[dict[str, Any]] = []
        self._tool_log: list[ToolCallLog] = []
        self._cache: dict[str, ToolCallLog] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._inflight: dict[str, asyncio.Future[ToolOutcome | str]] = {}
        self._input: AgentInput | None = None
        self._recorded_tool_calls = 0
        self._mirror_tasks: list[asyncio.Future[None]] = []

    # -- queries --------------------------------------------------------------
    @workflow.query
    def status(self) -> AgentStatus:
        if self._status is None:
            raise ApplicationError("the run has not started its first workflow task yet")
        return self._status

    @workflow.query
    def tool_log(self) -> list[ToolCallLog]:
        return self._tool_log

    # -- the loop -------------------------------------------------------------
    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        self._input = inp
        status = self._status = AgentStatus(
            run_id=inp.run_id, branch_id=inp.branch_id, state="running", model=inp.model
        )
        described = await workflow.execute_activity(
            DESCRIBE_TOOLS,
            DescribeToolsRequest(names=inp.tools),
            result_type=DescribeToolsResponse,
            start_to_close_timeout=timedelta(seconds=30),
        )
        if described.missing:
            await self._fail(
                f"tools not registered on the worker: {', '.join(described.missing)}; "
                "start the worker with --tools (or REWIND_TOOLS) naming the modules that define them"
            )
        self._specs = {t.name: t for t in described.tools}
        openai_tools = [t.openai_schema() for t in described.tools]
        self._add_messages(
            {"role": "system", "content": inp.system_prompt},
            {"role": "user", "content": inp.task},
        )
        self._record_step("start")

        while status.step < inp.limits.max_steps:
            if inp.limits.max_cost_usd is not None and status.cost_usd >= inp.limits.max_cost_usd:
                status.state = "budget_exceeded"
                return await self._finish_run()
            status.step += 1
            response = await self._call_model(inp, openai_tools)
            message = response.message
            self._add_messages(message)
            calls = message.get("tool_calls") or []
            if calls:
                replies = await asyncio.gather(*(self._run_call(inp, status.step, call) for call in calls))
                self._add_messages(*replies)
            self._record_step(step_label(message))
            if not calls:
                status.final_answer = message.get("content") or ""
                status.state = "completed"
                return await self._finish_run()
        status.state = "max_steps_reached"
        return await self._finish_run()

    def _add_messages(self, *messages: dict[str, Any]) -> None:
        self._unsent.extend(messages)
        self._step_messages.extend(messages)

    # -- checkpoints ----------------------------------------------------------
    def _record_step(self, label: str, *, failed: dict[str, Any] | None = None) -> None:
        """Hand what this step added to the mirror, off the loop's critical path."""
        status, inp = self._status, self._input
        assert status is not None and inp is not None
        step = status.step
        record = StepRecord(
            run_id=inp.run_id,
            branch_id=inp.branch_id,
            step_index=step,
            parent_id=checkpoint_id(inp.run_id, inp.branch_id, step - 1) if step > 0 else None,
            step_label=label,
            new_messages=self._step_messages,
            new_tool_calls=self._tool_log[self._recorded_tool_calls:],
            agent_variables=inp.variables,
            created_at=workflow.now(),
            model=inp.model,
            prompt_tokens=status.prompt_tokens,
            completion_tokens=status.completion_tokens,
            llm_tokens_used=status.total_tokens,
            llm_cost_usd=status.cost_usd,
            status="failed" if failed else "completed",
            error_info=failed,
        )
        self._step_messages = []
        self._recorded_tool_calls = len(self._tool_log)
        status.mirror_pending += 1
        self._mirror_tasks.append(asyncio.ensure_future(self._mirror(record)))

    async def _mirror(self, record: StepRecord) -> None:
        status = self._status
        assert status is not None
        try:
            await workflow.execute_activity(
                MIRROR_STEP,
                record,
                result_type=MirrorAck,
                start_to_close_timeout=timedelta(seconds=60),
                # A store that is down is retried for as long as it takes; the
                # agent loop does not wait for it. `rewind status` shows the lag
                # and the last store error from the pending activity.
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=500),
                    maximum_interval=timedelta(seconds=10),
                    non_retryable_error_types=[MIRROR_CONFLICT],
                ),
            )
        except ActivityError as err:
            status.mirror_error = f"checkpoint of step {record.step_index}: {_failure_text(err)}"
            return
        finally:
            status.mirror_pending -= 1

    async def _finish_run(self) -> AgentResult:
        status, inp = self._status, self._input
        assert status is not None and inp is not None
        try:
            await workflow.wait_condition(
                lambda: status.mirror_pending == 0, timeout=timedelta(seconds=inp.mirror_drain_s)
            )
        except asyncio.TimeoutError:
            status.mirror_error = (
                f"{status.mirror_pending} checkpoint(s) not mirrored when the run ended; "
                f"run `rewind mirror {inp.run_id}` once the store is reachable"
            )
        return AgentResult(status=status, final_answer=status.final_answer)

    async def _fail(self, reason: str) -> None:
        assert self._status is not None
        self._status.state = "failed"
        self._status.last_error = reason
        self._record_step("failed", failed={"reason": reason})
        await self._finish_run()
        raise ApplicationError(reason, type="AgentRunFailed", non_retryable=True)

    async def _call_model(self, inp: AgentInput, openai_tools: list[dict[str, Any]]) -> LlmResponse:
        status = self._status
        assert status is not None
        tuning = inp.llm
        try:
            response = await workflow.execute_activity(
                CALL_LLM,
                LlmRequest(
                    run_id=inp.run_id, step=status.step, model=inp.model,
                    transcript_head=self._head, transcript_len=self._head_len,
                    new_messages=self._unsent, tools=openai_tools,
                ),
                result_type=LlmResponse,
                start_to_close_timeout=timedelta(seconds=tuning.timeout_s),
                heartbeat_timeout=timedelta(seconds=tuning.heartbeat_s),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=tuning.initial_retry_s),
                    maximum_interval=timedelta(seconds=tuning.max_retry_s),
                    backoff_coefficient=2.0,
                    maximum_attempts=tuning.max_attempts,
                    non_retryable_error_types=[LLM_REJECTED],
                ),
            )
        except ActivityError as err:
            await self._fail(f"model call of step {status.step} failed: {_failure_text(err)}")
            raise  # unreachable: _fail raises
        status.llm_calls += 1
        self._head, self._head_len, self._unsent = response.transcript_head, response.transcript_len, []
        status.prompt_tokens += response.usage.prompt_tokens
        status.completion_tokens += response.usage.completion_tokens
        status.total_tokens += response.usage.total_tokens
        status.cost_usd += response.cost_usd
        if not response.priced:
            status.unpriced_calls += 1
        return response

    async def _run_call(self, inp: AgentInput, step: int, call: dict[str, Any]) -> dict[str, Any]:
        """Answer one tool call with a tool message; never raises for bad model output."""
        status = self._status
        assert status is not None
        call_id = str(call.get("id", ""))
        function = call.get("function") or {}
        name = str(function.get("name", ""))
        log = ToolCallLog(
            step=step, tool_call_id=call_id, tool_name=name,
            arguments=function.get("arguments"), called_at=workflow.now(),
        )
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs)) or "none"
            return self._finish(log, error=f"unknown tool {name!r}; available tools: {known}")
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError as exc:
            return self._finish(log, error=f"arguments for {name} are not valid JSON ({exc}); send a JSON object")
        if not isinstance(args, dict):
            return self._finish(log, error=f"arguments for {name} must be a JSON object, got {type(args).__name__}")
        log.arguments = args

        if not spec.side_effects:
            log.cache_key = cache_key(name, canonical_arguments(args, spec))
            cached = self._cache.get(log.cache_key)
            if cached is not None:
                status.tool_cache_hits += 1
                log.served_from_cache = True
                return self._finish(log, output=cached.output)
            pending = self._inflight.get(log.cache_key)
            if pending is not None:
                # The same read-only call is already running in this step: share it.
                status.tool_cache_hits += 1
                log.served_from_cache = True
                return self._apply(log, await pending, executed=False)
            task = asyncio.ensure_future(self._execute(inp, step, call_id, name, args, spec, None))
            self._inflight[log.cache_key] = task
            try:
                result = await task
            finally:
                del self._inflight[log.cache_key]
            return self._apply(log, result, executed=True)

        log.side_effects = True
        log.idempotency_key = idempotency_key(workflow.info().workflow_id, inp.branch_id, step, call_id)
        result = await self._execute(inp, step, call_id, name, args, spec, log.idempotency_key)
        return self._apply(log, result, executed=True)

    async def _execute(
        self, inp: AgentInput, step: int, call_id: str, name: str,
        args: dict[str, Any], spec: ToolSpec, idem_key: str | None,
    ) -> ToolOutcome | str:
        """The tool activity's outcome, or the text of its final failure."""
        try:
            return await workflow.execute_activity(
                RUN_TOOL,
                ToolRequest(
                    run_id=inp.run_id, branch_id=inp.branch_id, step=step, tool_call_id=call_id,
                    tool_name=name, arguments=args, idempotency_key=idem_key,
                ),
                result_type=ToolOutcome,
                start_to_close_timeout=timedelta(seconds=spec.timeout_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_s),
                retry_policy=RetryPolicy(
                    maximum_attempts=spec.max_attempts,
                    non_retryable_error_types=[TOOL_NOT_REGISTERED],
                ),
            )
        except ActivityError as err:
            return f"{name} failed after retries: {_failure_text(err)}"

    def _apply(self, log: ToolCallLog, result: ToolOutcome | str, *, executed: bool) -> dict[str, Any]:
        if isinstance(result, str):
            return self._finish(log, error=result)
        if executed:
            assert self._status is not None
            self._status.tool_calls_done += 1
            log.called_at = result.started_at
            log.duration_ms = result.duration_ms
        if result.error is not None:
            return self._finish(log, error=result.error)
        if log.cache_key is not None and log.cache_key not in self._cache:
            self._cache[log.cache_key] = log
        return self._finish(log, output=result.output)

    def _finish(self, log: ToolCallLog, *, output: Any = None, error: str | None = None) -> dict[str, Any]:
        log.output = output
        log.error = error
        if error is not None and self._status is not None:
            self._status.last_error = f"step {log.step}: {error}"
        self._tool_log.append(log)
        return tool_message(log)
