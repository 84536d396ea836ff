"""Reading a run's checkpoints for people: the tree, one checkpoint, an export."""

from __future__ import annotations

import json

from workflows.vocabulary.text import usd
from typing import Any

from checkpoint_bridge.checkpoints.lineage import split_revision
from checkpoint_bridge.views.approval_text import decision_text
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import RunNotFoundError
from workflows.vocabulary.ids import parse_checkpoint_id, short_id, validate_id


async def tree(store: CheckpointStore, run_id: str) -> list[CheckpointSummary]:
    """Every checkpoint of a run, all branches, in order; RunNotFoundError if none."""
    validate_id("run", run_id)
    summaries = await store.list_checkpoints(run_id)
    if not summaries:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r} in {store.url}; check the id, REWIND_STORE, or run `rewind mirror {run_id}`")
    return summaries


async def subagent_info(store: CheckpointStore, summaries: list[CheckpointSummary]) -> dict[str, dict[str, Any]]:
    """Per sub-agent branch of the run: its agent, who called it and how its call ended, as
    the caller's checkpoint of the calling step records it ("running" while that step is
    not stored yet)."""
    first: dict[str, CheckpointSummary] = {}
    for s in summaries:
        if s.agent and s.agent.get("called_by") and s.branch_id not in first:
            first[s.branch_id] = s
    callers: dict[str, AgentCheckpoint | None] = {}
    known = {s.checkpoint_id for s in summaries}
    out: dict[str, dict[str, Any]] = {}
    for branch, s in first.items():
        agent = s.agent or {}
        called_by = str(agent["called_by"])
        if called_by not in callers:
            callers[called_by] = await store.load(called_by) if called_by in known else None
        caller = callers[called_by]
        record = next((r for r in (caller.tool_call_cache if caller else []) if (r.subagent or {}).get("branch_id") == branch),
                      None)
        sub = (record.subagent or {}) if record is not None else {}
        out[branch] = {"agent": agent.get("name"), "called_by": called_by, "tool_call_id": agent.get("tool_call_id"),
                       "depth": agent.get("depth"), "state": sub.get("state", "running"), "reason": sub.get("reason")}
    return out


def _fork_of(s: CheckpointSummary) -> str | None:
    """'main:2' when this checkpoint starts a branch (or revision) from another one."""
    if s.parent_id is None:
        return None
    _run, parent_branch, parent_step = parse_checkpoint_id(s.parent_id)
    return None if parent_branch == s.branch_id else f"{parent_branch}:{parent_step}"


