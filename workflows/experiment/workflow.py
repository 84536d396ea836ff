"""An experiment: one checkpoint forked N ways, K times each, run side by side.

Durable like a run: the experiment is a workflow, so a crash of the CLI that
started it or of any worker loses nothing, and `rewind experiment status` works
from any machine. Each branch is an ordinary forked AgentWorkflow, started by
an activity that is idempotent (the branch's workflow id is fixed, so a retry
after a crash finds the branch it already started instead of forking twice),
and watched by an activity that heartbeats until the branch ends or pauses.

The budget. `max_cost_usd` is shared: every branch not yet finished may spend
up to an equal share of what the finished ones left, enforced by the branch's
own run budget (it pauses before a step that would pass its cap, as any run
does). When a branch finishes under its cap, the others' caps grow (a signal to
each, taken at once by a running branch, resuming a paused one). A pending
branch is not started while its share would not pay for one step (the mean
step cost seen so far). When every branch left is paused or cannot start, the
experiment waits (state budget_exceeded) for `rewind experiment continue`.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from workflows.vocabulary.contracts import RunLimits
    from workflows.vocabulary.experiments import (
        FINISHED,
        BranchOutcome,
        ExperimentBranch,
        ExperimentInput,
        ExperimentStatus,
        ScoreInput,
        ScoreRequest,
        ScoreResult,
        StartBranchRequest,
        StartedBranch,
        WatchBranchRequest,
        branch_name,
        score_workflow_id,
    )
    from workflows.vocabulary.ids import checkpoint_id
    from workflows.vocabulary.tool_calls import failure_text
    from workflows.vocabulary.wire import (
        EXPERIMENT_STATUS_QUERY,
        EXPERIMENT_WORKFLOW,
        RAISE_EXPERIMENT_BUDGET_SIGNAL,
        RAISE_LIMITS_SIGNAL,
        SCORE_BRANCH,
        SCORE_WORKFLOW,
        SCORER_UNUSABLE,
        START_EXPERIMENT_BRANCH,
        WATCH_EXPERIMENT_BRANCH,
    )

# A branch may run for days (it can wait for approvals): the watch heartbeats.
_WATCH_TIMEOUT = timedelta(days=30)
_WATCH_HEARTBEAT = timedelta(seconds=10)


@workflow.defn(name=EXPERIMENT_WORKFLOW)
class ExperimentWorkflow:
    def __init__(self) -> None:
        self._status: ExperimentStatus | None = None
        self._new_budget: float | None = None
        self._limits: dict[str, RunLimits] = {}
        self._watching: dict[str, asyncio.Future[BranchOutcome]] = {}

    @workflow.query(name=EXPERIMENT_STATUS_QUERY)
    def status(self) -> ExperimentStatus:
        if self._status is None:
            raise ValueError("the experiment has not started its first workflow task yet")
        return self._status

    @workflow.signal(name=RAISE_EXPERIMENT_BUDGET_SIGNAL)
    def raise_budget(self, max_cost_usd: float) -> None:
        self._new_budget = max_cost_usd

    @workflow.run
    async def run(self, inp: ExperimentInput) -> ExperimentStatus:
        st = self._status = ExperimentStatus(
            experiment_id=inp.experiment_id, run_id=inp.run_id, from_branch=inp.from_branch, step=inp.step,
            max_cost_usd=inp.max_cost_usd, scorer=inp.scorer, variants=inp.variants,
            branches=[ExperimentBranch(branch=branch_name(inp.experiment_id, v.name, k), variant=v.name, repetition=k)
                      for v in inp.variants for k in range(1, inp.repeat + 1)],
        )
        variants = {v.name: v for v in inp.variants}
        limit = inp.concurrency or len(st.branches)
        while True:
            if self._new_budget is not None:
                st.max_cost_usd, self._new_budget = self._new_budget, None
                await self._share_budget()
            for b in st.branches:
                if b.state == "pending" and len(self._watching) < limit and self._affordable():
                    await self._start(inp, b, variants[b.variant])
            if all(b.state in FINISHED for b in st.branches):
                break
            if not self._watching:
                # Every branch left is paused for its share, or cannot pay for a step.
                st.state = "budget_exceeded"
                await workflow.wait_condition(lambda: self._new_budget is not None)
                st.state = "running"
                continue
            await workflow.wait_condition(
                lambda: any(f.done() for f in self._watching.values()) or self._new_budget is not None)
            for b in st.branches:
                future = self._watching.get(b.branch)
                if future is not None and future.done():
                    del self._watching[b.branch]
                    self._took(b, future.result())
            await self._share_budget()
        if inp.scorer is not None:
            st.state = "scoring"
            await self._score(inp.scorer)
        st.state = "completed"
        return st

    # -- branches ---------------------------------------------------------------
    async def _start(self, inp: ExperimentInput, b: ExperimentBranch, variant: object) -> None:
        b.max_cost_usd = self._share()
        started: StartedBranch = await workflow.execute_activity(
            START_EXPERIMENT_BRANCH,
            StartBranchRequest(run_id=inp.run_id, from_branch=inp.from_branch, step=inp.step, branch=b.branch,
                               variant=variant, repetition=b.repetition, max_cost_usd=b.max_cost_usd,
                               max_steps=inp.max_steps, experiment_id=inp.experiment_id,
                               side_effects=inp.side_effects),
            result_type=StartedBranch,
            summary=f"fork {b.branch} from step {inp.step} of {inp.from_branch}",
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        )
        b.state, b.workflow_id, b.started_at = "running", started.workflow_id, started.started_at
        self._limits[b.branch] = started.limits
        self._watch(b)

    def _watch(self, b: ExperimentBranch) -> None:
        assert b.workflow_id is not None
        self._watching[b.branch] = asyncio.ensure_future(workflow.execute_activity(
            WATCH_EXPERIMENT_BRANCH, WatchBranchRequest(workflow_id=b.workflow_id, max_cost_usd=b.max_cost_usd),
            result_type=BranchOutcome, summary=f"watch {b.branch}",
            start_to_close_timeout=_WATCH_TIMEOUT, heartbeat_timeout=_WATCH_HEARTBEAT,
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
        ))

    def _took(self, b: ExperimentBranch, outcome: BranchOutcome) -> None:
        b.state, b.cost_usd, b.final_step = outcome.state, outcome.cost_usd, outcome.step
        if outcome.state in FINISHED:
            b.ended_at = outcome.ended_at or workflow.now()
        st = self._status
        assert st is not None
        st.spent_usd = sum(x.cost_usd for x in st.branches)

    # -- the shared budget ------------------------------------------------------
    def _share(self) -> float | None:
        """The cap of each branch not finished: an equal part of what finished ones left."""
        st = self._status
        assert st is not None
        if st.max_cost_usd is None:
            return None
        open_ = [b for b in st.branches if b.state not in FINISHED]
        left = st.max_cost_usd - sum(b.cost_usd for b in st.branches if b.state in FINISHED)
        return max(left, 0.0) / max(len(open_), 1)

    def _affordable(self) -> bool:
        """Whether a new branch's share pays for one step (the mean step cost so far)."""
        st = self._status
        assert st is not None
        share = self._share()
        if share is None:
            return True
        seen = [b for b in st.branches if b.final_step is not None and b.cost_usd > 0]
        if not seen:
            return share > 0
        steps = sum(max(b.final_step - st.step, 1) for b in seen)  # type: ignore[operator]
        return share >= sum(b.cost_usd for b in seen) / steps

    async def _share_budget(self) -> None:
        """Give every branch left its share when it grew: running ones take it at once,
        paused ones go on (and are watched again)."""
        share = self._share()
        st = self._status
        assert st is not None
        if share is None:
            return
        for b in st.branches:
            if b.state not in ("running", "budget_exceeded") or b.workflow_id is None:
                continue
            if b.max_cost_usd is not None and share <= b.max_cost_usd:
                continue
            b.max_cost_usd = share
            limits = self._limits[b.branch].model_copy(update={"max_cost_usd": share})
            self._limits[b.branch] = limits
            try:
                await workflow.get_external_workflow_handle(b.workflow_id).signal(RAISE_LIMITS_SIGNAL, limits)
            except Exception:  # noqa: BLE001 - it ended meanwhile: its watch reports how
                continue
            if b.state == "budget_exceeded":
                b.state = "running"
                self._watch(b)
            elif b.branch in self._watching:
                # The watch compares the cap: restart it so a pause under the old cap is not final.
                self._watching[b.branch].cancel()
                self._watch(b)

    # -- scores -----------------------------------------------------------------
    async def _score(self, scorer: str) -> None:
        st = self._status
        assert st is not None
        finals = {b.branch: checkpoint_id(st.run_id, b.branch, b.final_step)
                  for b in st.branches if b.final_step is not None}
        try:
            scores: dict[str, ScoreResult] = await workflow.execute_child_workflow(
                SCORE_WORKFLOW, ScoreInput(experiment_id=st.experiment_id, scorer=scorer, checkpoints=finals),
                id=score_workflow_id(st.experiment_id, scorer), result_type=dict[str, ScoreResult],
            )
        except ChildWorkflowError as err:
            scores = {name: ScoreResult(error=f"scoring failed: {failure_text(err)}") for name in finals}
        for b in st.branches:
            found = scores.get(b.branch)
            if found is not None:
                b.score, b.score_error = found.score, found.error


@workflow.defn(name=SCORE_WORKFLOW)
class ScoreWorkflow:
    """A scorer over branches, each as a retried activity; one that keeps failing is
    reported for its branch, the others still count."""

    @workflow.run
    async def run(self, inp: ScoreInput) -> dict[str, ScoreResult]:
        async def one(checkpoint: str) -> ScoreResult:
            try:
                return await workflow.execute_activity(
                    SCORE_BRANCH, ScoreRequest(scorer=inp.scorer, checkpoint_id=checkpoint), result_type=ScoreResult,
                    summary=f"score {checkpoint} with {inp.scorer}",
                    start_to_close_timeout=timedelta(minutes=10),
                    retry_policy=RetryPolicy(maximum_attempts=3, initial_interval=timedelta(milliseconds=500),
                                             non_retryable_error_types=[SCORER_UNUSABLE]),
                )
            except ActivityError as err:
                return ScoreResult(error=failure_text(err))

        names = list(inp.checkpoints)
        results = await asyncio.gather(*(one(inp.checkpoints[n]) for n in names))
        return dict(zip(names, results))


__all__ = ["ExperimentWorkflow", "ScoreWorkflow"]
