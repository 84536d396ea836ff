"""PipelineWorkflow: the user's own async function as a durable, checkpointed run.

A pipeline (`@pipeline` in a tools module) is ordinary Python control flow
(if, for, while, try, asyncio.gather) that reaches the outside world only
through its `ctx`: `ctx.llm`, `ctx.tool` and `ctx.agent` are activities (or
child runs) exactly as the agent loop's calls are, with the same retries,
cache, idempotency keys, effects once across the lineage, approvals and
ledger; `ctx.state` is a JSON dict recorded in every checkpoint; `ctx.now()`,
`ctx.random()` and `ctx.sleep()` are the workflow's deterministic ones.

Every completed call is a step: an AgentCheckpoint labelled by the call,
whose `pipeline` field says which call of the code it is (its position in
the order the code made its calls, label, kind, digest of its arguments).

The code runs inside Temporal's workflow sandbox whatever the worker's
setting (rewind/worker/main.py), so a pipeline that reads the clock or opens
a file directly fails with a line that names the call and what to use
instead. After a worker crash the run replays its history: each call's
activity id is its position, kind, label and digest, so code that changed
under the run (another call at a recorded position) is told apart from the
record at the first call that differs, and the run stops there, naming both
(`workflows.pipeline.ids.explain_code_change`), instead of answering the new call with
the old one's result.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    import pydantic

    from workflows.loop.agent import AgentWorkflow
    from workflows.vocabulary.canonical import canonical_json
    from workflows.vocabulary.contracts import AgentInput, AgentResult, DescribeToolsResponse, LlmRequest, LlmResponse, StepRecord, ToolCallLog
    from workflows.vocabulary.errors import ModelCallFailed, OutputInvalid, ToolCallFailed
    from workflows.vocabulary.code_runs import (
        DescribePipelineRequest,
        PipelineCall,
        PipelineDescription,
        PipelineSpec,
        RecordedCall,
    )
    from workflows.vocabulary.ids import parse_checkpoint_id
    from workflows.pipeline.values import (
        REPAIR_PROMPT,
        answer_text,
        conversation as conversation_of,
        parse_output,
        pipeline_failure,
        response_format as response_format_of,
        state_copy,
    )
    from workflows.pipeline.ids import DIGEST_CHARS, call_activity_id, call_digest, code_change_line
    from workflows.graph.runner import GraphRunner, chat_messages, graph_state
    from workflows.graph.calls import GraphRunCalls
    from workflows.vocabulary.status import PipelineCallState
    from workflows.vocabulary.summaries import model_call_summary
    from workflows.vocabulary.tool_calls import failure_text, with_system
    from workflows.vocabulary.wire import (
        CHECKPOINT_CONFLICT,
        DESCRIBE_PIPELINE,
        GATHER_MIRROR_PATCH,
        GRAPH_ANSWER_ONCE_PATCH,
        GRAPH_CARRIED_CHECKPOINTS_PATCH,
        RECORD_BREATHES_PATCH,
        GRAPH_CONTINUE_AS_NEW_PATCH,
        PIPELINE_CARRIED_CHECKPOINTS_PATCH,
        PIPELINE_WORKFLOW,
    )

class PipelineContext:
    """What a pipeline's code reaches the world through (the `ctx` argument)."""

    def __init__(self, run: "PipelineWorkflow", state: dict[str, Any]) -> None:
        self._run = run
        self.state: dict[str, Any] = state
        """A JSON dict the pipeline keeps across its calls; recorded in every checkpoint."""

    async def llm(self, label: str, messages: list[dict[str, Any]] | None = None, *, system: str | None = None,
                  user: str | None = None, model: str | None = None, tools: list[str] | None = None,
                  output: type[pydantic.BaseModel] | None = None, repairs: int = 2,
                  temperature: float | None = None) -> Any:
        """One model call, labelled `label`. Give `messages`, or `system` and `user`.

        Returns the answer's text; with `output=Model` a validated `Model` (a malformed
        answer goes back to the model with the validation error at most `repairs` times,
        then OutputInvalid); with `tools=[names]` the assistant message itself (a dict
        with its `tool_calls`), for an agent loop of your own."""
        return await self._run.call_model(label, messages, system=system, user=user, model=model, tools=tools,
                                          output=output, repairs=repairs, temperature=temperature)

    async def tool(self, name: str, /, **arguments: Any) -> Any:
        """Call a registered @tool (or an MCP server's tool) with `arguments`; its output.
        Raises ToolCallFailed when the tool fails after its retries or is rejected."""
        return await self._run.call_tool(name, arguments, kind="tool")

    async def agent(self, name: str, task: str) -> str:
        """Run a declared agent (`subagent(...)`) on `task` as a durable child run; its answer."""
        return await self._run.call_tool(name, {"task": task}, kind="agent")

    async def pipeline(self, name: str, /, **arguments: Any) -> str:
        """Run another @pipeline on `arguments` as a durable child run; its result (JSON text
        when it returns a model or a dict). Raises ToolCallFailed when the child run fails."""
        return await self._run.call_tool(name, arguments, kind="pipeline")

    def emit(self, value: Any) -> None:
        """Tell the run's watchers `value` (JSON: progress, a partial result): a live `custom` event
        (docs/streaming.md). Not part of the record: a fork or a continued run that runs the code
        again does not say it again, and a watcher that connects later does not get it."""
        self._run.emit_custom(value)

    def now(self) -> datetime:
        """The run's clock: the same on every replay."""
        return workflow.now()

    def random(self) -> float:
        """A random float in [0, 1): the same on every replay, and in a fork or a continued run
        that runs the code again (drawn from the run's seed, in the order the code draws)."""
        return self._run.draw()

    async def sleep(self, seconds: float) -> None:
        """A durable timer: a worker restart does not shorten or repeat it, nor does a fork or a
        continued run, which skip a sleep the record shows was slept (a recorded call follows it)."""
        if self._run.replaying_record():
            return
        self._run.before_waiting()
        await workflow.sleep(timedelta(seconds=seconds))


