"""`rewind runs`: every run, one line each, newest first, filtered and paged.

A run is its `main` branch (its newest revision after a rollback; forks and
sub-agents are branches of the run, not runs). Two sources, joined by run id:

    Temporal visibility   which runs exist, when each started, how it stands now:
                          running, waiting (for an approval, RewindState), paused (by
                          its budget), completed, failed (terminated and timed out
                          too), cancelled; stuck: not ended, and no worker polls its
                          task queue (`no_worker`, the words of `rewind status`)
    the checkpoint store  what each did: its agent or pipeline, steps, cost, why it
                          failed, the tool calls that failed after their retries

With no Temporal client (Temporal is down), the store alone answers: a run's state is
then what its newest checkpoint can say (completed, failed, or unfinished), and its
start is its first checkpoint's. A run Temporal no longer lists (past the namespace's
retention) is listed from the store in the same way, after the runs Temporal lists
(it is older than they are, unless its workflows were deleted from Temporal by hand):
so a page that Temporal's runs fill reads nothing of the others.

Cost: one visibility listing (pages of 1,000), one describe of each task queue that has
runs which have not ended, one listing of the store, then one read per run shown (its
newest checkpoint), plus one of the first checkpoint of each run only the store knows,
when the page reaches them; `--tool-errors` reads every step of the runs it looks at
(one read per step object). Runs are looked at newest first, and the reading stops
once a page is full.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Literal

from pydantic import BaseModel

from checkpoint_bridge.checkpoints.lineage import display_name, split_revision, top_branch
from checkpoint_bridge.document.schema import code_run, stored_state
from workflows.vocabulary.errors import CheckpointNotFoundError, UsageError
from workflows.vocabulary.ids import checkpoint_id, parse_subagent_branch
from workflows.pipeline.ids import explain_code_change
from workflows.vocabulary.text import usd
from workflows.vocabulary.tool_calls import is_failed_after_retries
from workflows.vocabulary.wire import PIPELINE_WORKFLOW

if TYPE_CHECKING:
    from checkpoint_bridge.checkpoints.store import CheckpointStore, StepEnd
    from checkpoint_bridge.temporal.listing import ListedWorkflow

RunStateFilter = Literal["running", "waiting", "paused", "completed", "failed", "cancelled", "stuck"]
STATES: tuple[str, ...] = RunStateFilter.__args__  # type: ignore[attr-defined]
# What the store alone can tell of a run's state; the rest needs Temporal.
STORE_STATES = ("completed", "failed")
OPEN_STATES = ("running", "waiting", "paused", "stuck")
DEFAULT_LIMIT = 50

# Temporal's word for how a workflow ended (or RewindState while it runs), as `rewind runs` says it.
_ENDED = {"completed": "completed", "failed": "failed", "terminated": "failed", "timed_out": "failed",
          "canceled": "cancelled"}
_WAITING = {"waiting_for_approval": "waiting", "budget_exceeded": "paused"}


class RunQuery(BaseModel):
    """Which runs to list (every filter given must hold)."""

    state: RunStateFilter | None = None
    since: datetime | None = None  # started at or after
    until: datetime | None = None  # started before (the next page: the last one shown's start)
    agent: str | None = None  # the declared agent's name, or the pipeline's
    tool_errors: bool = False  # a tool call failed after its retries (on the run's main line)
    min_cost: float | None = None  # USD at least
    limit: int = DEFAULT_LIMIT


class RunRow(BaseModel):
    run_id: str
    agent: str | None = None  # the declared agent (`rewind start --agent`) or the pipeline; None: a plain run
    kind: Literal["agent", "pipeline", "graph"] | None = None  # None: not known yet (no checkpoint, no Temporal)
    started: datetime | None = None
    # running, waiting, paused, completed, failed, cancelled, stuck; from the store alone: completed,
    # failed or unfinished
    state: str
    steps: int = 0  # the newest checkpoint's step (0: the start)
    cost_usd: float = 0.0
    reason: str | None = None  # why it failed or is stuck; with --tool-errors, else the first such call
    tool_errors: int | None = None  # calls that failed after their retries (counted with --tool-errors)
    model: str | None = None
    task_queue: str | None = None
    source: Literal["temporal", "store"] = "temporal"  # where its state comes from
    # The store holds a checkpoint of it (False: Temporal lists a run no worker has mirrored into
    # this store yet, or one of another deployment's store on the same namespace).
    stored: bool = False


class RunList(BaseModel):
    store: str
    temporal: bool  # False: Temporal did not answer, the store alone listed
    runs: list[RunRow]
    more: bool = False  # more runs match after the last one shown
    next_until: datetime | None = None  # --until that lists the next page


class _Candidate:
    """A run before its checkpoints are read: what Temporal and the store's listing say."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.started: datetime | None = None
        self.current: ListedWorkflow | None = None  # the main line's newest execution
        self.state: str | None = None  # from Temporal
        self.stuck: str | None = None
        self.head: str | None = None  # the checkpoint id of the main line's newest step
        self.first: str | None = None  # main's step 0


