"""Sub-agent calls: a tool call answered by a whole agent run (workflow code: deterministic).

A model that calls a sub-agent (declared with `subagent(...)`) gets the sub-agent's
final answer as the call's result. The sub-agent runs as a child workflow of its
caller, the same `AgentWorkflow` loop with its own prompt, tools and model, as a
branch of the caller's run (`main.s3-call_1`, workflows/vocabulary/ids.py), so:

- a worker crash inside it resumes it at its last completed step, and nothing
  of the caller or of the other sub-agents runs again (each is its own history);
- the parallel calls of one step run at once;
- its checkpoints are the run's, under that branch; the caller's tool record of
  the call names the branch, how it ended and what it cost;
- a failure (model 4xx, a budget, `max_steps` used up) is the call's error and
  the caller's model decides what to do; the other calls' results stand;
- its tokens and cost are added to the caller's ledger, so a run's totals are its
  whole tree's; the caller's budget caps the tree: each sub-agent call of a step
  gets an equal share of what is left, and one that uses it up pauses until
  `rewind continue` raises the caller's budget, whose raise the caller hands on;
- cancelling the caller cancels its sub-agents (Temporal's child cancellation),
  and a sub-agent tells its caller when it waits for a person or for budget, so
  the caller's status (and `rewind pending`) says which call waits and why.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError, CancelledError, ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from workflows.vocabulary.contracts import (
        AgentInput,
        AgentResult,
        AgentSpec,
        AgentStatus,
        Ledger,
        LineageEffect,
        PipelineRun,
        RunLimits,
        SubagentCall,
        SubagentCaller,
        SubagentNotice,
        SubagentState,
        ToolSpec,
    )
    from workflows.vocabulary.ids import subagent_branch, workflow_id_for
    from workflows.loop.run_index import BRANCH_KEY, MODEL_KEY, RUN_ID_KEY, STATE_KEY
    from workflows.vocabulary.summaries import run_summary
    from workflows.vocabulary.tool_calls import failure_text
    from workflows.vocabulary.wire import AGENT_RUN_FAILED, AGENT_WORKFLOW, PIPELINE_WORKFLOW, RAISE_LIMITS_SIGNAL

# What a refused call says (a tool error the model can act on).
TOO_DEEP = "sub-agent depth limit"


def task_text(agent: AgentSpec, arguments: dict[str, Any]) -> str:
    """The sub-agent's user message, from the call's (validated) arguments."""
    if agent.task_only:
        return str(arguments.get("task", ""))
    if agent.task_template is not None:
        return agent.task_template.format(**arguments)
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def task_problem(spec: ToolSpec, arguments: dict[str, Any]) -> str | None:
    """Why `{"task": ...}` arguments cannot start the sub-agent (None: they can). Checked in
    the workflow: a task-only sub-agent needs no worker to validate its one string."""
    extra = sorted(set(arguments) - {"task"})
    if extra:
        return f"unknown argument(s) {', '.join(extra)}; {spec.name} takes one argument, task (a string)"
    task = arguments.get("task")
    if not isinstance(task, str) or not task.strip():
        return f"{spec.name} needs task: a non-empty string saying what the sub-agent should do"
    limit = ((spec.parameters.get("properties") or {}).get("task") or {}).get("maxLength")
    if isinstance(limit, int) and len(task) > limit:
        return f"task is {len(task)} characters long; {spec.name} takes at most {limit}"
    return None


@dataclass
class _Child:
    handle: Any
    limits: RunLimits
    state: SubagentState


class SubagentCalls:
    """The sub-agent calls of one run: started, waited for, told of raised budgets."""

    def __init__(
        self, inp: AgentInput, lineage: list[LineageEffect],
        budget_left: Callable[[], tuple[float | None, int | None]], on_change: Callable[[], None],
    ) -> None:
        self._inp = inp
        self._lineage = lineage
        self._budget_left = budget_left  # (USD, tokens) the run may still spend; None: no limit
        self._on_change = on_change
        self._children: dict[str, _Child] = {}
        self._shares = 1  # sub-agent calls of the step in flight, which split the budget left
        self.states: list[SubagentState] = []

    # -- the step ------------------------------------------------------------------
    def begin_step(self, count: int) -> None:
        """A new step with `count` sub-agent calls: they share what the budget has left."""
        self._shares = max(count, 1)
        self.states = []

    def waiting(self) -> SubagentState | None:
        """A sub-agent of this step that waits (for approval, for budget): the caller says so."""
        return next((c.state for c in self._children.values()
                     if c.state.state in ("waiting_for_approval", "budget_exceeded")), None)

    # -- one call --------------------------------------------------------------------
    async def run(
        self, step: int, call_id: str, spec: ToolSpec, task: str, *, override: dict[str, str] | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> tuple[SubagentCall, str | None, str | None, Ledger]:
        """Run the sub-agent for one call: (its record, its answer, or why it has none, what it spent).
        A pipeline's child pipeline (`ctx.pipeline`) runs the same way, on `arguments`."""
        agent = spec.agent
        assert agent is not None
        inp = self._inp
        branch = subagent_branch(inp.branch_id, step, call_id)
        workflow_id = workflow_id_for(inp.run_id, branch)
        chosen = {**inp.subagent_overrides.get(agent.name, {}), **(override or {})}
        model = chosen.get("model") or agent.model or inp.model
        record = SubagentCall(agent=agent.name, branch_id=branch, workflow_id=workflow_id, model=model)
        if inp.depth + 1 > inp.max_agent_depth:
            record.state, record.reason = "refused", (
                f"{TOO_DEEP}: {agent.name} would run at depth {inp.depth + 1}, and sub-agents nest at most "
                f"{inp.max_agent_depth} deep; answer without it")
            return record, None, record.reason, Ledger()
        limits = self._limits(agent)
        child_input = AgentInput(
            run_id=inp.run_id, branch_id=branch, task=task,
            system_prompt=chosen.get("system_prompt") or agent.system_prompt,
            tools=list(agent.tools), model=model, limits=limits, llm=inp.llm,
            tool_wait_s=inp.tool_wait_s, mirror_drain_s=inp.mirror_drain_s,
            history_limit_bytes=inp.history_limit_bytes, fast=inp.fast, fast_record_s=inp.fast_record_s,
            indexed=inp.indexed, agent=agent.name, depth=inp.depth + 1, max_agent_depth=inp.max_agent_depth,
            called_by=SubagentCaller(branch_id=inp.branch_id, step=step, tool_call_id=call_id, tool_name=spec.name,
                                     workflow_id=workflow.info().workflow_id),
            subagent_overrides=inp.subagent_overrides, lineage_effects=list(self._lineage),
            side_effects=inp.side_effects, pipeline=_child_pipeline(inp, agent, arguments),
        )
        state = SubagentState(tool_call_id=call_id, agent=agent.name, branch_id=branch, state="running")
        self.states.append(state)
        self._on_change()
        try:
            handle = await workflow.start_child_workflow(
                PIPELINE_WORKFLOW if agent.pipeline else AGENT_WORKFLOW, child_input, id=workflow_id, result_type=AgentResult,
                task_queue=workflow.info().task_queue,
                execution_timeout=timedelta(seconds=agent.timeout_s) if agent.timeout_s else None,
                task_timeout=workflow.info().task_timeout if inp.fast else None,
                memo={"run_id": inp.run_id, "branch_id": branch, "model": model, "task": task[:500],
                      "called_by": f"{inp.run_id}:{inp.branch_id}:{step}", "tool_call_id": call_id},
                static_summary=run_summary(inp.run_id, branch, task),
                search_attributes=_attributes(child_input) if inp.indexed else None,
            )
        except WorkflowAlreadyStartedError:
            # Its branch id is taken (a run of that id existed before): say so, do not wait on another run.
            state.state = record.state = "refused"
            record.reason = state.reason = f"a run of branch {branch} exists already; it cannot answer this call"
            self._on_change()
            return record, None, f"sub-agent {agent.name} refused: {record.reason}", Ledger()
        self._children[call_id] = _Child(handle, limits, state)
        try:
            result: AgentResult = await handle
        except ChildWorkflowError as err:
            if isinstance(err.cause, CancelledError):
                raise  # the caller is being stopped: so are its sub-agents
            record.state, record.reason = "failed", failure_text(err)
            spent = _spent_of(err)
            record.steps = spent[1]
            record.ledger = spent[0]
        else:
            status = result.status
            record.steps, record.ledger = status.step, status.ledger
            if status.state == "completed":
                record.state = "completed"
            else:
                record.state = "budget_exceeded" if status.state == "budget_exceeded" else "failed"
                record.reason = (f"stopped without a final answer: {status.budget_reason}" if status.budget_reason
                                 else f"ended {status.state} without a final answer")
        finally:
            self._children.pop(call_id, None)
        state.state, state.reason = record.state, record.reason
        self._on_change()
        answer = result.final_answer or "" if record.state == "completed" else None
        what = "pipeline" if agent.pipeline else "sub-agent"
        error = None if record.state == "completed" else f"{what} {agent.name} {record.state}: {record.reason}"
        return record, answer, error, record.ledger or Ledger()

    def _limits(self, agent: AgentSpec) -> RunLimits:
        """The sub-agent's budget: its own steps, and its share of what the caller has left."""
        cost_left, tokens_left = self._budget_left()
        share_cost = None if cost_left is None else max(cost_left, 0.0) / self._shares
        share_tokens = None if tokens_left is None else max(tokens_left, 0) // self._shares
        return RunLimits(
            max_steps=agent.max_steps,
            # A share of nothing still lets the sub-agent start: it pauses before paying anything.
            max_cost_usd=share_cost if share_cost is None or share_cost > 0 else 1e-9,
            max_tokens=share_tokens if share_tokens is None or share_tokens > 0 else 1,
            budget_pause_s=self._inp.limits.budget_pause_s,
        )

    # -- what the sub-agents say, and what the caller tells them -------------------
    def notice(self, notice: SubagentNotice) -> None:
        """A sub-agent waits (for approval, for budget) or goes on again."""
        child = self._children.get(notice.tool_call_id)
        if child is None:
            return  # already done: its result says how it ended
        child.state.state, child.state.reason = notice.state, notice.reason
        self._on_change()

    async def raise_limits(self, old: RunLimits, new: RunLimits) -> None:
        """The caller's budget was raised: the sub-agents paused for theirs get the raise, shared."""
        paused = [c for c in self._children.values() if c.state.state == "budget_exceeded"]
        if not paused:
            return
        for child in paused:
            child.limits = child.limits.model_copy(update={
                "max_cost_usd": _raised(child.limits.max_cost_usd, old.max_cost_usd, new.max_cost_usd, len(paused)),
                "max_tokens": _raised(child.limits.max_tokens, old.max_tokens, new.max_tokens, len(paused)),
            })
            # Going on from here (it says so again if the raise is not enough): the caller's
            # status stops showing the pause at once, not after the sub-agents' next word.
            child.state.state, child.state.reason = "running", None
        self._on_change()
        await asyncio.gather(*(c.handle.signal(RAISE_LIMITS_SIGNAL, c.limits) for c in paused))


