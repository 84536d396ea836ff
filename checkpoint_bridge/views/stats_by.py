"""`rewind stats --by agent|model|tool|day|node`: the figures of `rewind stats` per group.

Built from the same step rows `rewind export --runs --format parquet` writes (step_rows.py),
so each group's steps, tokens and cost add up to the totals: by model, by agent (a step of
no declared agent or pipeline under `-`) and by day (the UTC day a step's checkpoint was
made) split the steps; by node splits a graph run's super-steps among the nodes they ran
(a super-step of one node is all its node's; of several, each node gets its own model calls
and tool calls, and its own time); by tool splits the tool calls (a step's tokens and cost are its
model call's, no tool's: those columns stay empty there).

Per group: runs and branches it touched, steps, tokens, cost, cost per run (of the runs it
touched), model calls, tool calls run and served from the cache (hit rate: hits over both),
retries (attempts beyond the first), tool calls that failed after their retries, and step
time (checkpoint to checkpoint on one branch: the model call, the tools and any wait).
Checkpoint write latency is not in the store (it is the workers' `rewind_checkpoint_write_ms`
histogram, REWIND_METRICS_PORT): `rewind stats --metrics URL` reads it from there
(rewind/write_latency.py).
"""

from __future__ import annotations

import math
from typing import Iterable, Literal

from pydantic import BaseModel

from checkpoint_bridge.views.step_rows import StepRow
from workflows.vocabulary.text import usd

By = Literal["agent", "model", "tool", "day", "node"]
BY: tuple[str, ...] = By.__args__  # type: ignore[attr-defined]
NONE = "-"  # the group of steps without an agent (or a model)


class Group(BaseModel):
    runs: int = 0
    branches: int = 0
    steps: int = 0  # by tool: the steps that called it
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cost_per_run: float | None = None
    model_calls: int = 0
    tool_calls: int = 0  # run and returned (a call that failed after its retries is a tool error)
    cache_hits: int = 0
    cache_hit_rate: float | None = None
    reused_effects: int = 0
    subagent_calls: int = 0  # by tool: calls of a sub-agent (its run's steps and tool calls count on its own)
    retries: int = 0
    tool_errors: int = 0
    step_time_mean_ms: float | None = None
    step_time_p95_ms: float | None = None


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def grouped(rows: Iterable[StepRow], by: By) -> dict[str, Group]:
    """The groups of `rows`, by name."""
    groups: dict[str, Group] = {}
    runs: dict[str, set[str]] = {}
    branches: dict[str, set[tuple[str, str]]] = {}
    times: dict[str, list[float]] = {}

    def touch(name: str, row: StepRow) -> Group:
        runs.setdefault(name, set()).add(row.run_id)
        branches.setdefault(name, set()).add((row.run_id, row.branch_id))
        return groups.setdefault(name, Group())

    for row in rows:
        if by == "tool":
            for name in dict.fromkeys(c.tool for c in row.calls):
                g = touch(name, row)
                g.steps += 1
                for c in row.calls:
                    if c.tool != name:
                        continue
                    g.cache_hits += c.cached
                    g.reused_effects += c.reused
                    g.subagent_calls += c.subagent
                    g.tool_calls += not (c.cached or c.reused or c.failed or c.subagent)  # as the ledger counts them
                    g.tool_errors += c.failed
                    g.retries += c.retries
                    times.setdefault(name, []).append(float(c.duration_ms))
            continue
        if by == "node":
            for node in row.nodes:
                g = touch(node.name, row)
                g.steps += 1
                times.setdefault(node.name, []).append(node.seconds * 1000)
                if len(row.nodes) == 1:
                    _add_step(g, row)
                    continue
                g.prompt_tokens += node.prompt_tokens
                g.completion_tokens += node.completion_tokens
                g.total_tokens += node.prompt_tokens + node.completion_tokens
                g.cost_usd += node.cost_usd
                g.model_calls += node.model_calls
                for c in row.calls:
                    if c.node == node.name:
                        g.cache_hits += c.cached
                        g.reused_effects += c.reused
                        g.tool_calls += not (c.cached or c.reused or c.failed or c.subagent)
                        g.tool_errors += c.failed
                        g.retries += c.retries
            continue
        if by == "day":
            name = row.created_at.strftime("%Y-%m-%d") if row.created_at is not None else NONE
        else:
            name = (row.agent if by == "agent" else row.model) or NONE
        g = touch(name, row)
        g.steps += 1
        _add_step(g, row)
        if row.duration_ms is not None:
            times.setdefault(name, []).append(row.duration_ms)
    for name, g in groups.items():
        g.runs, g.branches = len(runs[name]), len(branches[name])
        if by != "tool":
            g.cost_per_run = g.cost_usd / g.runs
        looked_up = g.tool_calls + g.cache_hits
        g.cache_hit_rate = g.cache_hits / looked_up if looked_up else None
        ordered = sorted(times.get(name, []))
        if ordered:
            g.step_time_mean_ms = sum(ordered) / len(ordered)
            g.step_time_p95_ms = _percentile(ordered, 0.95)
    return dict(sorted(groups.items()))


def _add_step(g: Group, row: StepRow) -> None:
    """A whole step's figures into its group."""
    for field in ("prompt_tokens", "completion_tokens", "total_tokens", "model_calls", "tool_calls", "cache_hits",
                  "retries", "tool_errors"):
        setattr(g, field, getattr(g, field) + getattr(row, field))
    g.cost_usd += row.cost_usd
    g.reused_effects += sum(c.reused for c in row.calls)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:.2f} s"


def grouped_text(by: str, groups: dict[str, Group]) -> list[str]:
    """The table of `rewind stats --by`: one line per group (by tool: calls, no spend; the
    time column is the calls' own time there, a step's elsewhere)."""
    if not groups:
        return [f"by {by}: no steps"]
    width = max([len(by), *map(len, groups)])
    if by == "tool":
        lines = [f"by tool  {'tool':<{width}}  {'runs':>5} {'calls':>6} {'cached':>6} {'hit rate':>8} {'reused':>6} "
                 f"{'agent':>6} {'retries':>7} {'errors':>6} {'mean time':>9}"]
        for name, g in groups.items():
            rate = "-" if g.cache_hit_rate is None else f"{g.cache_hit_rate:.1%}"
            lines.append(f"         {name:<{width}}  {g.runs:>5} {g.tool_calls:>6} {g.cache_hits:>6} {rate:>8} "
                         f"{g.reused_effects:>6} {g.subagent_calls:>6} {g.retries:>7} {g.tool_errors:>6} "
                         f"{_ms(g.step_time_mean_ms):>9}")
        return lines
    lines = [f"by {by}  {by:<{width}}  {'runs':>5} {'steps':>6} {'tokens':>8} {'cost':>12} {'per run':>12} "
             f"{'hit rate':>8} {'retries':>7} {'errors':>6} {'step p95':>8}"]
    for name, g in groups.items():
        rate = "-" if g.cache_hit_rate is None else f"{g.cache_hit_rate:.1%}"
        lines.append(f"{'':>{len(by) + 5}}{name:<{width}}  {g.runs:>5} {g.steps:>6} {g.total_tokens:>8} "
                     f"{usd(g.cost_usd):>12} {usd(g.cost_per_run or 0.0):>12} {rate:>8} {g.retries:>7} "
                     f"{g.tool_errors:>6} {_ms(g.step_time_p95_ms):>8}")
    return lines


__all__ = ["By", "BY", "Group", "grouped", "grouped_text"]