async def list_runs(store: CheckpointStore, client: Any | None, query: RunQuery | None = None) -> RunList:
    """The runs `query` selects, newest first, at most `query.limit` of them.

    `client`: a Temporal client (or rewind/temporal/connect.py's Connection), or None to list
    from the store alone (Temporal is down): then only `completed` and `failed` can be asked
    for with `state`."""
    from checkpoint_bridge.temporal.listing import RUN_WORKFLOWS_QUERY, list_workflows, rfc3339

    query = query or RunQuery()
    if query.limit < 1:
        raise UsageError(f"--limit {query.limit} must be at least 1")
    if query.since is not None and query.until is not None and query.since >= query.until:
        raise UsageError(f"--since {query.since.isoformat()} is not before --until {query.until.isoformat()}: no run "
                         "can have started in between; swap them")
    if client is None and query.state is not None and query.state not in STORE_STATES:
        raise UsageError(f"--state {query.state} needs Temporal: the checkpoint store alone cannot tell running, "
                         "waiting, paused, cancelled and stuck runs apart (it says unfinished); ask for completed or "
                         "failed, or leave out --state")
    stored = await store.stored_runs()
    known: dict[str, _Candidate] = {}  # the runs Temporal lists
    if client is not None:
        conditions = [RUN_WORKFLOWS_QUERY]
        if query.since is not None:  # a rollback's revisions start after the run, so none is left out
            conditions.append(f"StartTime >= '{rfc3339(query.since)}'")
        if query.state in OPEN_STATES:
            conditions.append("ExecutionStatus = 'Running'")
        for run_id, executions in _main_lines(await list_workflows(client, " AND ".join(conditions))).items():
            known[run_id] = _from_temporal(run_id, executions)
        await _find_stuck([c for c in known.values() if c.state in OPEN_STATES], client)
    only_stored: list[_Candidate] = []  # past Temporal's retention, or Temporal is down
    for run_id, branches in stored.items():
        c = known.get(run_id)
        if c is None:
            if client is not None and query.state not in (None, *STORE_STATES):
                continue  # Temporal no longer has it: it is not open, and the store cannot say cancelled
            c = _Candidate(run_id)
            only_stored.append(c)
        c.head, c.first = _heads(run_id, branches)
    await _first_started(store, [c for c in known.values() if c.started is None and c.first is not None])
    rows: list[RunRow] = []
    gate = asyncio.Semaphore(_SCANS)
    more = await _fill(rows, _ordered(known.values(), query), store, client, query, gate)
    if not more and only_stored:
        # The runs only the store knows come after those Temporal lists (they are older than its
        # retention): dating them reads each one's first checkpoint, done only when the page needs them.
        await _first_started(store, only_stored)
        more = await _fill(rows, _ordered(only_stored, query), store, client, query, gate)
    return RunList(store=store.url, temporal=client is not None, runs=rows, more=more,
                   next_until=rows[-1].started if more and rows else None)


def _ordered(candidates: Iterable[_Candidate], query: RunQuery) -> list[_Candidate]:
    """The candidates in the time window and state asked for, newest first."""
    return sorted((c for c in candidates if _in_window(c, query) and _may_match(c, query)),
                  key=lambda c: (c.started or datetime.min.replace(tzinfo=timezone.utc), c.run_id), reverse=True)


async def _fill(rows: list[RunRow], chosen: list[_Candidate], store: CheckpointStore, client: Any | None,
                query: RunQuery, gate: asyncio.Semaphore) -> bool:
    """Add the lines of `chosen` that match to `rows`, up to the limit, reading their newest
    checkpoints a batch at a time; True when one more matches (another page)."""
    batch = max(query.limit, 16)
    for start in range(0, len(chosen), batch):
        part = chosen[start:start + batch]
        ends = await _ends(store, [c.head for c in part if c.head is not None])
        built = await asyncio.gather(*(_row(store, client, c, ends.get(c.head or ""), query, gate) for c in part))
        for row in built:
            if row is None:
                continue
            if len(rows) == query.limit:
                return True
            rows.append(row)
    return False