def _child_pipeline(inp: AgentInput, agent: AgentSpec, arguments: dict[str, Any] | None) -> PipelineRun | None:
    """A child pipeline's run: its arguments, and the caller's overrides by label (a fork's
    `--prompt LABEL=` / `--model LABEL=` reach the labels of the pipelines it calls too)."""
    if not agent.pipeline:
        return None
    caller = inp.pipeline
    return PipelineRun(name=agent.name, arguments=dict(arguments or {}),
                       prompts=dict(caller.prompts) if caller is not None else {},
                       models=dict(caller.models) if caller is not None else {})


def _raised(mine: Any, old: Any, new: Any, shares: int) -> Any:
    if new is None:
        return None  # the caller's limit is gone: so is the share's
    if mine is None or old is None:
        return mine
    raise_by = (new - old) / shares
    return mine + (int(raise_by) if isinstance(mine, int) else raise_by) if raise_by > 0 else mine


def _spent_of(err: ChildWorkflowError) -> tuple[Ledger | None, int]:
    """What a failed sub-agent spent and how many steps it took (its failure carries its status)."""
    cause = err.cause
    if isinstance(cause, ApplicationError) and cause.type == AGENT_RUN_FAILED and cause.details:
        try:
            status = AgentStatus.model_validate(cause.details[0])
        except Exception:  # noqa: BLE001 - a failure from an older worker: nothing to add
            return None, 0
        return status.ledger, status.step
    return None, 0


def _attributes(inp: AgentInput) -> TypedSearchAttributes:
    return TypedSearchAttributes([
        SearchAttributePair(RUN_ID_KEY, inp.run_id), SearchAttributePair(BRANCH_KEY, inp.branch_id),
        SearchAttributePair(MODEL_KEY, inp.model), SearchAttributePair(STATE_KEY, "running"),
    ])


__all__ = ["SubagentCalls", "task_text", "task_problem", "TOO_DEEP"]