def tree_json(summaries: list[CheckpointSummary], subagents: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Rows grouped by stored branch; a rolled-back branch's revisions are `main`, `main.r1`, ...;
    a sub-agent's run is a branch too, whose `branch_info` says who called it (`subagent_info`)."""
    branches: dict[str, list[dict[str, Any]]] = {}
    info: dict[str, dict[str, Any]] = {}
    for s in summaries:
        row = s.model_dump(mode="json", exclude={"agent"})
        row["short_id"] = short_id(s.checkpoint_id)
        row["fork_of"] = _fork_of(s)
        branches.setdefault(s.branch_id, []).append(row)
        name, revision = split_revision(s.branch_id)
        entry = info.setdefault(s.branch_id, {"name": name, "revision": revision, "forked_from": row["fork_of"]})
        entry.setdefault("forked_from", row["fork_of"])
        if subagents and s.branch_id in subagents:
            entry["subagent"] = subagents[s.branch_id]
    return {"run_id": summaries[0].run_id, "branches": branches, "branch_info": info}


def tree_text(summaries: list[CheckpointSummary], subagents: dict[str, dict[str, Any]] | None = None) -> str:
    """Branch by branch; each sub-agent's run nested (indented) under the step that called it."""
    subagents = subagents or {}
    # The id column is the checkpoint's own id, what `rewind show`, `export` and the Python API take.
    # Cost and tokens are the branch's totals up to each step, counted from step 0 (a fork's
    # include what it shares with its parent): the figures `rewind diff` calls "in all".
    lines = [f"run {summaries[0].run_id} (cost and tokens: totals up to each step, from step 0)"]
    width = max([14, *(len(s.branch_id) for s in summaries)])
    id_width = max([10, *(len(s.checkpoint_id) for s in summaries)])
    header = f"  {'step':>4}  {'branch':<{width}} {'status':<11} {'cost $':>10} {'tokens':>8}  {'id':<{id_width}}  label"
    lines.append(header)
    by_branch: dict[str, list[CheckpointSummary]] = {}
    for s in summaries:
        by_branch.setdefault(s.branch_id, []).append(s)
    called: dict[str, list[str]] = {}  # caller's checkpoint id -> the sub-agent branches it called
    for branch, info in subagents.items():
        if info["called_by"] in {s.checkpoint_id for s in summaries}:
            called.setdefault(info["called_by"], []).append(branch)
    nested = {b for bs in called.values() for b in bs}

    def show(branch: str, indent: str) -> None:
        steps = by_branch[branch]
        name, revision = split_revision(branch)
        origin = _fork_of(steps[0])
        info = subagents.get(branch)
        if info is not None:
            what = (f"sub-agent {info['agent']} (call {info['tool_call_id']} of {info['called_by']}): {info['state']}"
                    + (f" - {info['reason']}" if info.get("reason") else ""))
        else:
            what = f"branch {name}" + (f" (revision {revision}, after a rollback or a resume)" if revision else "")
            what += (f", forked from {origin}" if origin and not revision else "") + (
                f", continues from {origin}" if origin and revision else "")
        lines.append(f"  {indent}-- {what}")
        for s in steps:
            lines.append(
                f"  {indent}{s.step_index:>4}  {s.branch_id:<{width}} {s.status:<11} {s.llm_cost_usd:>10.6f} "
                f"{s.llm_tokens_used:>8}  {s.checkpoint_id:<{id_width}}  {s.step_label}"
            )
            for sub in sorted(called.get(s.checkpoint_id, [])):
                show(sub, indent + "    ")

    for branch in by_branch:
        if branch not in nested:
            show(branch, "")
    return "\n".join(lines)


def checkpoint_text(cp: AgentCheckpoint) -> str:
    lines = [
        f"checkpoint {cp.checkpoint_id}",
        f"  run {cp.run_id}, branch {cp.branch_id}, step {cp.step_index}: {cp.step_label} [{cp.status}]",
        f"  parent     {cp.parent_id or '-'}",
        f"  created    {cp.created_at.isoformat()}",
        f"  model      {cp.model or '-'}; tokens {cp.llm_tokens_used} ({cp.prompt_tokens} in / {cp.completion_tokens} out); cost {usd(cp.llm_cost_usd)}",
        f"  tool calls {len(cp.tool_call_cache)} ({sum(r.served_from_cache for r in cp.tool_call_cache)} from cache)",
    ]
    if cp.agent:
        a = cp.agent
        lines.append(f"  agent      {a.get('name')}" + (
            f", a sub-agent called by {a.get('called_by')} (call {a.get('tool_call_id')}, depth {a.get('depth')})"
            if a.get("called_by") else ""))
    if cp.error_info:
        lines.append(f"  error      {cp.error_info}")
    # The agent variables (`fork --set`): what the branch's prompts and tools read.
    for name, value in sorted(cp.agent_variables.items()):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
        lines.append(f"  variable   {name} = {text if len(text) <= 200 else text[:199] + '…'}")
    for r in cp.tool_call_cache:
        if r.subagent:
            s = r.subagent
            spent = s.get("ledger") or {}
            result = r.error if r.error else " ".join(str(r.tool_output or "").split())
            lines.append(f"  sub-agent  {r.tool_name} call {r.tool_call_id}: {s.get('state')}, branch {s.get('branch_id')}, "
                         f"{s.get('steps', 0)} step(s), {spent.get('total_tokens', 0)} tokens, "
                         f"{usd(float(spent.get('cost_usd') or 0))}: {result[:120]}")
        if r.answered_from:
            lines.append(f"  kept       {r.tool_name} call {r.tool_call_id}: its answer at {r.answered_from} (a redo)")
        if r.redo_of:
            lines.append(f"  redone     {r.tool_name} call {r.tool_call_id}: ran again in place of the one at {r.redo_of}")
        # Decisions, retries and reused effects: the calls a person, a failure or the lineage changed.
        if r.approval:
            a = r.approval
            line = f"  decision   {r.tool_name} call {r.tool_call_id}: {decision_text(a)} at {a.get('decided_at')}"
            if a.get("verdict") == "approved" and a.get("reason"):
                line += f" ({a['reason']})"
            if a.get("original_arguments") is not None:
                line += f"; asked {json.dumps(a['original_arguments'], ensure_ascii=False)[:120]}, ran {json.dumps(r.tool_input, ensure_ascii=False)[:120]}"
            lines.append(line)
        if r.mcp:
            # Why an MCP call was cached, reused, sent once or gated: the annotations that decided it.
            m = r.mcp
            hints = ", ".join(f"{k} {json.dumps(v)}" for k, v in sorted((m.get("annotations") or {}).items())
                              if k.endswith("Hint")) or "no annotations (the MCP defaults)"
            how = ("served from the run's cache" if r.served_from_cache else "reused" if r.reused
                   else "read-only" if not r.side_effects else "a side effect, " + (
                       "idempotent" if m.get("idempotent") else "sent once"))
            lines.append(f"  mcp        {r.tool_name} call {r.tool_call_id}: tool {m.get('tool')} of server "
                         f"{m.get('server')} ({m.get('server_version') or 'no version'}); {hints}: {how}")
        if r.attempts > 1:
            lines.append(f"  retried    {r.tool_name} call {r.tool_call_id}: answered at attempt {r.attempts}")
        if r.dry_run:
            lines.append(f"  dry run    {r.tool_name} call {r.tool_call_id}: not executed (a dry-run branch); "
                         f"answered {json.dumps(r.tool_output, ensure_ascii=False)[:120]}")
        if r.reused:
            u = r.reused
            where = f"step {u.get('step')} of {u.get('branch_id')}" if u.get("step") is not None else f"its lineage ({u.get('branch_id')})"
            lines.append(f"  reused     {r.tool_name} call {r.tool_call_id}: not run again; the result of the same effect at "
                         f"{where}, key {u.get('idempotency_key')} ({u.get('origin')})")
    lines.append(f"  messages ({len(cp.messages)}):")
    for m in cp.messages:
        content = m.get("content") or ""
        calls = m.get("tool_calls") or []
        text = " ".join(str(content).split())
        if calls:
            text += (" " if text else "") + "-> " + ", ".join(
                f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})" for c in calls
            )
        if len(text) > 160:
            text = text[:157] + "..."
        lines.append(f"    {m.get('role', '?'):<9} {text}")
    return "\n".join(lines)