@workflow.defn(name=PIPELINE_WORKFLOW, failure_exception_types=[workflow.NondeterminismError])
class PipelineWorkflow(GraphRunCalls, AgentWorkflow):
    """AgentWorkflow's status, approvals, budgets, ledger and mirror, driven by a pipeline."""

    def __init__(self) -> None:
        super().__init__()
        self._positions = 0
        self._ctx: PipelineContext | None = None
        # A fork's record: the lineage's calls up to the fork point, answered again by position.
        self._record: dict[tuple[int, int], RecordedCall] = {}
        self._answered_calls: list[RecordedCall] = []
        self._consumed: set[tuple[int, int]] = set()  # recorded calls answered already, by (position, attempt)
        self._breaths = 0  # calls (and a graph's super-steps) answered from the record since the last breath
        self._twins: dict[tuple[str, str, str, int], list[RecordedCall]] | None = None  # a graph's, by what they asked
        self._sets_applied = 0
        self._pipeline_name = ""
        self._default_model = ""
        self._graph: GraphRunner | None = None  # a LangGraph graph's run (workflows/graph/runner.py)
        self._kind = "pipeline"
        # The calls of the group in flight (an asyncio.gather's), by position, for the status.
        self._calls: dict[int, PipelineCallState] = {}
        self._spans: dict[tuple[int, int], Any] = {}  # each live call's trace span, while it runs
        self._draws = 0  # ctx.random() numbers drawn so far
        self._emitted = 0  # ctx.emit() events so far (their live ids)
        self._fork_step = -1  # the step this run's record ends at (-1: a run started afresh)
        self._seed = 0
        # Continue-as-new: live calls wait while the run hands over to its next run, which it does
        # once it has made a few live calls of its own (so a run whose record alone is near the
        # limit still gets on) and, if the store did not take its steps, a few calls later again.
        self._continuing = False
        self._live_calls = 0
        self._handover_at = _HANDOVER_EVERY

    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        return await AgentWorkflow.run(self, inp)

    async def _run(self, inp: AgentInput) -> AgentResult:
        self._begin(inp)
        plan = inp.pipeline
        if plan is None:
            await self._fail("this run was started as a PipelineWorkflow without a pipeline (AgentInput.pipeline); "
                             "start pipelines with `rewind start --pipeline NAME` or pipeline_input()")
        assert plan is not None
        # A fork or rollback gets its record with the description: every call its lineage recorded
        # up to the fork point is answered from it, in this run, without an activity.
        fork_point = inp.resume.parent_checkpoint if inp.resume is not None else None
        self._fork_step = parse_checkpoint_id(fork_point)[2] if fork_point is not None else -1
        described = await workflow.execute_activity(
            DESCRIBE_PIPELINE, DescribePipelineRequest(name=plan.name, arguments=plan.arguments,
                                                       fork_point=plan.record_until or fork_point),
            result_type=PipelineDescription, start_to_close_timeout=timedelta(seconds=120),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5), non_retryable_error_types=[CHECKPOINT_CONFLICT]),
        )
        self._pipeline_name = plan.name
        self._seed = plan.seed if plan.seed is not None else workflow.random().getrandbits(63)
        if described.error is not None or described.spec is None:
            await self._fail(described.error or f"no worker offers pipeline {plan.name!r}")
        spec = described.spec
        assert spec is not None
        self._kind = spec.kind
        self._default_model = spec.model or inp.model
        self._status.model = self._default_model  # type: ignore[union-attr]
        await self._use_tools(_described_tools(described), routed=False)
        self._ctx = PipelineContext(self, {})
        if inp.resume is None:
            if spec.kind == "graph":  # the graph's input: its messages channel and its other channels
                self._add_messages(*chat_messages(described.arguments.get("messages")))
                self._record_step("start", variables=graph_state(described.arguments), model=self._default_model)
            else:
                self._add_messages({"role": "user", "content": f"{plan.name}({canonical_json(described.arguments)})"})
                self._record_step("start", variables={}, model=self._default_model)
        elif described.record is not None:
            # A fork or rollback: the code runs again from its start, and every call the lineage
            # recorded up to the fork point is answered from the record (no activity, no step).
            self._record = {(c.position, c.attempt): c for c in described.record.calls}
        self._maybe_set_state()
        try:
            fn, arguments = self._load(spec, described)
            # What the code returned, and its state, as the run's last checkpoint keeps them (a value
            # that is not JSON is the pipeline's error, like any other).
            answer = answer_text(await self._run_code(inp, fn(self._ctx, **arguments)))
            final_state = self._graph.final_state if self._graph is not None else state_copy(self._ctx.state)
        except (asyncio.CancelledError, ApplicationError):
            raise  # stopped from outside; a Temporal failure the code raised on purpose
        except _BudgetSpent:
            return await self._finish_run()  # paused for its budget, and nobody raised it in time
        except _CodeChanged as changed:
            await self._fail(str(changed))
        except Exception as exc:  # noqa: BLE001 - the pipeline's own failure ends the run, said in one line
            await self._fail(pipeline_failure(plan.name, spec.module, exc, spec.kind))
        status = self._status
        assert status is not None
        # A graph's answer that is its messages channel's last message is in the run's messages
        # already: its result step holds the final state without repeating it.
        answered = (self._graph is not None and self._graph.answer_in_messages
                    and workflow.patched(GRAPH_ANSWER_ONCE_PATCH))
        if not answered:
            self._add_messages({"role": "assistant", "content": answer})
        self._state.step += 1
        self._record_step("result", variables=final_state, model=self._default_model)
        status.final_answer = answer
        status.state = "completed"
        self._show_state()
        return await self._finish_run()

    async def _run_code(self, inp: AgentInput, code: Any) -> Any:
        """The pipeline's code to its end, handing over to a new run (continue-as-new) when
        Temporal suggests it: once the calls in flight have ended and the mirror has stored their
        steps, the next run runs the code again against the record (as a fork does), so its
        history starts small and no call runs twice."""
        task = asyncio.ensure_future(code)
        while True:
            await workflow.wait_condition(lambda: task.done() or (self._continuing and not self._running()
                                                                  and not self._super_step_open()))
            if task.done():
                return task.result()
            await self._drain_mirror(min(inp.mirror_drain_s, 10.0))
            if not self._pending:
                plan = inp.pipeline
                assert plan is not None
                own_after = plan.own_after_step if plan.own_after_step is not None else self._fork_step
                await self._continue_as_new(inp.model_copy(update={"pipeline": plan.model_copy(update={
                    "seed": self._seed, "own_after_step": own_after})}))
            # The store does not take the steps now: go on here, and try again some calls later.
            self._continuing, self._handover_at = False, self._live_calls + _HANDOVER_EVERY

    def _running(self) -> bool:
        return any(c.state == "running" for c in self._calls.values())

    def emit_custom(self, value: Any) -> None:
        if self.replaying_record():
            return  # said when the record's run made this call; a fork does not say it again
        self._emitted += 1
        self._events.live("code", f"c{self._emitted}", "custom", None,
                          {"data": json.loads(json.dumps(value, default=str)), "source": self._kind})

    def _super_step_open(self) -> bool:
        """A graph's super-step has calls that are not a step yet (a run hands over between super-steps)."""
        return self._graph is not None and bool(self._graph.calls)

    def hand_over_soon(self) -> None:
        """A graph's super-step is a step: the run hands over to its next run here, between super-steps
        (the nodes of the next one wait before their first live call), when Temporal suggests it."""
        inp = self._input
        assert inp is not None
        if (not self._continuing and self._live_calls >= self._handover_at and self._should_continue_as_new(inp)
                and workflow.patched(GRAPH_CONTINUE_AS_NEW_PATCH)):
            self._continuing = True

    def draw(self) -> float:
        """ctx.random(): the run seed's next number."""
        self._draws += 1
        digest = hashlib.sha256(f"{self._seed}:{self._draws}".encode()).digest()
        return int.from_bytes(digest[:7], "big") / float(1 << 56)

    def before_waiting(self) -> None:
        """The code waits for something other than a model call (a timer): the steps held for
        the next model call to carry are written now, not after the wait."""
        self._flush_held()

    def _can_carry(self) -> bool:
        """A pipeline's steps ride on its next model call as the loop's do, or on its next plain
        read-only tool call (two actions a step where it was three), and go to the mirror at once
        before anything else it waits for; a graph's super-steps ride on its next model call, plain
        tool call or node-level node alike."""
        inp = self._input
        if inp is None or inp.fast:
            return False
        if self._kind == "graph":  # a graph's super-steps ride on its next model call or node-level node
            return workflow.patched(GRAPH_CARRIED_CHECKPOINTS_PATCH)
        return self._kind == "pipeline" and workflow.patched(PIPELINE_CARRIED_CHECKPOINTS_PATCH)

    def replaying_record(self) -> bool:
        """The code is still before the last call of its record (a fork's, a continued run's)."""
        return any(position >= self._positions for position, _ in self._record)

    def _load(self, spec: PipelineSpec, described: PipelineDescription) -> tuple[Any, dict[str, Any]]:
        """The pipeline's function, imported here (inside the sandbox), and its arguments as
        its type hints want them (validated again: the worker checked the JSON). A graph's code
        is its runner's, on the graph the module defines (compiled afresh for this run)."""
        # The module imports as in the user's own process (its environment, .env files, paths,
        # clients built at import): only its nodes' and pipeline's code is guarded.
        with workflow.unsafe.sandbox_unrestricted():
            module = importlib.import_module(spec.module)
        registered = getattr(module, spec.attribute)
        if spec.kind == "graph":
            self._graph = GraphRunner(self, spec.name, registered, skip_steps=self._steps_of_record(described),
                                      sets=self._graph_sets(described), module=module,
                                      turns=self._graph_turns(described))
            graph_input = dict(described.arguments)
            graph_input.update(self._sets_at_start(described))
            return (lambda _ctx, **_: self._graph.run(graph_input)), {}  # type: ignore[union-attr]
        values = registered.arguments_model.model_validate(described.arguments)
        return registered.fn, {name: getattr(values, name) for name in registered.arguments_model.model_fields}

    # -- calls ------------------------------------------------------------------
    async def _within_budget(self) -> None:
        """Before a live call: it waits while the run hands over to its next (it runs there), and a
        spent budget pauses the run until `rewind continue` raises it."""
        inp = self._input
        assert inp is not None
        # A graph run hands over between super-steps (hand_over_soon): its calls are not a step until one ends.
        if (self._graph is None and not self._continuing and self._live_calls >= self._handover_at
                and self._should_continue_as_new(inp)):
            self._continuing = True
        if self._continuing:
            await workflow.wait_condition(lambda: not self._continuing)
        while True:
            reason = self._budget_exceeded()
            if reason is None:
                return
            if not await self._pause_for_budget(reason):
                raise _BudgetSpent(reason)

    def _from_record(self, call: PipelineCall) -> RecordedCall | None:
        """The recorded answer of this call, if the lineage made the same call (position, kind,
        label, digest) before the fork point; the code's own request decides, not the overrides."""
        recorded = self._record.get((call.position, call.attempt))
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        if self._kind == "graph" and not self._same(recorded, call):
            # A graph's parallel nodes (a Send fan-out) make their calls in the order their answers
            # let them: answered from the record, they come in another order than when they ran
            # live. The same call not yet answered, wherever the record has it, is its answer.
            recorded = self._twin(call) or recorded
        if recorded is None or (recorded.position, recorded.attempt) in self._consumed:
            return None
        if (recorded.kind, recorded.label, recorded.digest) != (call.kind, call.label, call.digest):
            own_after = inp.pipeline.own_after_step
            if own_after is not None and recorded.step > own_after:
                # A call this workflow made before it continued as new: the code changed under the run.
                raise _CodeChanged(code_change_line(_parts(recorded), _parts(call), inp.run_id, self._step_before(call)))
            return None  # a fork runs the code's own call live from here
        if recorded.step in inp.pipeline.redo_steps:
            return None  # `rewind redo`: this one runs again
        self._answered_calls.append(recorded)
        self._consumed.add((recorded.position, recorded.attempt))
        return recorded

    async def breathe(self, weight: int = 1) -> None:
        """A call (`weight` 1) or a graph's super-step (`weight` 10: LangGraph's loop costs more)
        answered from the record: every `_BREATHE_EVERY` of them the run waits on a 1 ms timer, so a
        long record answered again in one go (a fork late in a long run, a continued run) ends its
        workflow task before Temporal's deadlock detector (2 s) takes the code for stuck."""
        self._breaths += weight
        if self._breaths >= _BREATHE_EVERY and workflow.patched(RECORD_BREATHES_PATCH):
            self._breaths = 0
            await workflow.sleep(timedelta(milliseconds=1))

    def _same(self, recorded: RecordedCall | None, call: PipelineCall) -> bool:
        return (recorded is not None and (recorded.position, recorded.attempt) not in self._consumed
                and (recorded.kind, recorded.label, recorded.digest) == (call.kind, call.label, call.digest))

    def _twin(self, call: PipelineCall) -> RecordedCall | None:
        """The first recorded call not yet answered that asked what `call` asks."""
        if self._twins is None:
            self._twins = {}
            for found in sorted(self._record.values(), key=lambda c: (c.position, c.attempt)):
                self._twins.setdefault((found.kind, found.label, found.digest, found.attempt), []).append(found)
        for found in self._twins.get((call.kind, call.label, call.digest, call.attempt), []):
            if (found.position, found.attempt) not in self._consumed:
                return found
        return None

    def _maybe_set_state(self, live: bool = False) -> None:
        """Each fork's `--set` of the lineage lands in ctx.state at its fork point: once every call
        recorded up to that step has been answered again, or before the first call that is not
        answered from the record (whichever comes first)."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None and self._ctx is not None
        if self._kind == "graph":
            return  # a graph's --set lands in its channels (GraphRunner), not in ctx.state
        for index, found in enumerate(inp.pipeline.state_sets):
            if index < self._sets_applied:
                continue
            due = sum(1 for c in self._record.values() if c.step <= found.after_step)
            if not live and self._answered_upto(found.after_step) < due:
                return
            self._ctx.state.update(json.loads(json.dumps(found.values)))
            self._sets_applied = index + 1

    def _step_before(self, call: PipelineCall) -> int | None:
        """The last recorded step before the first recorded call at or after `call`'s position."""
        later = [c.step for c in self._record.values() if c.position >= call.position]
        return min(later) - 1 if later else None

    def _answered_upto(self, step: int) -> int:
        return sum(1 for c in self._answered_calls if c.step <= step)

    def _activity_id(self, call: PipelineCall) -> str:
        return call_activity_id(call)

    def _next_call(self, label: str, kind: str, request: Any) -> PipelineCall:
        position = self._positions
        self._positions += 1
        return PipelineCall(pipeline=self._pipeline_name, position=position, label=label, kind=kind,
                            digest=call_digest(kind, label, request))

    async def call_model(self, label: str, messages: list[dict[str, Any]] | None, *, system: str | None,
                         user: str | None, model: str | None, tools: list[str] | None,
                         output: type[pydantic.BaseModel] | None, repairs: int, temperature: float | None) -> Any:
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        conversation = conversation_of(label, messages, system, user)
        schemas = [self._tool_schema(name, label) for name in tools or []]
        response_format = response_format_of(output) if output is not None else None
        # The call is what the code asked; a fork's overrides change how it is answered when it runs.
        call = self._next_call(label, "llm", {"messages": conversation, "model": model or self._default_model,
                                             "tools": tools or [], "output": response_format})
        prompt = inp.pipeline.prompts.get(label)
        if prompt is not None:
            conversation = with_system(conversation, prompt)
        chosen = inp.pipeline.models.get(label) or inp.pipeline.models.get("*") or model or self._default_model
        sent = list(conversation)  # the whole conversation, the repairs included
        new = list(conversation)  # what this attempt adds to it (its step's messages)
        attempt = 0
        note = None  # why the answers may not be what the run asked for (LlmResponse.note)
        while True:
            this = call.model_copy(update={"attempt": attempt})
            recorded = self._from_record(this)
            if recorded is not None and recorded.message is not None:  # answered from a fork's record
                message = recorded.message
                self._maybe_set_state()
                await self.breathe()
                problem, value = parse_output(output, message) if output is not None else (None, None)
            else:
                self._maybe_set_state(live=True)
                await self._within_budget()
                response = await self.ask_model(this, sent, schemas, chosen, temperature, response_format,
                                                f"model call {label!r}")
                message, note = response.message, response.note or note
                problem, value = parse_output(output, message) if output is not None else (None, None)
                self._record_call(this, [*new, message], [], model_view=response.model_view, model=chosen,
                                  invalid=problem)
            if output is None:
                return message if tools else (message.get("content") or "")
            if problem is None:
                return value
            if attempt >= repairs:
                raise OutputInvalid(f"model call {label!r}: the answer is not a valid {output.__name__} after "
                                    f"{repairs} repair(s): {problem}" + (f" ({note})" if note else ""))
            attempt += 1
            new = [{"role": "user", "content": REPAIR_PROMPT.format(error=problem)}]
            sent = [*sent, message, *new]

    async def ask_model(self, call: PipelineCall, messages: list[dict[str, Any]], schemas: list[dict[str, Any]],
                        model: str, temperature: float | None, response_format: dict[str, Any] | None,
                        what: str) -> LlmResponse:
        """One live model call of the code (a pipeline's ctx.llm, a graph node's chat model): its
        activity, counted in the ledger; ModelCallFailed naming `what` when it fails for good."""
        inp = self._input
        assert inp is not None
        request = LlmRequest(
            run_id=inp.run_id, step=self._state.step + 1, model=model, new_messages=messages, tools=schemas,
            context_tokens=inp.llm.context_tokens, keep_last=inp.llm.keep_last,
            temperature=temperature if temperature is not None else inp.llm.temperature, seed=inp.llm.seed,
            tool_result_chars=inp.llm.tool_result_chars, response_format=response_format, label=call.label,
            transcript=False, checkpoints=self._take_held(),
        )
        self._call_started(call)
        try:
            response = await self._model_activity(request, model_call_summary(self._state.step + 1, model),
                                                  activity_id=call_activity_id(call))
        except (ActivityError, asyncio.CancelledError) as err:
            # Whether the call wrote the steps it carried is unknown: the mirror writes them.
            self._carried_back(request.checkpoints, 0)
            if isinstance(err, asyncio.CancelledError):
                raise
            self._call_ended(call, None)
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            raise ModelCallFailed(f"{what} failed: {failure_text(err)}") from None
        if request.checkpoints:
            carried = response.checkpoints
            self._carried_back(request.checkpoints, carried.written if carried is not None else 0)
        self._count_model(response)
        return response

    async def call_tool(self, name: str, arguments: dict[str, Any], *, kind: str) -> Any:
        log = await self.tool_log(name, arguments, kind=kind)
        if log.error is not None:
            raise ToolCallFailed(f"{name}: {log.error}")
        if log.approval is not None and log.approval.verdict == "rejected":
            raise ToolCallFailed(f"{name} was rejected by {log.approval.by}"
                                 + (f": {log.approval.reason}" if log.approval.reason else ""))
        return log.output

    async def tool_log(self, name: str, arguments: dict[str, Any], *, kind: str = "tool",
                       node: str | None = None) -> ToolCallLog:
        """A tool, agent or pipeline call's log (its output or its error): from the record, or
        run live."""
        tools = self._tools
        assert tools is not None
        spec = tools.spec(name)
        if spec is None:
            same = [n for n in tools.names() if _kind_of(tools.spec(n)) == kind]
            raise ToolCallFailed(f"no {kind} named {name!r} on the worker that runs this pipeline; "
                                 f"available: {', '.join(same) or 'none'}")
        actual = _kind_of(spec)
        if actual != kind:
            raise ToolCallFailed(f"{name!r} is {_KINDS[actual]}: call it with ctx.{actual}({name!r}, ...)")
        call = self._next_call(name, kind, arguments)
        recorded = self._from_record(call)
        if recorded is not None and recorded.tool is not None:
            log = recorded.tool
            self._maybe_set_state()
            await self.breathe()
        else:
            self._maybe_set_state(live=True)
            await self._within_budget()
            request = {"id": f"call_{call.position}", "type": "function",
                       "function": {"name": name, "arguments": canonical_json(arguments)}}
            inp = self._input
            plain = (kind == "tool" and spec.agent is None and not spec.side_effects and spec.mcp is None
                     and not spec.fast and not (inp is not None and inp.fast))
            # A plain read-only tool's activity carries the steps held for the next model call and
            # writes them as it starts. Any other call may wait long before an activity of the run's
            # own runs (an approval, a child run): those steps go to the mirror activity now.
            carry = self._take_held() if plain else []
            if not plain:
                self._flush_held()
            self._call_started(call)
            try:
                log, written = await tools.call(self._state.step + 1, request, activity_id=call_activity_id(call),
                                                carry=carry)
            except asyncio.CancelledError:
                self._carried_back(carry, 0)  # whether the call wrote them is unknown: the mirror writes them
                self._call_ended(call, None)
                raise
            except BaseException:
                self._call_ended(call, None)
                raise
            self._carried_back(carry, written)
            self._record_call(call, [], [log], node=node)
        return log

    def _tool_schema(self, name: str, label: str) -> dict[str, Any]:
        spec = self._tools.spec(name) if self._tools is not None else None
        if spec is None:
            raise ToolCallFailed(f"model call {label!r} offers tool {name!r}, which no worker of this run holds")
        return spec.openai_schema()

    def _record_call(self, call: PipelineCall, messages: list[dict[str, Any]], logs: list[ToolCallLog], *,
                     model_view: dict[str, Any] | None = None, model: str | None = None,
                     invalid: str | None = None, node: str | None = None, response: Any = None) -> None:
        """The call's step: its messages, tool record and the state, right when it completed
        (nothing awaits in between, so the ledgers hold this call's spending alone). In a graph
        run the call joins its super-step's step instead (its answer kept for a fork)."""
        if self._graph is not None:
            entry: dict[str, Any] = {**call.model_dump(exclude={"pipeline"}), **self._graph.place()}
            if call.kind == "llm":
                entry.update(message=messages[-1], model=model)
                if response is not None:
                    entry.update(prompt_tokens=response.usage.prompt_tokens,
                                 completion_tokens=response.usage.completion_tokens, cost_usd=response.cost_usd)
            for log in logs:
                log.step = self._state.step + 1
                entry["tool_call_id"] = log.tool_call_id
            self._step_calls.extend(logs)
            self._graph.calls.append(entry)
            self._call_ended(call, None, done=True)
            return
        assert self._ctx is not None
        variables = state_copy(self._ctx.state)  # before anything changes: a state that is not JSON records nothing
        self._step_messages = list(messages)
        self._state.step += 1
        for log in logs:
            log.step = self._state.step
        self._step_calls = list(logs)
        label = call.label if call.attempt == 0 else f"{call.label} (repair {call.attempt})"
        details = call.model_dump()
        if invalid is not None:
            details["invalid"] = invalid
        record = self._record_step(label, variables=variables, model_view=model_view, pipeline=details, model=model)
        self._call_ended(call, record)
        if self._running() and workflow.patched(GATHER_MIRROR_PATCH):
            # Other calls of the group still run (an asyncio.gather's): the code waits for them, no
            # call of its own carries this step soon, so it goes to the store now (`rewind show` of
            # a finished search while another still runs).
            self._flush_held()

    def _call_started(self, call: PipelineCall) -> None:
        """A live call starts: one of the group in flight, or the first of a new group."""
        self._live_calls += 1
        if all(c.state != "running" for c in self._calls.values()):
            self._calls = {}
        self._calls[call.position] = PipelineCallState(position=call.position, label=call.label, kind=call.kind,
                                                       state="running")
        self._show_calls()
        self._spans[(call.position, call.attempt)] = self._trace.pipeline_call_started(call.position, call.attempt)

    def _call_ended(self, call: PipelineCall, record: StepRecord | None, done: bool = False) -> None:
        """A call completed (its step's `record`; `done`: a graph's, whose step comes with its
        super-step) or failed (None)."""
        shown = self._calls.get(call.position)
        if shown is not None:
            ok = record is not None or done
            shown.state, shown.step = ("completed" if ok else "failed"), (record.step_index if record else None)
        self._show_calls()
        self._trace.pipeline_call_ended(self._spans.pop((call.position, call.attempt), None), record)

    def _show_calls(self) -> None:
        """The status's calls: those started since none was in flight (an asyncio.gather's group,
        as it completes), until the next call starts after they all ended."""
        if self._status is not None:
            self._status.pipeline_calls = [self._calls[p] for p in sorted(self._calls)]


