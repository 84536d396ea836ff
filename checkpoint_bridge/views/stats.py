"""`rewind stats`: what the runs in a checkpoint store did, added up.

Drawn from the store alone (it outlives Temporal's retention): one read per
step object, no chain replayed, so a store of many long runs is summed in
one pass. Spend counts every step that ran, including steps a rollback later
invalidated (they were paid for); a fork counts only its own steps, never
what it inherited from its source. A sub-agent's spending is counted once, at
its own steps (its caller's ledger holds it too, marked as `subagent_*`), under
its model, under the branch of its top-level caller, and under its agent.

A run's state is what its checkpoints can say: `completed` (main ends with a
final answer), `failed`, or `unfinished` (running, waiting, paused, stopped
or crashed: `rewind status RUN` asks Temporal which).

`since`: only the runs that started then or later (their first checkpoint's
time). `by`: the same figures per agent, model, tool or day too (stats_by.py).
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime
from typing import Any, Iterable

from pydantic import BaseModel, Field

from checkpoint_bridge.checkpoints.lineage import split_revision, top_branch
from checkpoint_bridge.checkpoints.store import CheckpointStore, StepFacts
from checkpoint_bridge.document.schema import stored_state
from checkpoint_bridge.views.stats_by import By, Group, grouped, grouped_text
from checkpoint_bridge.views.step_rows import StepRow, created_at, rows_of
from workflows.vocabulary.contracts import Ledger
from workflows.vocabulary.errors import RunNotFoundError
from workflows.vocabulary.ids import checkpoint_id, validate_id
from workflows.vocabulary.text import usd

MODEL_CALL = "call_llm"  # the retries key of model calls; tool calls: "run_tool <tool>"


class Spend(BaseModel):
    branches: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0

    def add_step(self, ledger: dict[str, Any]) -> None:
        self.steps += 1
        for name in ("prompt_tokens", "completion_tokens", "total_tokens", "model_calls"):
            setattr(self, name, getattr(self, name) + int(ledger.get(name) or 0))
        self.cost_usd += float(ledger.get("cost_usd") or 0.0)


class StepTimes(BaseModel):
    """From one checkpoint to the next on a branch: model call, tools and any wait."""

    steps: int = 0
    mean_ms: float | None = None
    p95_ms: float | None = None


class StoreStats(BaseModel):
    store: str
    runs: int = 0
    branches: int = 0
    runs_by_state: dict[str, int] = Field(default_factory=dict)
    since: datetime | None = None  # only runs started then or later
    totals: Spend = Field(default_factory=Spend)
    cost_per_run: float | None = None
    by_model: dict[str, Spend] = Field(default_factory=dict)
    by_branch: dict[str, Spend] = Field(default_factory=dict)  # by branch name, revisions and sub-agents folded in
    by_agent: dict[str, Spend] = Field(default_factory=dict)  # by declared agent (runs started with --agent, sub-agents)
    subagent_calls: int = 0  # sub-agent runs (one per call)
    tool_calls: int = 0  # executed
    cache_hits: int = 0
    cache_hit_rate: float | None = None  # cache hits / (tool calls run + cache hits)
    reused_effects: int = 0
    step_time: StepTimes = Field(default_factory=StepTimes)
    retries: dict[str, int] = Field(default_factory=dict)  # attempts beyond the first, by activity
    by: str | None = None  # --by: agent, model, tool or day
    groups: dict[str, Group] = Field(default_factory=dict)  # the figures per group of `by`


def _percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted, non-empty list."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def _own(ledger: dict[str, Any]) -> dict[str, Any]:
    """A step's ledger without what its sub-agents spent (counted at their own steps)."""
    return Ledger.model_validate(ledger).own().model_dump()


def _run_state(facts: list[StepFacts]) -> str:
    """The state of the run's main line: its newest revision's last valid step."""
    main = [f for f in facts if split_revision(f.fields["branch_id"])[0] == "main" and not f.invalidated]
    if not main:
        return "unfinished"
    newest = max(main, key=lambda f: (split_revision(f.fields["branch_id"])[1], f.fields["step_index"]))
    return stored_state(newest.fields)


def _add_run(stats: StoreStats, facts: list[StepFacts], durations: list[float], seen_branches: dict[str, set[str]]) -> None:
    stats.runs += 1
    state = _run_state(facts)
    stats.runs_by_state[state] = stats.runs_by_state.get(state, 0) + 1
    created: dict[str, datetime | None] = {}
    branches: set[str] = set()
    retries: Counter[str] = Counter(stats.retries)
    for f in facts:
        fields = f.fields
        branch, step = fields["branch_id"], fields["step_index"]
        cid = checkpoint_id(fields["run_id"], branch, step)
        created[cid] = created_at(fields)
        parent = fields.get("parent_id")
        if parent is not None and parent.rsplit(":", 2)[1] == branch:
            start, end = created.get(parent), created[cid]
            if start is not None and end is not None:
                durations.append((end - start).total_seconds() * 1000)
        branches.add(branch)
        if step == 0:
            stats.subagent_calls += bool((fields.get("agent") or {}).get("called_by"))  # each sub-agent run once
            continue  # the start: a task, no work
        ledger = _own(((fields.get("ledger") or {}).get("step")) or {})
        model = fields.get("model") or "unknown"
        name = top_branch(branch)  # a sub-agent's spend counts under its top-level caller's
        agent = (fields.get("agent") or {}).get("name")
        spends = [stats.totals, stats.by_model.setdefault(model, Spend()), stats.by_branch.setdefault(name, Spend())]
        if agent:
            spends.append(stats.by_agent.setdefault(agent, Spend()))
            seen_branches.setdefault(f"agent:{agent}", set()).add(f"{fields['run_id']}/{branch}")
        for spend in spends:
            spend.add_step(ledger)
        seen_branches.setdefault(f"model:{model}", set()).add(f"{fields['run_id']}/{branch}")
        seen_branches.setdefault(f"branch:{name}", set()).add(f"{fields['run_id']}/{branch}")
        stats.tool_calls += int(ledger.get("tool_calls") or 0)
        stats.cache_hits += int(ledger.get("cache_hits") or 0)
        if ledger.get("model_retries"):
            retries[MODEL_CALL] += int(ledger["model_retries"])
        for record in f.tool_records:
            if record.get("reused"):
                stats.reused_effects += 1
            if int(record.get("attempts") or 1) > 1:
                retries[f"run_tool {record.get('tool_name')}"] += int(record["attempts"]) - 1
    stats.branches += len(branches)
    stats.retries = dict(sorted(retries.items()))