def _main_lines(workflows: list[ListedWorkflow]) -> dict[str, list[ListedWorkflow]]:
    """Each run's executions of its main branch (every revision, every continued run)."""
    out: dict[str, list[ListedWorkflow]] = {}
    for w in workflows:
        if display_name(w.branch_id) == "main" and parse_subagent_branch(w.branch_id) is None:
            out.setdefault(w.run_id, []).append(w)
    return out


def _from_temporal(run_id: str, executions: list[ListedWorkflow]) -> _Candidate:
    c = _Candidate(run_id)
    # The newest revision's newest execution is how the run stands now.
    c.current = max(executions, key=lambda w: (split_revision(w.branch_id)[1], w.started))
    firsts = [w.started for w in executions if split_revision(w.branch_id)[1] == 0]
    c.started = min(firsts) if firsts else None  # else from its first checkpoint (an older revision not listed)
    w = c.current
    if w.status in ("running", "continued_as_new"):
        c.state = _WAITING.get(w.state or "", "running")
    else:
        c.state = _ENDED.get(w.status, w.status)
    return c


async def _find_stuck(open_runs: list[_Candidate], client: Any) -> None:
    """Mark the runs whose task queue no worker polls (one describe per queue)."""
    from checkpoint_bridge.temporal.runs import no_worker

    queues = sorted({c.current.task_queue for c in open_runs if c.current is not None and c.current.task_queue})
    reasons = dict(zip(queues, await asyncio.gather(*(no_worker(client, q) for q in queues)), strict=True))
    for c in open_runs:
        reason = reasons.get(c.current.task_queue) if c.current is not None else None
        if reason is not None:
            c.state, c.stuck = "stuck", reason


def _heads(run_id: str, branches: dict[str, tuple[set[int], int | None]]) -> tuple[str | None, str | None]:
    """(checkpoint id of the main line's newest valid step, of main's step 0), from a listing."""
    revisions = sorted((split_revision(b)[1], b) for b in branches if display_name(b) == "main"
                       and parse_subagent_branch(b) is None)
    head = None
    for _, branch in reversed(revisions):
        steps, cutoff = branches[branch]
        valid = [s for s in steps if cutoff is None or s <= cutoff]
        if valid:
            head = checkpoint_id(run_id, branch, max(valid))
            break
    first = checkpoint_id(run_id, "main", 0) if 0 in branches.get("main", (set(), None))[0] else None
    return head, first


async def _ends(store: CheckpointStore, ids: list[str]) -> dict[str, StepEnd]:
    """Each checkpoint's own fields (one read each); one deleted meanwhile is left out."""
    try:
        return dict(zip(ids, await store.step_ends(ids), strict=True))
    except CheckpointNotFoundError:  # a run erased while listing: read them one by one
        found = {}
        for cid in ids:
            try:
                found[cid] = (await store.step_ends([cid]))[0]
            except CheckpointNotFoundError:
                continue
        return found


async def _first_started(store: CheckpointStore, candidates: list[_Candidate]) -> None:
    """The start of runs Temporal does not date: their first checkpoint's time."""
    ends = await _ends(store, [c.first for c in candidates if c.first is not None])
    for c in candidates:
        end = ends.get(c.first or "")
        if end is not None:
            c.started = _time(end.fields.get("created_at"))


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        return None


def _in_window(c: _Candidate, query: RunQuery) -> bool:
    if query.since is None and query.until is None:
        return True
    if c.started is None:
        return False
    return (query.since is None or c.started >= query.since) and (query.until is None or c.started < query.until)


def _may_match(c: _Candidate, query: RunQuery) -> bool:
    """The state filter on what is known before reading checkpoints (Temporal's state)."""
    if query.state is None or c.state is None:
        return True
    return c.state == query.state


