"""An experiment's comparison: one row per variant, over its repetitions.

Every figure comes from the branches' checkpoints (their own steps, after the
fork point), so the table is what the store says, not what the experiment
workflow counted: steps, tokens, cost, wall time, tool calls by tool, the
distinct tool-call sequences (tools and arguments, in order), outcome states, final-answer length, and how
many repetitions agree (the same tool-call sequence; the same final answer
after normalisation: case, whitespace and punctuation ignored).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from pydantic import BaseModel, Field

from checkpoint_bridge.checkpoints.lineage import resolve_step
from checkpoint_bridge.document.schema import AgentCheckpoint, final_answer
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.experiments import ExperimentStatus
from workflows.vocabulary.ids import checkpoint_id
from workflows.vocabulary.summaries import call_text
from workflows.vocabulary.text import usd

_NOT_WORD = re.compile(r"[^\w]+")


def normalise_answer(text: str) -> str:
    return " ".join(_NOT_WORD.sub(" ", text.casefold()).split())


class Figure(BaseModel):
    """Mean and spread (sample standard deviation; 0 for one repetition) of one measure."""

    mean: float
    spread: float
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Figure:
        return cls(mean=statistics.fmean(values) if values else 0.0,
                   spread=statistics.stdev(values) if len(values) > 1 else 0.0, values=values)


class BranchFigures(BaseModel):
    branch: str
    variant: str
    repetition: int
    state: str
    steps: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float
    wall_s: float | None
    tool_calls: dict[str, int]
    tool_sequence: list[str]  # each call with its arguments: `lookup(term='x')`
    final_answer: str | None
    score: float | str | None = None
    score_error: str | None = None


class VariantRow(BaseModel):
    variant: str
    settings: dict[str, Any]
    repetitions: int
    finished: int
    states: dict[str, int]
    steps: Figure
    total_tokens: Figure
    cost_usd: Figure
    wall_s: Figure
    final_answer_chars: Figure
    tool_calls: dict[str, Figure]
    distinct_tool_sequences: int
    sequence_agreement: int  # repetitions in the largest group with one tool-call sequence
    answer_agreement: int  # repetitions in the largest group with one (normalised) final answer
    scores: list[float | str | None] = Field(default_factory=list)
    mean_score: float | None = None
    score_errors: int = 0


class ExperimentTable(BaseModel):
    experiment_id: str
    run_id: str
    from_branch: str
    step: int
    state: str
    max_cost_usd: float | None
    rows: list[VariantRow]
    branches: list[BranchFigures]


async def _branch_figures(store: CheckpointStore, status: ExperimentStatus, b: Any, fork_tools: int) -> BranchFigures:
    last = None if b.final_step is None else await store.load(checkpoint_id(status.run_id, b.branch, b.final_step))
    if last is None:  # not started, or no step of its own recorded yet
        last = await store.load_latest(status.run_id, b.branch)
    own_ledger = ((last.ledger or {}).get("branch") or {}) if last is not None else {}
    records = last.tool_call_cache[fork_tools:] if last is not None else []
    executed = list(records)  # every call the model made on the branch, cache-served ones too
    wall = (b.ended_at - b.started_at).total_seconds() if b.ended_at and b.started_at else None
    return BranchFigures(
        branch=b.branch, variant=b.variant, repetition=b.repetition, state=b.state,
        steps=(last.step_index - status.step) if last is not None else 0,
        prompt_tokens=int(own_ledger.get("prompt_tokens") or 0),
        completion_tokens=int(own_ledger.get("completion_tokens") or 0),
        total_tokens=int(own_ledger.get("total_tokens") or 0),
        cost_usd=float(own_ledger.get("cost_usd") or 0.0),
        wall_s=wall,
        tool_calls=dict(Counter(r.tool_name for r in executed)),
        tool_sequence=[call_text(r.tool_name, r.tool_input) for r in executed],
        final_answer=final_answer(last) if last is not None else None,
        score=b.score, score_error=b.score_error,
    )


def _row(status: ExperimentStatus, variant: Any, figures: list[BranchFigures]) -> VariantRow:
    finished = [f for f in figures if f.state in ("completed", "failed", "cancelled")]
    tools = sorted({t for f in figures for t in f.tool_calls})
    sequences = Counter(tuple(f.tool_sequence) for f in finished)
    answers = Counter(normalise_answer(f.final_answer) for f in finished if f.final_answer is not None)
    numeric = [f.score for f in figures if isinstance(f.score, (int, float))]
    return VariantRow(
        variant=variant.name,
        settings=variant.model_dump(exclude={"name"}, exclude_none=True, exclude_defaults=True),
        repetitions=len(figures), finished=len(finished),
        states=dict(Counter(f.state for f in figures)),
        steps=Figure.of([f.steps for f in figures]),
        total_tokens=Figure.of([f.total_tokens for f in figures]),
        cost_usd=Figure.of([f.cost_usd for f in figures]),
        wall_s=Figure.of([f.wall_s for f in figures if f.wall_s is not None]),
        final_answer_chars=Figure.of([len(f.final_answer) for f in figures if f.final_answer is not None]),
        tool_calls={t: Figure.of([f.tool_calls.get(t, 0) for f in figures]) for t in tools},
        distinct_tool_sequences=len(sequences),
        sequence_agreement=max(sequences.values(), default=0),
        answer_agreement=max(answers.values(), default=0),
        scores=[f.score for f in figures],
        mean_score=statistics.fmean(numeric) if numeric else None,
        score_errors=sum(1 for f in figures if f.score_error),
    )


async def experiment_table(store: CheckpointStore, status: ExperimentStatus) -> ExperimentTable:
    """The comparison of `status`'s variants, from the checkpoint store."""
    point = await resolve_step(store, status.run_id, status.from_branch, status.step)
    fork_tools = len((await store.load(point.checkpoint_id)).tool_call_cache)
    figures = [await _branch_figures(store, status, b, fork_tools) for b in status.branches]
    rows = [_row(status, v, [f for f in figures if f.variant == v.name]) for v in status.variants]
    return ExperimentTable(experiment_id=status.experiment_id, run_id=status.run_id, from_branch=status.from_branch,
                           step=status.step, state=status.state, max_cost_usd=status.max_cost_usd, rows=rows,
                           branches=figures)


