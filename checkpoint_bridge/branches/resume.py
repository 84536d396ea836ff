"""`rewind resume`: continue a run from where it broke, repeating nothing that succeeded.

A run broke when it failed (a model's 4xx, an outage), was cancelled, terminated or
timed out, or completed with tool calls that failed after their retries (the model got
the error). Once the cause is fixed (a tool's bug, a provider back), the branch gets a
new revision, as a rollback makes one (lineage.py: `main.r1`, `main.r2`, ...), from
just before the first failed call:

    the first failed call at step K   the revision starts from checkpoint K-1 and answers
                                      step K's tool calls again without a new model call
                                      (a RedoPlan, as `rewind redo` does): the failed calls
                                      run again, the others keep their recorded answers
    a failed step F (no such call     it starts from the last good checkpoint, F-1: the
    before it)                        step is made again
    cancelled, terminated, timed out  it starts from the branch's newest checkpoint

Every call the branch had completed, before the failure and after it, is answered
from the record when it is asked for again with the same arguments: the revision's
tool-result cache holds every read-only result of the branch's lineage up to its
newest step (not only up to the start point), and its side effects are those of the
whole line, reused (`--side-effects reuse`) instead of caused again.

The new revision's workflow carries in its memo which revision it resumed
(`resumed_from`, workflows/vocabulary/wire.py), so a bulk resume run twice does not resume a
run twice (`skip_resumed`).

A pipeline's run is resumed the same way, from the same point, without a redo plan: its
code runs again against its record up to the start point (as a fork's does), so the
failed call is the first one made live; read-only calls after it are answered from the
seeded cache and effects are reused, but its model calls after the failed call are made
again (a pipeline's record answers calls up to its start point only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from checkpoint_bridge.branches.branching import (
    ForkResult,
    Launcher,
    input_for,
    start_from,
    check_side_effects,
    checkpoint_at,
    lineage_effects_of,
    source_of,
    subagent_effects,
    tool_cache_of,
    with_pipeline_overrides,
)
from checkpoint_bridge.checkpoints.lineage import current_name, lineage, revision_branch, revisions, split_revision
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary, ToolCallRecord
from checkpoint_bridge.projection.projector import log_of
from checkpoint_bridge.temporal.runs import branch_workflows
from workflows.vocabulary.contracts import Ledger, LoopState, RedoPlan
from workflows.vocabulary.errors import AlreadyResumedError, NotResumableError, RunNotFoundError, UsageError
from workflows.vocabulary.ids import parse_subagent_branch, validate_id
from workflows.vocabulary.tool_calls import is_failed_after_retries
from workflows.vocabulary.wire import MEMO_RESUMED

_ENDED = {
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "cancelled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.TIMED_OUT: "timed out",
    WorkflowExecutionStatus.COMPLETED: "completed",
}


@dataclass
class ResumePlan:
    """Where a resume starts and what runs again (what `--dry-run` prints)."""

    run_id: str
    branch: str  # the branch resumed (`main`)
    revision: str  # its revision that broke (`main.r0`, `main.r1`, ...)
    ended: str  # how that revision ended: failed, cancelled, terminated, timed out, completed
    from_step: int  # the checkpoint the new revision starts from
    failed_calls: list[str] = field(default_factory=list)  # `step K: TOOL(ARGS)` of the calls that run again
    failed_step: int | None = None  # a failed step made again (no failed call before it)


@dataclass
class ResumeResult:
    plan: ResumePlan
    continued: ForkResult
    invalidated: list[str]  # checkpoints after the start point, marked invalidated (kept)


@dataclass
class _Found:
    """A plan with what starting it needs."""

    plan: ResumePlan
    start: CheckpointSummary
    head: CheckpointSummary
    redo_at: CheckpointSummary | None
    workflows: list[tuple[str, Any]]
    after: list[str]  # live checkpoints after the start point


def _failed(record: ToolCallRecord | dict[str, Any]) -> bool:
    if isinstance(record, ToolCallRecord):
        record = {"tool_name": record.tool_name, "error": record.error}
    return is_failed_after_retries(record)


def _call_text(record: dict[str, Any], step: int) -> str:
    import json

    args = json.dumps(record.get("tool_input") or {}, sort_keys=True)
    return f"step {step}: {record.get('tool_name')}({args[:60]})"


async def _find(client: Client, store: CheckpointStore, run_id: str, branch: str, skip_resumed: bool) -> _Found:
    validate_id("run", run_id)
    validate_id("branch", branch)
    if parse_subagent_branch(split_revision(branch)[0]) is not None:
        raise UsageError(f"branch {branch!r} is a sub-agent's run, which its caller waits for; resume the caller's "
                         f"branch, or redo the call (`rewind redo {run_id} --step N --call CALL`)")
    branch = await current_name(store, run_id, branch)
    workflows = await branch_workflows(client, run_id, branch)
    if not workflows:
        if not (await store.stored_steps(run_id)).get(branch, (set(), None))[0]:
            raise RunNotFoundError(f"no run {run_id!r} with a branch {branch!r}: neither Temporal nor the checkpoint "
                                   f"store has it (`rewind runs` lists the runs)")
        raise RunNotFoundError(f"Temporal has no workflow of branch {branch!r} of run {run_id!r} (never started, or "
                               f"past the namespace's retention); fork it from a step instead (`rewind tree {run_id}`)")
    storage, handle = workflows[-1]
    desc = await handle.describe()
    revision = f"{split_revision(storage)[0]}.r{split_revision(storage)[1]}"
    if desc.status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW):
        raise NotResumableError(f"run {run_id!r} is still running ({revision}): it goes on by itself once a worker "
                                f"polls its task queue (`rewind status {run_id}`); nothing to resume")
    memo = await desc.memo()
    if skip_resumed and memo.get(MEMO_RESUMED):
        raise AlreadyResumedError(f"already resumed: {revision} resumed {memo[MEMO_RESUMED]} and ended "
                                  f"{_ENDED.get(desc.status, 'unknown')}; resume it alone: `rewind resume {run_id}`")
    ended = _ENDED.get(desc.status, "unknown")
    line = await lineage(store, run_id, branch)
    head = line[-1]
    on_line = {(s.branch_id, s.step_index) for s in line}
    calls: list[str] = []
    first: int | None = None
    for facts in await store.step_facts(run_id):
        key = (facts.fields.get("branch_id"), int(facts.fields.get("step_index") or 0))
        if facts.invalidated or key not in on_line:
            continue
        failed = [r for r in facts.tool_records if _failed(r)]
        if failed and (first is None or key[1] < first):
            first, calls = key[1], [_call_text(r, key[1]) for r in failed]
    failed_step = head.step_index if head.status == "failed" else None
    if first is None and failed_step is None and ended == "completed":
        raise NotResumableError(f"run {run_id!r} completed ({revision}) and no tool call of its branch failed after "
                                "its retries: nothing to resume (a sub-agent's failed call is its own: `rewind redo "
                                "RUN --step N --call CALL` runs it again); `rewind fork` tries something else")
    by_step = {s.step_index: s for s in line}
    redo_at: CheckpointSummary | None = None
    if first is not None and (failed_step is None or first < failed_step) and first >= 1:
        redo_at, start = by_step[first], by_step.get(first - 1)
        failed_step = None
    elif failed_step is not None:
        start, calls = by_step.get(failed_step - 1), []
    else:
        start, calls = head, []
    if start is None:
        raise NotResumableError(f"run {run_id!r} broke at its first step: nothing before it to resume from; start "
                                "it again (`rewind start`)")
    after = [s.checkpoint_id for s in line if s.step_index > start.step_index]
    plan = ResumePlan(run_id=run_id, branch=branch, revision=revision, ended=ended, from_step=start.step_index,
                      failed_calls=calls, failed_step=failed_step)
    return _Found(plan, start, head, redo_at, workflows, after)


async def plan_resume(client: Client, store: CheckpointStore, run_id: str, *, branch: str = "main",
                      skip_resumed: bool = False) -> ResumePlan:
    """Where `resume` would start the run's new revision and which calls would run again (nothing changes)."""
    return (await _find(client, store, run_id, branch, skip_resumed)).plan


