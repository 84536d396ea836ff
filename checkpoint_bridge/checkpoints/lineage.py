"""Branches as users name them, over the stored branches that hold them.

An in-place rollback cannot rewrite a branch's later steps (checkpoints are
immutable and their ids derive from run, branch and step), so the branch
continues under a *revision*: storage branch `main.r1`, then `main.r2`, ...
Users keep saying `main`; this module maps the name to its revisions and
walks parent links to give a branch's lineage, from step 0 to its head, across
revisions and fork points. The suffix `.rN` is therefore reserved.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from workflows.vocabulary.errors import InvalidIdError, RunNotFoundError, StepNotFoundError
from workflows.vocabulary.ids import parse_subagent_branch, validate_id

if TYPE_CHECKING:  # the revision names alone (checkpoint_bridge/temporal/runs.py) need no checkpoint models
    from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary
    from checkpoint_bridge.checkpoints.store import CheckpointStore

# `main.r1`, `main.r2`, ... are the revisions rollbacks made; `main.r0` names the
# original `main` itself (what a user compares a rolled-back branch against).
_REVISION = re.compile(r"^(?P<name>.+)\.r(?P<rev>0|[1-9][0-9]*)$")

# `CheckpointStore.stored_steps`: each branch's stored steps and its rollback cutoff.
StoredSteps = dict[str, tuple[set[int], int | None]]



def split_revision(storage_branch: str) -> tuple[str, int]:
    m = _REVISION.match(storage_branch)
    return (m["name"], int(m["rev"])) if m else (storage_branch, 0)


def revision_branch(name: str, revision: int) -> str:
    return name if revision == 0 else f"{name}.r{revision}"


def is_revision_name(name: str) -> bool:
    """`main.r0`, `main.r1`, ...: one revision of a branch, named exactly."""
    return _REVISION.match(name) is not None


def validate_branch_name(name: str) -> str:
    validate_id("branch", name)
    if _REVISION.match(name):
        raise InvalidIdError(f"branch name {name!r} ends in '.rN', which Rewind reserves for rolled-back branches; choose another name")
    if parse_subagent_branch(name) is not None:
        raise InvalidIdError(f"branch name {name!r} ends in '.sN-CALL', which Rewind reserves for sub-agent runs; "
                             "choose another name")
    return name


def display_name(storage_branch: str) -> str:
    return split_revision(storage_branch)[0]


def top_branch(storage_branch: str) -> str:
    """The branch name a stored branch belongs to: its own without a revision, or for a
    sub-agent's run (`main.s3-call_1`, nested too) its top-level caller's (`main`)."""
    while (called := parse_subagent_branch(storage_branch)) is not None:
        storage_branch = called[0]
    return split_revision(storage_branch)[0]


async def revisions(store: CheckpointStore, run_id: str, name: str) -> list[str]:
    """The stored revisions of a branch, oldest first. A revision's own name
    (`main.r1`, as `rewind fork` and `rewind tree` print it) names just that one."""
    return revisions_among(await store.branches(run_id), name)


async def current_name(store: CheckpointStore, run_id: str, name: str) -> str:
    """The branch a user means by `name`: `main.r2`, when it is main's newest
    revision, means `main`; an older revision cannot be continued in place."""
    if not is_revision_name(name):
        return name
    base, revision = split_revision(name)
    newest = (await revisions(store, run_id, base) or [base])[-1]
    if newest != revision_branch(base, revision):
        raise InvalidIdError(
            f"{name!r} is not the newest revision of branch {base!r} (that is {newest!r}); name the branch "
            f"{base!r}, or fork {name!r} at a step to try something from it"
        )
    return base


async def lineage(store: CheckpointStore, run_id: str, name: str, *,
                  ignoring_rollback_to: int | None = None) -> list[CheckpointSummary]:
    """The branch's live checkpoints from step 0 to its head, following parents
    (`ignoring_rollback_to`: as `CheckpointStore.list_checkpoints`)."""
    summaries = await store.list_checkpoints(run_id, ignoring_rollback_to=ignoring_rollback_to)
    if not summaries:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r} in {store.url}; check the id or REWIND_STORE")
    return lineage_in(summaries, name, store.url)


def _stored_revisions(summaries: list[CheckpointSummary], name: str) -> list[str]:
    """`revisions`, over a run's listed checkpoints instead of the store."""
    return revisions_among(list(dict.fromkeys(s.branch_id for s in summaries)), name)