def _started(facts: list[StepFacts]) -> datetime | None:
    """When the run started: its first checkpoint's time."""
    times = [t for t in (created_at(f.fields) for f in facts) if t is not None]
    return min(times) if times else None


async def store_stats(store: CheckpointStore, run_ids: Iterable[str] | None = None, *,
                      since: datetime | None = None, by: By | None = None) -> StoreStats:
    """Stats of the named runs (default: every run in the store), those started since `since`,
    with the figures per group of `by` too."""
    if run_ids is not None:
        wanted = [validate_id("run", r) for r in run_ids]
    else:
        wanted = await store.run_ids()
    stats = StoreStats(store=store.url, since=since, by=by)
    durations: list[float] = []
    seen: dict[str, set[str]] = {}
    rows: list[StepRow] = []
    for run_id in wanted:
        facts = await store.step_facts(run_id)
        if not facts:
            if run_ids is not None:
                raise RunNotFoundError(f"no checkpoints for run {run_id!r} in {store.url}; check the id or REWIND_STORE")
            continue
        if since is not None and ((started := _started(facts)) is None or started < since):
            continue
        _add_run(stats, facts, durations, seen)
        if by is not None:
            rows += rows_of(facts)
    if by is not None:
        stats.groups = grouped(rows, by)
    stats.cost_per_run = stats.totals.cost_usd / stats.runs if stats.runs else None
    stats.totals.branches = stats.branches
    for key, spend in [*(("model:" + k, v) for k, v in stats.by_model.items()),
                       *(("branch:" + k, v) for k, v in stats.by_branch.items()),
                       *(("agent:" + k, v) for k, v in stats.by_agent.items())]:
        spend.branches = len(seen.get(key, ()))
    looked_up = stats.tool_calls + stats.cache_hits
    stats.cache_hit_rate = stats.cache_hits / looked_up if looked_up else None
    if durations:
        ordered = sorted(durations)
        stats.step_time = StepTimes(steps=len(ordered), mean_ms=sum(ordered) / len(ordered),
                                    p95_ms=_percentile(ordered, 0.95))
    return stats


def _seconds(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f} s"


def _table(title: str, rows: dict[str, Spend]) -> list[str]:
    width = max([len(title), *map(len, rows)])
    lines = [f"  {title:<{width}}  {'branches':>8} {'steps':>7} {'tokens in':>10} {'tokens out':>10} {'cost':>12}"]
    for name, s in sorted(rows.items(), key=lambda kv: (-kv[1].cost_usd, kv[0])):
        lines.append(f"  {name:<{width}}  {s.branches:>8} {s.steps:>7} {s.prompt_tokens:>10} {s.completion_tokens:>10} "
                     f"{usd(s.cost_usd):>12}")
    return lines


def stats_text(stats: StoreStats) -> str:
    since = "" if stats.since is None else f" started since {stats.since.isoformat(timespec='seconds')}"
    if stats.runs == 0:
        return f"no runs{since} in {stats.store}"
    states = ", ".join(f"{n} {state}" for state, n in sorted(stats.runs_by_state.items()))
    t = stats.totals
    lines = [
        f"{stats.runs} run(s){since}, {stats.branches} branch(es), {t.steps} step(s) in {stats.store}: {states}",
        f"spend      {t.total_tokens} tokens ({t.prompt_tokens} in / {t.completion_tokens} out), {usd(t.cost_usd)}, "
        f"{t.model_calls} model call(s); {usd(stats.cost_per_run or 0.0)} per run",
        "by model", *_table("model", stats.by_model),
        "by branch", *_table("branch", stats.by_branch),
    ]
    if stats.by_agent:
        lines += [f"by agent ({stats.subagent_calls} sub-agent call(s))", *_table("agent", stats.by_agent)]
    rate = "-" if stats.cache_hit_rate is None else f"{stats.cache_hit_rate:.1%}"
    lines.append(f"tool calls {stats.tool_calls} run, {stats.cache_hits} from cache (hit rate {rate}), "
                 f"{stats.reused_effects} reused effect(s)")
    st = stats.step_time
    lines.append(f"step time  mean {_seconds(st.mean_ms)}, p95 {_seconds(st.p95_ms)} over {st.steps} step(s)")
    retried = ", ".join(f"{name} {n}" for name, n in stats.retries.items()) or "none"
    lines.append(f"retries    {retried}")
    if stats.by is not None:
        lines += grouped_text(stats.by, stats.groups)
    return "\n".join(lines)


__all__ = ["Spend", "StepTimes", "StoreStats", "store_stats", "stats_text", "MODEL_CALL"]
