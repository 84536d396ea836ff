"""What PipelineWorkflow does for a LangGraph graph's run (workflows/graph/runner.py runs the graph):
a node's chat model call as one of the run's model calls, a super-step as a step, interrupt()
as a wait for a person, and where a fork's record and its `--set`s land among the super-steps.
A mixin of PipelineWorkflow (workflow code: deterministic, no I/O)."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.loop.approvals import INTERRUPT
    from workflows.vocabulary.code_runs import PipelineDescription
    from workflows.vocabulary.tool_calls import with_system
    from workflows.vocabulary.status import PendingApproval


class GraphRunCalls:
    """PipelineWorkflow's side of a graph run (its `_graph` is the GraphRunner)."""

    @property
    def run_id(self) -> str:
        assert self._input is not None
        return self._input.run_id

    def _marks(self, described: PipelineDescription) -> dict[int, Any]:
        return {m.step: m for m in described.record.supersteps} if described.record is not None else {}

    def _fork_superstep_of(self, described: PipelineDescription) -> int:
        """The super-step a fork's record ends at (-1: a run started afresh; 0: forked at its start)."""
        if self._fork_step < 0:
            return -1
        marks = [m for m in self._marks(described).values() if m.step <= self._fork_step]
        return max((m.superstep for m in marks), default=0)

    def _graph_sets(self, described: PipelineDescription) -> list[tuple[int, str, dict[str, Any]]]:
        """Each `--set` of the lineage as (super-step, node, values): merged into the update of the
        last node of the super-step its fork point ends."""
        inp = self._input
        assert inp is not None and inp.pipeline is not None
        marks = self._marks(described)
        out = []
        for found in inp.pipeline.state_sets:
            at = [m for m in marks.values() if m.step <= found.after_step]
            if at:
                mark = max(at, key=lambda m: m.step)
                out.append((mark.superstep, mark.nodes[-1], dict(found.values)))
        return out

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
            return recorded.message, {}, chosen
        await self._within_budget()
        response = await self.ask_model(call, conversation, schemas, chosen, payload.get("temperature"),
                                        response_format, f"model call of node {node!r}")
        self._record_call(call, [response.message], [], model_view=response.model_view, model=chosen,
                          node=node, response=response)
        usage = response.usage
        return response.message, {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                                  "total_tokens": usage.total_tokens}, chosen

    def record_super_step(self, label: str, new_messages: list[dict[str, Any]], variables: dict[str, Any],
                          details: dict[str, Any]) -> None:
        """A graph's super-step (its nodes' updates applied): one step, with the calls made in it."""
        self._step_messages = list(new_messages)
        self._state.unsent.extend(new_messages)
        self._state.step += 1
        model = next((c["model"] for c in reversed(details["calls"]) if c.get("model")), self._default_model)
        self._record_step(label, variables=variables, pipeline=details, model=model)

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
        record, _ = await self._gate.wait(request, None)
        resume = (record.value if record.value is not None else True) if record.verdict == "approved" else False
        self._graph.calls.append({**call.model_dump(exclude={"pipeline"}), "node": node, "resume": resume,
                                  "by": record.by})
        self._call_ended(call, None, done=True)
        return resume
