"""Runs as rows: one row per step a run's branches did, for DuckDB, pandas or `rewind stats --by`.

Drawn from the store alone, as `rewind stats` is (one read per step object, no chain
replayed), and counted the same way, so the rows add up to its totals: every stored step
after a branch's start (step 0, the task, did no work), on every branch (forks count their
own steps only, rolled-back steps count: they were paid for, a sub-agent's run counts at
its own steps with its own model and agent, its caller's ledger leaving it out).

The final answer is read from the step that gave it (one more small read per branch that
ended). Experiment scores are not in the store (a scorer's results are the score
workflow's, in Temporal): a step of an experiment's branch names its experiment, variant
and repetition, which join with `rewind experiment show --score --json`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from checkpoint_bridge.checkpoints.lineage import display_name, top_branch
from checkpoint_bridge.checkpoints.store import CheckpointStore, StepFacts
from checkpoint_bridge.document.schema import code_run
from workflows.vocabulary.contracts import Ledger
from workflows.vocabulary.experiments import parse_branch_name
from workflows.vocabulary.ids import checkpoint_id, parse_subagent_branch
from workflows.vocabulary.tool_calls import is_failed_after_retries


class ToolCallFacts(BaseModel):
    """One tool call a step recorded."""

    tool: str
    cached: bool = False  # served from the run's cache (read-only, asked before)
    reused: bool = False  # a side effect the lineage had caused: its result, not run again
    failed: bool = False  # failed after its retries (the model got the error)
    subagent: bool = False  # a sub-agent's run (its own steps are rows of its branch)
    retries: int = 0  # attempts beyond the first
    duration_ms: int = 0
    node: str | None = None  # a graph run's: the node that made the call


class NodeFacts(BaseModel):
    """A node a graph run's super-step ran: its own time and its model calls' spending."""

    name: str
    seconds: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0


class StepRow(BaseModel):
    """One step of one branch: what it did, spent and took."""

    run_id: str
    branch_id: str  # as stored: `main`, `alt`, a revision `main.r1`, a sub-agent's `main.s3-call_1`
    branch: str  # the branch name it counts under (`rewind stats`' by_branch): revisions and sub-agents folded in
    step: int
    label: str
    status: str  # completed, failed, in_progress, invalidated (a rollback discarded it)
    created_at: datetime | None
    duration_ms: float | None  # from the previous checkpoint of the same branch (None: its first own step)
    kind: str  # agent or pipeline
    agent: str | None  # the declared agent (a sub-agent's run: its own), or the pipeline's name
    subagent: bool  # a step of a sub-agent's run
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float
    model_calls: int
    tool_calls: int  # executed (a sub-agent's calls count at its own steps)
    cache_hits: int
    tools: list[str] = Field(default_factory=list)  # the tool of each call the step recorded, in order
    calls: list[ToolCallFacts] = Field(default_factory=list)  # those calls, one by one
    tool_errors: int = 0  # calls that failed after their retries
    model_retries: int = 0  # attempts beyond the first
    tool_retries: int = 0
    retries: int = 0  # model_retries + tool_retries
    errors: list[str] = Field(default_factory=list)  # the step's failure, each tool call's error
    final_answer: str | None = None  # the step that gave the run's (or a sub-agent's) answer
    experiment: str | None = None  # a branch of `rewind experiment`: which, its variant and repetition
    variant: str | None = None
    repetition: int | None = None
    nodes: list[NodeFacts] = Field(default_factory=list)  # a graph run's super-step: the nodes it ran


def created_at(fields: dict[str, Any]) -> datetime | None:
    """When a step object's checkpoint was made (None: not recorded, or not a time)."""
    value = fields.get("created_at")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        return None


def _agent(fields: dict[str, Any]) -> tuple[str, str | None]:
    if (runs := code_run(fields.get("pipeline"))) is not None:
        return runs
    if isinstance(fields.get("agent"), dict):
        return "agent", fields["agent"].get("name")
    return "agent", None