def _pm(f: Figure, fmt: str = "{:.1f}") -> str:
    return fmt.format(f.mean) + (" ± " + fmt.format(f.spread) if f.spread else "")


def _cells(r: VariantRow) -> list[str]:
    tools = ", ".join(f"{t} {_pm(f)}" for t, f in r.tool_calls.items()) or "-"
    states = ", ".join(f"{n} {s}" for s, n in sorted(r.states.items()))
    score = "-" if not r.scores or all(s is None for s in r.scores) else (
        f"{r.mean_score:.3g}" if r.mean_score is not None else ", ".join(str(s) for s in r.scores))
    if r.score_errors:
        score += f" ({r.score_errors} failed)"
    return [r.variant, f"{r.repetitions}", states, _pm(r.steps), _pm(r.total_tokens, "{:.0f}"),
            usd(r.cost_usd.mean) + (f" ± {usd(r.cost_usd.spread)}" if r.cost_usd.spread else ""),
            _pm(r.wall_s, "{:.2f}") + " s" if r.wall_s.values else "-", tools, str(r.distinct_tool_sequences),
            f"{r.sequence_agreement}/{r.finished}", f"{r.answer_agreement}/{r.finished}",
            _pm(r.final_answer_chars, "{:.0f}"), score]


_HEADERS = ["variant", "reps", "outcome", "steps", "tokens", "cost", "wall", "tool calls", "sequences",
            "same calls", "same answer", "answer chars", "score"]


def table_markdown(table: ExperimentTable) -> str:
    lines = [f"Experiment {table.experiment_id}: run {table.run_id}, from step {table.step} of {table.from_branch} "
             f"({table.state})", "", "| " + " | ".join(_HEADERS) + " |", "|" + "---|" * len(_HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in table.rows]
    return "\n".join(lines)


def table_text(table: ExperimentTable) -> str:
    rows = [_HEADERS, *(_cells(r) for r in table.rows)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
    out = [f"experiment {table.experiment_id}: run {table.run_id}, from step {table.step} of {table.from_branch} "
           f"[{table.state}]" + (f", budget {usd(table.max_cost_usd)}" if table.max_cost_usd else "")]
    out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    out.append(f"  branches: {', '.join(b.branch for b in table.branches)}  (rewind diff {table.run_id} A B)")
    return "\n".join(out)


__all__ = ["ExperimentTable", "VariantRow", "BranchFigures", "Figure", "experiment_table", "table_text",
           "table_markdown", "normalise_answer"]
