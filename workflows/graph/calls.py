"""What PipelineWorkflow does for a LangGraph graph's run (workflows/graph/runner.py runs the graph):
a node's chat model call as one of the run's model calls, a super-step as a step, interrupt()
as a wait for a person, and where a fork's record and its `--set`s land among the super-steps.
A mixin of PipelineWorkflow (workflow code: deterministic, no I/O)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows.graph.store import contents
    from workflows.loop.approvals import INTERRUPT
    from workflows.vocabulary.code_runs import GraphNodeRequest, GraphNodeResult, HandedCall, PipelineDescription
    from workflows.vocabulary.errors import PipelineError
    from workflows.vocabulary.tool_calls import failure_text
    from workflows.vocabulary.wire import GRAPH_NODE_FAILED, RUN_GRAPH_NODE
    from workflows.vocabulary.tool_calls import with_system
    from workflows.vocabulary.status import PendingApproval


class GraphRunCalls:
    """PipelineWorkflow's side of a graph run (its `_graph` is the GraphRunner)."""

    @property
    def run_id(self) -> str:
        assert self._input is not None
        return self._input.run_id

    def holds_tool(self, name: str) -> bool:
        """Whether the worker offers tool `name` (a LangChain tool built inside a node does not)."""
        return self._tools is not None and self._tools.spec(name) is not None

    def _marks(self, described: PipelineDescription) -> dict[int, Any]:
        return {m.step: m for m in described.record.supersteps} if described.record is not None else {}

    def _steps_of_record(self, described: PipelineDescription) -> int:
        """How many of the graph's steps the record holds up to the fork point (0: a run started afresh)."""
        if self._fork_step < 0:
            return 0
        return len([m for m in self._marks(described).values() if m.step <= self._fork_step])

    def _graph_sets(self, described: PipelineDescription) -> list[tuple[str, int, str, int | None, dict[str, Any]]]:
        """Each `--set` of the lineage as (subgraph, super-step, node, send, values): merged into the
        update of the last node of the step its fork point is (of that Send's task, for one)."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        marks = self._marks(described)
        out = []
        for found in inp.pipeline.state_sets:
            at = [m for m in marks.values() if m.step <= found.after_step]
            if at:
                mark = max(at, key=lambda m: m.step)
                out.append((mark.ns, mark.superstep, mark.nodes[-1], mark.send, dict(found.values)))
        return out

    def _graph_turns(self, described: PipelineDescription) -> list[tuple[Any, int, bool]]:
        """The thread's later invocations (PipelineRun.turns) as (turn, steps, live): the graph is
        invoked with a turn once it has gone through `steps` of the record's steps (those up to the
        head the turn was given at); `live`: the turn is this workflow's own (its input step is not
        in the record)."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        marks = self._marks(described)
        return [(turn, len([m for m in marks.values() if m.step <= turn.after_step]),
                 turn.after_step >= self._fork_step) for turn in inp.pipeline.turns]

    def record_turn_input(self, new_messages: list[dict[str, Any]], variables: dict[str, Any]) -> None:
        """A turn's input applied to the thread (LangGraph's input checkpoint): a step labelled
        `input`, holding the channels as the input left them (not a call: nothing to answer)."""
        self._step_messages = list(new_messages)
        self._state.unsent.extend(new_messages)
        self._state.step += 1
        self._record_step("input", variables=variables, model=self._default_model)

    def _sets_at_start(self, described: PipelineDescription) -> dict[str, Any]:
        """A `--set` at the run's start step (before any node): into the graph's input."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        marks = self._marks(described)
        out: dict[str, Any] = {}
        for found in inp.pipeline.state_sets:
            if not any(m.step <= found.after_step for m in marks.values()):
                out.update(found.values)
        return out

    async def call_chat(self, label: str, node: str, payload: dict[str, Any],
                        response_format: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], str]:
        """A graph node's chat model call (its OpenAI request `payload`): the assistant message,
        the usage and the model that answered; from the record when a fork answers it again."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        conversation = [dict(m) for m in payload.get("messages") or []]
        schemas = list(payload.get("tools") or [])
        asked = str(payload.get("model") or self._default_model)
        call = self._next_call(label, "llm", {"messages": conversation, "model": asked, "tools": schemas,
                                             "output": response_format, "tool_choice": payload.get("tool_choice")})
        prompt = inp.pipeline.prompts.get(label)
        if prompt is not None:
            conversation = with_system(conversation, prompt)
        chosen = inp.pipeline.models.get(label) or inp.pipeline.models.get("*") or asked
        recorded = self._from_record(call)
        if recorded is not None and recorded.message is not None:
            await self.breathe()
            return recorded.message, {}, chosen
        await self._within_budget()
        response = await self.ask_model(call, conversation, schemas, chosen, payload.get("temperature"),
                                        response_format, f"model call of node {node!r}")
        self._record_call(call, [response.message], [], model_view=response.model_view, model=chosen,
                          node=node, response=response)
        usage = response.usage
        return response.message, {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                                  "total_tokens": usage.total_tokens}, chosen

    async def call_node(self, node: str, state: str, state_digest: str, *, step: int, ns: str, resume: list[Any],
                        handed: list[tuple[tuple[str, str, str], Any]], task: bool,
                        why: str | None = None) -> dict[str, Any]:
        """A node (or @task) run as one activity (node-level durability): its packed update or
        interrupts; from the record when a fork answers it again. Its model calls go into the
        step's ledger, the calls it made as workflow code before it needed the activity are
        handed to it (answered with what they returned, not paid again)."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None and self._graph is not None
        call = self._next_call(node, "node", {"state": state_digest, "resume": resume, "task": task})
        recorded = self._from_record(call)
        if recorded is not None and recorded.message is not None:
            await self.breathe()
            return recorded.message
        await self._within_budget()
        options = self._graph.options(node)
        request = GraphNodeRequest(
            run_id=inp.run_id, graph=inp.pipeline.name, node=node, task=task, state=state, step=step, ns=ns,
            resume=resume, models=dict(inp.pipeline.models), prompt=inp.pipeline.prompts.get(node),
            store=contents(self._graph.store) if self._graph.store is not None else None,
            checkpoints=self._take_held(),
            handed=[HandedCall(kind=kind, key=key, message=answer[0] if kind == "llm" else None,
                               tool=answer if kind == "tool" else None)
                    for (_, kind, key), answer in handed])
        self._call_started(call)
        try:
            result = await workflow.execute_activity(
                RUN_GRAPH_NODE, request, result_type=GraphNodeResult, activity_id=self._activity_id(call),
                summary=f"{'task' if task else 'node'} {node}",
                start_to_close_timeout=timedelta(seconds=options.timeout_s),
                heartbeat_timeout=timedelta(seconds=max(inp.llm.heartbeat_s, 2.0)),
                retry_policy=RetryPolicy(maximum_attempts=options.max_attempts, maximum_interval=timedelta(seconds=10),
                                         non_retryable_error_types=[GRAPH_NODE_FAILED]),
            )
        except (ActivityError, asyncio.CancelledError) as err:
            self._carried_back(request.checkpoints, 0)  # whether it wrote them is unknown: the mirror writes them
            self._call_ended(call, None)
            if isinstance(err, asyncio.CancelledError):
                raise
            if isinstance(err.cause, CancelledError):
                raise asyncio.CancelledError() from err
            cause = err.cause
            because = f" (run as one activity because it {why})" if why else ""
            if isinstance(cause, ApplicationError) and cause.type == GRAPH_NODE_FAILED:
                raise PipelineError(cause.message + because) from None
            raise PipelineError(f"{'@task' if task else 'node'} {node!r} (run as an activity) failed: "
                                f"{failure_text(err)}{because}") from None
        if request.checkpoints:
            self._carried_back(request.checkpoints, result.carried.written if result.carried is not None else 0)
        model = None
        for used in result.calls:
            if used.handed:
                continue  # counted when the node made it as workflow code
            self._count_call(used.prompt_tokens, used.completion_tokens, used.total_tokens, used.cost_usd, used.priced)
            model = used.model
        answer = {"update": result.update, "interrupts": result.interrupts,
                  **({"store_writes": result.store_writes} if result.store_writes else {})}
        self._graph.calls.append({**call.model_dump(exclude={"pipeline"}), **self._graph.place(), **answer,
                                  "seconds": round(result.seconds, 6), **({"why": why} if why else {}),
                                  "model_calls": [c.model_dump() for c in result.calls if not c.handed],
                                  **({"model": model} if model else {})})
        self._call_ended(call, None, done=True)
        return answer

    def record_super_step(self, label: str, new_messages: list[dict[str, Any]], variables: dict[str, Any],
                          details: dict[str, Any]) -> None:
        """A graph's super-step (its nodes' updates applied): one step, with the calls made in it."""
        self._step_messages = list(new_messages)
        self._state.unsent.extend(new_messages)
        self._state.step += 1
        model = next((c["model"] for c in reversed(details["calls"]) if c.get("model")), self._default_model)
        self._record_step(label, variables=variables, pipeline=details, model=model)
        self.hand_over_soon()

    async def graph_interrupted(self, node: str, value: Any) -> Any:
        """A node called LangGraph's interrupt(value): the run waits for a person, as a tool call
        that needs approval does (`rewind pending`); `rewind approve RUN CALL --value JSON` resumes
        the node with that value (true without one), `rewind reject` with false. A fork answers
        it again from the record."""
        inp = self._input
        assert inp is not None and self._graph is not None
        call = self._next_call(node, "interrupt", {"value": value})
        recorded = self._from_record(call)
        if recorded is not None and recorded.message is not None:
            return recorded.message.get("resume")
        request = PendingApproval(run_id=inp.run_id, branch_id=inp.branch_id, step=self._state.step + 1,
                                  tool_call_id=f"interrupt_{call.position}", tool_name=INTERRUPT,
                                  arguments={"node": node, "value": value}, requested_at=workflow.now())
        self._call_started(call)
        self._flush_held()  # a person may take days: the steps so far are written now
        record, _ = await self._gate.wait(request, None)
        resume = (record.value if record.value is not None else True) if record.verdict == "approved" else False
        self._graph.calls.append({**call.model_dump(exclude={"pipeline"}), **self._graph.place(), "resume": resume,
                                  "by": record.by})
        self._call_ended(call, None, done=True)
        return resume