# What each kind of callee is, as a wrong ctx method's error says it.
_KINDS = {"tool": "a tool", "agent": "a declared agent", "pipeline": "a pipeline"}


def _kind_of(spec: Any) -> str:
    if spec.agent is None:
        return "tool"
    return "pipeline" if spec.agent.pipeline else "agent"


# Calls answered from the record between two 1 ms timers (PipelineWorkflow.breathe): an answered
# call costs well under a millisecond, a graph's super-step run again a few (it weighs 10).
_BREATHE_EVERY = 1000

# A run makes this many live calls before it hands over to a new run (continue-as-new), and
# as many more before it tries again when the store could not take its steps first.
_HANDOVER_EVERY = 10


class _CodeChanged(BaseException):
    """The code asked another call than this workflow recorded at that position (after a continue-
    as-new): ends the run in one line (a BaseException: the pipeline's `except Exception` does not
    swallow it)."""


def _parts(call: Any) -> dict[str, Any]:
    return {"position": call.position, "kind": call.kind, "label": call.label, "digest": call.digest[:DIGEST_CHARS]}


class _BudgetSpent(BaseException):
    """The run's budget ran out and its pause ended: unwinds the pipeline's code (a
    BaseException, so an `except Exception` in it does not swallow the end of the run)."""


def _described_tools(described: PipelineDescription) -> DescribeToolsResponse:
    return DescribeToolsResponse(tools=described.tools, missing=[])