def rows_of(facts: list[StepFacts]) -> list[StepRow]:
    """The rows of one run's steps (``CheckpointStore.step_facts``), final answers left unread."""
    rows: list[StepRow] = []
    created: dict[str, datetime | None] = {}
    pipelines: dict[str, str] = {}  # branch -> pipeline name (its start and result steps name no call)
    for f in facts:
        fields = f.fields
        branch, step = fields["branch_id"], int(fields["step_index"])
        cid = checkpoint_id(fields["run_id"], branch, step)
        created[cid] = when = created_at(fields)
        kind, agent = _agent(fields)
        if kind in ("pipeline", "graph") and agent:
            pipelines[branch] = agent
        if step == 0:
            continue  # the start: a task, no work
        duration = None
        parent = fields.get("parent_id")
        if parent is not None and parent.rsplit(":", 2)[1] == branch:
            start = created.get(parent)
            if start is not None and when is not None:
                duration = (when - start).total_seconds() * 1000
        ledger = Ledger.model_validate(((fields.get("ledger") or {}).get("step")) or {}).own()
        tool_retries = sum(int(r.get("attempts") or 1) - 1 for r in f.tool_records)
        errors = []
        if fields.get("status") == "failed" and fields.get("error_info"):
            errors.append(str(fields["error_info"].get("reason") or fields["error_info"]))
        errors += [str(r["error"]) for r in f.tool_records if r.get("error")]
        experiment = parse_branch_name(display_name(branch)) or {}
        graph = fields["pipeline"] if kind == "graph" else {}
        node_of = {e.get("tool_call_id"): e.get("node") for e in graph.get("calls") or [] if e.get("tool_call_id")}
        rows.append(StepRow(
            run_id=fields["run_id"], branch_id=branch, branch=top_branch(branch), step=step,
            label=fields.get("step_label") or "", status="invalidated" if f.invalidated else fields.get("status") or "completed",
            created_at=when, duration_ms=duration, kind=kind, agent=agent, subagent=parse_subagent_branch(branch) is not None,
            model=fields.get("model") or None, prompt_tokens=ledger.prompt_tokens,
            completion_tokens=ledger.completion_tokens, total_tokens=ledger.total_tokens, cost_usd=ledger.cost_usd,
            model_calls=ledger.model_calls, tool_calls=ledger.tool_calls, cache_hits=ledger.cache_hits,
            tools=[str(r.get("tool_name")) for r in f.tool_records],
            calls=[ToolCallFacts(tool=str(r.get("tool_name")), cached=bool(r.get("served_from_cache")),
                                 reused=bool(r.get("reused")), failed=is_failed_after_retries(r),
                                 subagent=bool(r.get("subagent")),
                                 retries=int(r.get("attempts") or 1) - 1, duration_ms=int(r.get("duration_ms") or 0),
                                 node=node_of.get(r.get("tool_call_id")))
                   for r in f.tool_records],
            tool_errors=sum(1 for r in f.tool_records if is_failed_after_retries(r)),
            model_retries=ledger.model_retries, tool_retries=tool_retries, retries=ledger.model_retries + tool_retries,
            errors=errors, experiment=experiment.get("experiment"), variant=experiment.get("variant"),
            repetition=experiment.get("repetition"), nodes=_nodes(graph),
        ))
    for row in rows:  # a pipeline's start and result steps: the pipeline its calls name
        if row.agent is None and row.branch_id in pipelines:
            row.kind, row.agent = "pipeline", pipelines[row.branch_id]
    return rows


def _nodes(graph: dict[str, Any]) -> list[NodeFacts]:
    """The nodes of a graph's super-step, each with its model calls' tokens and cost."""
    seconds = graph.get("node_seconds") or {}
    out = []
    for name in graph.get("nodes") or []:
        calls = [e for e in graph.get("calls") or [] if e.get("node") == name]
        # Its model calls: each routed one, and those of its node-level activities.
        mine = [e for e in calls if e.get("kind") == "llm"] + [m for e in calls if e.get("kind") == "node"
                                                                 for m in e.get("model_calls") or []]
        out.append(NodeFacts(name=name, seconds=float(seconds.get(name) or 0.0), model_calls=len(mine),
                             prompt_tokens=sum(int(e.get("prompt_tokens") or 0) for e in mine),
                             completion_tokens=sum(int(e.get("completion_tokens") or 0) for e in mine),
                             cost_usd=sum(float(e.get("cost_usd") or 0.0) for e in mine)))
    return out


async def step_rows(store: CheckpointStore, run_ids: list[str]) -> list[StepRow]:
    """Every step row of the runs, run by run, each run's branches in creation order, then by step."""
    from checkpoint_bridge.document.schema import AgentCheckpoint, final_answer

    rows: list[StepRow] = []
    for run_id in run_ids:
        found = rows_of(await store.step_facts(run_id))
        ends = [r for r in found if r.label in ("final answer", "result")]
        read = await store.step_ends([checkpoint_id(r.run_id, r.branch_id, r.step) for r in ends])
        for row, end in zip(ends, read, strict=True):
            last = end.last_message or {}
            # final_answer's rule on the step's own fields and its last message.
            probe = AgentCheckpoint.model_construct(step_label=row.label, pipeline=end.fields.get("pipeline"),
                                                    messages=[last] if last else [])
            row.final_answer = final_answer(probe)
        rows += found
    return rows


__all__ = ["StepRow", "ToolCallFacts", "created_at", "rows_of", "step_rows"]