def revisions_among(stored: list[str], name: str) -> list[str]:
    """`revisions`, over a run's stored branch ids (`store.branches`, or the keys of `store.stored_steps`)."""
    if _REVISION.match(name):
        storage = revision_branch(*split_revision(name))
        return [storage] if storage in stored else []
    return sorted((b for b in stored if split_revision(b)[0] == name), key=lambda b: split_revision(b)[1])


def lineage_in(summaries: list[CheckpointSummary], name: str, store_url: str) -> list[CheckpointSummary]:
    """`lineage` over a run's checkpoints already listed (`store.list_checkpoints`), for
    readers that resolve many names of one run (the viewer): no store requests."""
    run_id = summaries[0].run_id
    by_id = {s.checkpoint_id: s for s in summaries}
    head: CheckpointSummary | None = None
    exact = _REVISION.match(name) is not None
    for storage in reversed(_stored_revisions(summaries, name)):
        # A revision named exactly is what it was, rolled-back steps included.
        live = [s for s in summaries if s.branch_id == storage and (exact or s.status != "invalidated")]
        if live:
            head = max(live, key=lambda s: s.step_index)
            break
    if head is None:
        names = sorted({display_name(s.branch_id) for s in summaries})
        raise RunNotFoundError(f"run {run_id!r} has no branch {name!r}; its branches are: {', '.join(names)}")
    chain = [head]
    while chain[-1].parent_id is not None:
        parent = by_id.get(chain[-1].parent_id)
        if parent is None:
            raise RunNotFoundError(
                f"checkpoint {chain[-1].parent_id} (parent of {chain[-1].checkpoint_id}) is missing from "
                f"{store_url}; rebuild it with `rewind mirror {run_id}`"
            )
        chain.append(parent)
    return list(reversed(chain))


async def resolve_step(store: CheckpointStore, run_id: str, name: str, step: int, *,
                       stored: StoredSteps | None = None) -> CheckpointSummary:
    """The checkpoint of `step` on branch `name` (which may lie on an ancestor branch).
    `stored`: the run's `store.stored_steps`, when the caller listed them already."""
    own = await _own_step(store, run_id, name, step, stored)
    if own is not None:
        return own
    line = await lineage(store, run_id, name)
    for s in line:
        if s.step_index == step:
            return s
    raise StepNotFoundError(
        f"step {step} is out of range for branch {name!r} of run {run_id!r}: it has steps "
        f"{line[0].step_index}..{line[-1].step_index}"
    )


async def _own_step(store: CheckpointStore, run_id: str, name: str, step: int,
                    stored: StoredSteps | None = None) -> CheckpointSummary | None:
    """The common case of `resolve_step` in one listing and one read instead of a read of
    every step: `step` and every step after it to the head are stored on the branch's
    newest live revision itself. None when the step lies elsewhere (on the branch it was
    forked from, on a revision before a rollback) or the run is not stored: the lineage
    walk answers those, with its errors."""
    if stored is None:
        stored = await store.stored_steps(run_id)
    exact = _REVISION.match(name) is not None
    for storage in reversed(revisions_among(list(stored), name)):
        steps, cutoff = stored[storage]
        live = steps if exact or cutoff is None else {s for s in steps if s <= cutoff}
        if not live:
            continue
        if step in live and set(range(step, max(live) + 1)) <= live:
            return await store.summary_of(run_id, storage, step, cutoff)
        return None
    return None


async def load_lineage(store: CheckpointStore, run_id: str, name: str) -> list[AgentCheckpoint]:
    """`lineage`, as full checkpoints."""
    return [await store.load(s.checkpoint_id) for s in await lineage(store, run_id, name)]
