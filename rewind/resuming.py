"""Resuming runs after a fix: one run (`resume`) or every run a filter selects (`resume_runs`).

One run is checkpoint_bridge.branches.resume: a new revision of its branch from just before
its first failed call, the failed calls run again, every completed call answered from the
record. Many runs are the runs `rewind runs` lists (checkpoint_bridge.views.runs) for
`--failed` (failed, terminated, timed out or cancelled) or `--tool-errors` (a tool call
failed after its retries), each resumed as one run is, a few at a time; a run whose newest
revision is already a resume is skipped, so resuming twice resumes nothing twice.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Literal

from pydantic import BaseModel

from workflows.vocabulary.errors import AlreadyResumedError, NotResumableError, RewindError, UsageError

if TYPE_CHECKING:
    from temporalio.client import Client

    from checkpoint_bridge.branches.resume import ResumePlan, ResumeResult
    from checkpoint_bridge.checkpoints.store import CheckpointStore
    from rewind.settings.config import Settings

Outcome = Literal["resumed", "would resume", "already resumed", "not resumable"]
# Runs listed per page while selecting (`rewind runs --limit`).
_PAGE = 1000


class ResumeSelection(BaseModel):
    """Which runs a bulk resume looks at (the filters of `rewind runs`)."""

    failed: bool = False  # failed, terminated, timed out or cancelled
    tool_errors: bool = False  # a tool call failed after its retries, whatever the run's state
    since: datetime | None = None
    until: datetime | None = None
    agent: str | None = None


class ResumeOutcome(BaseModel):
    run_id: str
    outcome: Outcome
    detail: str  # where it resumed from and what runs again, or why not
    revision: str | None = None  # the new revision (`main.r1`)
    workflow_id: str | None = None
    ended: str | None = None  # with wait: how the new revision ended


class ResumeReport(BaseModel):
    selected: int
    outcomes: list[ResumeOutcome]

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)


def plan_text(plan: ResumePlan) -> str:
    """What a resume does, in one line: from which step, and what runs again."""
    if plan.failed_calls:
        again = ", ".join(plan.failed_calls)
        return f"{plan.revision} {plan.ended}; from step {plan.from_step}, again: {again}"
    if plan.failed_step is not None:
        return f"{plan.revision} failed at step {plan.failed_step}; from step {plan.from_step}, that step again"
    return f"{plan.revision} {plan.ended}; from step {plan.from_step}, its newest"


async def resume(client: Client, settings: Settings, store: CheckpointStore, run_id: str, **options: Any) -> ResumeResult:
    """`rewind resume RUN`: continue the run from just before its first failed call
    (checkpoint_bridge.branches.resume.resume; options: branch, model, system_prompt,
    side_effects, skip_resumed)."""
    from checkpoint_bridge.branches import resume as resuming
    from rewind.client import launcher

    async with launcher(settings) as launch:
        return await resuming.resume(client, launch, store, run_id, **options)


async def select_runs(client: Client, store: CheckpointStore, selection: ResumeSelection) -> list[str]:
    """The ids of the runs `selection` names, newest first, each once."""
    from checkpoint_bridge.views.runs import RunQuery, list_runs

    if selection.failed == selection.tool_errors:
        raise UsageError("say which runs to resume: --failed (failed, terminated, timed out or cancelled) or "
                                "--tool-errors (a tool call failed after its retries), not both, or one RUN")
    queries = ([RunQuery(state=state) for state in ("failed", "cancelled")] if selection.failed
               else [RunQuery(tool_errors=True)])
    found: dict[str, None] = {}
    for query in queries:
        query = query.model_copy(update={"since": selection.since, "until": selection.until,
                                         "agent": selection.agent, "limit": _PAGE})
        while True:
            listed = await list_runs(store, client, query)
            found.update((r.run_id, None) for r in listed.runs)
            if not listed.more or listed.next_until is None:
                break
            query = query.model_copy(update={"until": listed.next_until})
    return list(found)


async def resume_runs(
    client: Client, settings: Settings, store: CheckpointStore, run_ids: list[str], *, dry_run: bool = False,
    concurrency: int = 4, wait: bool = False, on_done: Callable[[ResumeOutcome], None] | None = None,
    **options: Any,
) -> ResumeReport:
    """Resume each of `run_ids` (as `resume` does, skipping runs already resumed), at most
    `concurrency` at a time; `dry_run`: say what would be resumed, start nothing; `wait`: each
    slot is held until its run ends. `on_done` is told each outcome as it comes (a progress bar)."""
    from checkpoint_bridge.branches import resume as resuming
    from rewind.client import launcher

    if concurrency < 1:
        raise UsageError(f"--concurrency {concurrency} must be at least 1")
    gate = asyncio.Semaphore(concurrency)

    async with launcher(settings) as launch:
        async def one(run_id: str) -> ResumeOutcome:
            async with gate:
                outcome = await _one(client, launch, store, run_id, resuming, dry_run, wait, options)
            if on_done is not None:
                on_done(outcome)
            return outcome

        outcomes = await asyncio.gather(*(one(r) for r in run_ids))
    return ResumeReport(selected=len(run_ids), outcomes=list(outcomes))


async def _one(client: Client, launch: Any, store: CheckpointStore, run_id: str, resuming: Any, dry_run: bool,
               wait: bool, options: dict[str, Any]) -> ResumeOutcome:
    try:
        if dry_run:
            plan = await resuming.plan_resume(client, store, run_id, skip_resumed=True,
                                              branch=options.get("branch", "main"))
            return ResumeOutcome(run_id=run_id, outcome="would resume", detail=plan_text(plan))
        result = await resuming.resume(client, launch, store, run_id, skip_resumed=True, **options)
    except AlreadyResumedError as exc:
        return ResumeOutcome(run_id=run_id, outcome="already resumed", detail=str(exc))
    except RewindError as exc:  # not resumable, or refused: the reason, and the others go on
        kind = "not resumable" if isinstance(exc, NotResumableError) else type(exc).__name__
        return ResumeOutcome(run_id=run_id, outcome="not resumable",
                             detail=str(exc) if kind == "not resumable" else f"{kind}: {exc}")
    outcome = ResumeOutcome(run_id=run_id, outcome="resumed", detail=plan_text(result.plan),
                            revision=result.continued.storage_branch, workflow_id=result.continued.workflow_id)
    if wait:
        outcome.ended = await ended(result)
    return outcome


async def ended(result: ResumeResult) -> str:
    """How a resumed revision ended (waits for it): completed, failed, or its paused state."""
    from temporalio.client import WorkflowFailureError

    from rewind.client import wait_for_outcome

    try:
        outcome = await wait_for_outcome(result.continued.handle)
    except WorkflowFailureError as exc:
        return f"failed: {exc.cause or exc}"
    return outcome.status.state if outcome.status is not None else "completed"


def report_text(report: ResumeReport) -> str:
    """The closing table: one line per run, then the counts."""
    if not report.outcomes:
        return "no runs to resume"
    header = ("RUN", "OUTCOME", "DETAIL")
    rows = []
    for o in report.outcomes:
        detail = o.detail if o.revision is None else f"{o.revision}: {o.detail}"
        if o.ended:
            detail += f" -> {o.ended}"
        rows.append((o.run_id, o.outcome, detail))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(2)]
    lines = ["  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2]]).rstrip() for r in [header, *rows]]
    counts = ", ".join(f"{n} {name}" for name in ("resumed", "would resume", "already resumed", "not resumable")
                       if (n := report.count(name)))  # type: ignore[arg-type]
    lines.append(counts)
    return "\n".join(lines)


__all__ = ["resume", "resume_runs", "select_runs", "ResumeSelection", "ResumeOutcome", "ResumeReport", "report_text",
           "plan_text"]