async def resume(
    client: Client, launcher: Launcher, store: CheckpointStore, run_id: str, *, branch: str = "main",
    model: str | None = None, system_prompt: str | None = None, side_effects: str = "reuse",
    skip_resumed: bool = False,
) -> ResumeResult:
    """Continue `branch` of `run_id` from just before its first failed call in a new revision:
    the failed calls run again, every call it had completed is answered from the record.

    `side_effects`: "reuse" (default: an effect the branch caused is never caused again), "run"
    (a repeat follows the tool's on_repeat) or "dry-run". `skip_resumed`: refuse a run whose
    newest revision is itself a resume (AlreadyResumedError; what a bulk resume skips)."""
    check_side_effects(side_effects)
    found = await _find(client, store, run_id, branch, skip_resumed)
    plan = found.plan
    storage, handle = found.workflows[-1]
    start = await checkpoint_at(store, found.start)
    head = await store.load(found.head.checkpoint_id)  # a failed step's too: its records are the line's
    source = await source_of(client, handle.id)
    base = input_for(start, source.input)
    redo: RedoPlan | None = None
    if base.pipeline is not None:
        # A pipeline's code runs again against its record up to the start point (as a fork's
        # does): the failed call is the first not answered from it; later read-only calls come
        # from the seeded cache and effects are reused, but its model calls after the failed
        # call are made again (the record answers calls up to the start point only).
        base = with_pipeline_overrides(base, system_prompt=system_prompt, model=model)
        system_prompt = model = None
    elif found.redo_at is not None:
        redo = await _redo_plan(store, start, found.redo_at)
    resumed = plan.revision

    def adjust(seed: LoopState) -> None:
        # Every read-only answer of the line, also those after the failure; the start's own win.
        seed.tool_cache = {**tool_cache_of(head), **seed.tool_cache}
        seed.resumed = resumed
        if redo is not None:
            seed.totals = seed.inherited = seed.totals.plus(redo.model_ledger)
            seed.redo = redo

    stored = await revisions(store, run_id, plan.branch)
    next_revision = max([split_revision(b)[1] for b in stored] + [len(found.workflows) - 1]) + 1
    reason = f"resumed from step {plan.from_step} by rewind resume"
    if found.after:
        for name in stored:
            await store.invalidate_after(run_id, name, plan.from_step, reason)
    effects = lineage_effects_of(head, source.input) + await subagent_effects(store, head)
    continued = await start_from(
        client, launcher, start, base, plan.branch, revision_branch(plan.branch, next_revision),
        system_prompt=system_prompt, model=model, effects=effects, adjust=adjust, side_effects=side_effects,
        described=source.tools)
    return ResumeResult(plan, continued, sorted(found.after))


async def _redo_plan(store: CheckpointStore, before: AgentCheckpoint, at: CheckpointSummary) -> RedoPlan:
    """Step `at` answered again: its failed calls run, the others keep their recorded answers."""
    cp = await store.load(at.checkpoint_id)
    added = cp.messages[len(before.messages):]
    message = next((m for m in added if m.get("role") == "assistant" and m.get("tool_calls")), None)
    if message is None:
        raise NotResumableError(f"step {at.step_index} of {at.branch_id!r} records failed tool calls but no model "
                                f"message asking for them; fork from step {at.step_index - 1} instead")
    records = {r.tool_call_id: r for r in cp.tool_call_cache[len(before.tool_call_cache):] if r.tool_call_id}
    failed = [cid for cid, r in records.items() if _failed(r)]
    answers = {cid: log_of(r, at.step_index) for cid, r in records.items() if cid not in failed}
    ledger = Ledger.model_validate((cp.ledger or {}).get("step") or {})
    return RedoPlan(step=at.step_index, source_checkpoint=cp.checkpoint_id, message=message, call_id=failed[0],
                    answers=answers, model_ledger=ledger, label=f"resumed: {', '.join(failed)} again")


__all__ = ["resume", "plan_resume", "ResumePlan", "ResumeResult"]
