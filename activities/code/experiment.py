"""The activities of an experiment (workflows/experiment/workflow.py): fork one branch,
watch it, score it.

Forking is `checkpoint_bridge.branches.branching.fork`, the same as `rewind fork`: the
branch is seeded from the checkpoint, so no call before the fork point runs
again. A retry of the start (a worker died after the fork started) finds the
branch's workflow by its fixed id and returns it, so each branch starts once.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import math
import os
import sys
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.branches.branching import Launcher, fork
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.contracts import AgentInput, AgentStatus
from workflows.vocabulary.experiments import (
    BranchOutcome,
    ScoreRequest,
    ScoreResult,
    StartBranchRequest,
    StartedBranch,
    WatchBranchRequest,
)
from workflows.vocabulary.ids import workflow_id_for
from workflows.vocabulary.wire import SCORE_BRANCH, SCORER_UNUSABLE, START_EXPERIMENT_BRANCH, STATUS_QUERY, WATCH_EXPERIMENT_BRANCH

_POLL_S = 1.0


class ExperimentActivities:
    def __init__(self, store: CheckpointStore, launcher: Launcher) -> None:
        self._store = store
        self._launcher = launcher

    @activity.defn(name=START_EXPERIMENT_BRANCH)
    async def start_branch(self, req: StartBranchRequest) -> StartedBranch:
        client = activity.client()
        workflow_id = workflow_id_for(req.run_id, req.branch)
        started = await _started(client, workflow_id)
        if started is None:
            v = req.variant
            limits = {k: val for k, val in {"max_cost_usd": req.max_cost_usd, "max_steps": req.max_steps}.items()
                      if val is not None}
            await fork(
                client, self._launcher, self._store, req.run_id, req.step, branch=req.branch,
                from_branch=req.from_branch, system_prompt=v.system_prompt, model=v.model, tools=v.tools,
                variables=v.variables or None, limit_overrides=limits or None,
                llm_overrides=v.llm_overrides(req.repetition) or None,
                subagent_overrides=v.subagents or None, side_effects=req.side_effects,
                prompts=v.prompts or None, models=v.models or None,
            )
            started = await _started(client, workflow_id)
            assert started is not None, f"the fork {workflow_id} was started but cannot be described"
        return started

    @activity.defn(name=WATCH_EXPERIMENT_BRANCH)
    async def watch_branch(self, req: WatchBranchRequest) -> BranchOutcome:
        """Until the branch ends, or pauses for its budget under the cap it was given."""
        handle = activity.client().get_workflow_handle(req.workflow_id)
        while True:
            activity.heartbeat()
            try:
                desc = await handle.describe()
                status = await handle.query(STATUS_QUERY, result_type=AgentStatus)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise ApplicationError(f"the experiment's branch {req.workflow_id} is gone from Temporal",
                                           non_retryable=True) from exc
                status = None  # no worker answers the query yet: ask again
            if status is not None:
                closed = desc.status != WorkflowExecutionStatus.RUNNING
                ended = desc.close_time if closed else None
                cap_taken = req.max_cost_usd is None or (status.limits.max_cost_usd is not None and math.isclose(
                    status.limits.max_cost_usd, req.max_cost_usd, rel_tol=1e-9))
                # A finished run counts once its workflow has closed (its last checkpoints are mirrored).
                if (status.state in ("completed", "failed", "cancelled") and closed) or (
                        status.state == "budget_exceeded" and cap_taken):
                    return BranchOutcome(state=status.state, step=status.step, cost_usd=status.branch_ledger.cost_usd,
                                         ended_at=ended)
                if closed:  # ended without saying so (terminated): stopped
                    return BranchOutcome(state="cancelled", step=status.step, cost_usd=status.branch_ledger.cost_usd,
                                         ended_at=ended)
            await asyncio.sleep(_POLL_S)

    @activity.defn(name=SCORE_BRANCH)
    async def score_branch(self, req: ScoreRequest) -> ScoreResult:
        scorer = _load_scorer(req.scorer)
        checkpoint = await self._store.load(req.checkpoint_id)
        value = scorer(checkpoint)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ApplicationError(
                f"scorer {req.scorer} returned {type(value).__name__}; return a number or a label (str)",
                type=SCORER_UNUSABLE, non_retryable=True)
        if isinstance(value, float) and not math.isfinite(value):
            raise ApplicationError(f"scorer {req.scorer} returned {value}; return a finite number",
                                   type=SCORER_UNUSABLE, non_retryable=True)
        return ScoreResult(score=value)


async def _started(client: Client, workflow_id: str) -> StartedBranch | None:
    """The branch's workflow if it exists (its first run's input holds its limits)."""
    from checkpoint_bridge.branches.branching import source_input

    handle = client.get_workflow_handle(workflow_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    inp: AgentInput | None = await source_input(client, workflow_id)
    assert inp is not None
    return StartedBranch(workflow_id=workflow_id, started_at=desc.start_time, limits=inp.limits)


def _load_scorer(spec: str) -> Any:
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ApplicationError(f"scorer {spec!r} is not module:function", type=SCORER_UNUSABLE, non_retryable=True)
    if os.getcwd() not in sys.path:  # the worker's folder, as for tool modules
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ApplicationError(f"scorer module {module_name!r} cannot be imported on this worker: {exc}",
                               type=SCORER_UNUSABLE, non_retryable=True) from exc
    found = getattr(module, name, None)
    if not callable(found):
        raise ApplicationError(f"{module_name} has no function {name!r}", type=SCORER_UNUSABLE, non_retryable=True)
    return found


__all__ = ["ExperimentActivities"]