async def _row(store: CheckpointStore, client: Any | None, c: _Candidate, end: StepEnd | None,
               query: RunQuery, gate: asyncio.Semaphore) -> RunRow | None:
    """The run's line, or None when a filter that needs its checkpoints leaves it out."""
    fields = end.fields if end is not None else {}
    w = c.current
    row = RunRow(run_id=c.run_id, started=c.started, state=c.state or (stored_state(fields) if fields else "unfinished"),
                 steps=int(fields.get("step_index") or 0), cost_usd=float(fields.get("llm_cost_usd") or 0.0),
                 model=fields.get("model") or None, task_queue=w.task_queue if w is not None else None,
                 source="temporal" if c.state is not None else "store", stored=end is not None)
    if query.state is not None and row.state != query.state:
        return None
    if query.min_cost is not None and row.cost_usd < query.min_cost:
        return None
    row.kind, row.agent = await _agent(store, w, end)
    if query.agent is not None and row.agent != query.agent:
        return None
    if query.tool_errors:
        failed = await _tool_errors(store, c.run_id, gate)
        if not failed:
            return None
        row.tool_errors = len(failed)
        row.reason = failed[0]
    if row.state == "stuck":
        row.reason = c.stuck
    elif row.state == "failed":
        reason = (fields.get("error_info") or {}).get("reason") if fields.get("status") == "failed" else None
        if reason is None and client is not None and w is not None and w.status != "completed":
            from checkpoint_bridge.temporal.listing import close_reason

            reason = await close_reason(client, w)
        # Temporal's nondeterminism error of a pipeline whose code changed under it: the line
        # `rewind status` gives (which call changed, and where a fork continues on the new code).
        row.reason = (explain_code_change(reason, c.run_id) if reason else None) or reason or row.reason
    return row


async def _agent(store: CheckpointStore, w: ListedWorkflow | None, end: StepEnd | None) -> tuple[Any, str | None]:
    """(kind, name) of what the run runs: a declared agent's name, a pipeline's, a LangGraph
    graph's (MODULE:ATTR), or no name."""
    fields = end.fields if end is not None else {}
    if isinstance(fields.get("agent"), dict):
        return "agent", fields["agent"].get("name")
    if (runs := code_run(fields.get("pipeline"))) is not None:
        return runs
    if w is not None:
        if w.workflow_type != PIPELINE_WORKFLOW:
            return "agent", None
        # The memo's task is `pipeline NAME` or `graph MODULE:ATTR` (rewind.client.pipeline_input, graph_input).
        kind, _, name = (w.task or "").partition(" ")
        return ("graph", name or None) if kind == "graph" else ("pipeline", name or None if kind == "pipeline" else None)
    if end is None:
        return None, None
    # From the store alone: a pipeline's start, result and failure steps name no call; the call
    # before its last step does (the loop's steps never name a pipeline).
    run_id, branch, step = fields["run_id"], fields["branch_id"], int(fields.get("step_index") or 0)
    if fields.get("step_label") in ("result", "failed") and step >= 2:
        before = await _ends(store, [checkpoint_id(run_id, branch, step - 1)])
        runs = code_run(next(iter(before.values())).fields.get("pipeline")) if before else None
        if runs is not None:
            return runs
    return "agent", None


# Runs whose every step is read at once for --tool-errors (each read in parallel itself).
_SCANS = 8


async def _tool_errors(store: CheckpointStore, run_id: str, gate: asyncio.Semaphore) -> list[str]:
    """`step N: ERROR` of each tool call on the run's main line (its sub-agents' too) that
    failed after its retries, oldest first."""
    found = []
    async with gate:
        steps = await store.step_facts(run_id)
    for facts in steps:
        if facts.invalidated or top_branch(facts.fields["branch_id"]) != "main":
            continue
        for record in facts.tool_records:
            if is_failed_after_retries(record):
                found.append(f"step {facts.fields['step_index']}: {record['error']}")
    return found


# -- text ----------------------------------------------------------------------

def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def runs_text(listed: RunList, *, next_page: str | None = None) -> str:
    """The table `rewind runs` prints; `next_page`: the command that lists the next page."""
    if not listed.runs:
        return "no runs match" if listed.temporal else f"no runs in {listed.store} match"
    header = ("RUN", "AGENT", "STARTED (UTC)", "STATE", "STEPS", "COST", "REASON")
    table = [(r.run_id, r.agent or "-", _when(r.started), r.state, str(r.steps), usd(r.cost_usd),
              _short(r.reason, 100) if r.reason else "") for r in listed.runs]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *table]:
        cells = [cell.rjust(widths[i]) if i in (4, 5) else cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    if listed.more:
        lines.append(f"more runs started before {_when(listed.next_until)}"
                     + (f": {next_page}" if next_page else ""))
    return "\n".join(lines)


__all__ = ["RunQuery", "RunRow", "RunList", "list_runs", "runs_text", "STATES", "DEFAULT_LIMIT"]
