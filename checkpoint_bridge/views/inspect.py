"""Reading a run's checkpoints for people: the tree, one checkpoint, an export."""

from __future__ import annotations

import json

from workflows.text import usd
from typing import Any

from checkpoint_bridge.views.diff import decision_text
from checkpoint_bridge.lineage import split_revision
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary
from checkpoint_bridge.store import CheckpointStore
from workflows.errors import RunNotFoundError
from workflows.ids import parse_checkpoint_id, short_id, validate_id


async def tree(store: CheckpointStore, run_id: str) -> list[CheckpointSummary]:
    """Every checkpoint of a run, all branches, in order; RunNotFoundError if none."""
    validate_id("run", run_id)
    summaries = await store.list_checkpoints(run_id)
    if not summaries:
        raise RunNotFoundError(f"no checkpoints for run {run_id!r} in {store.url}; check the id, REWIND_STORE, or run `rewind mirror {run_id}`")
    return summaries


def _fork_of(s: CheckpointSummary) -> str | None:
    """'main:2' when this checkpoint starts a branch (or revision) from another one."""
    if s.parent_id is None:
        return None
    _run, parent_branch, parent_step = parse_checkpoint_id(s.parent_id)
    return None if parent_branch == s.branch_id else f"{parent_branch}:{parent_step}"


def tree_json(summaries: list[CheckpointSummary]) -> dict[str, Any]:
    """Rows grouped by stored branch; a rolled-back branch's revisions are `main`, `main.r1`, ..."""
    branches: dict[str, list[dict[str, Any]]] = {}
    info: dict[str, dict[str, Any]] = {}
    for s in summaries:
        row = s.model_dump(mode="json")
        row["short_id"] = short_id(s.checkpoint_id)
        row["fork_of"] = _fork_of(s)
        branches.setdefault(s.branch_id, []).append(row)
        name, revision = split_revision(s.branch_id)
        entry = info.setdefault(s.branch_id, {"name": name, "revision": revision, "forked_from": row["fork_of"]})
        entry.setdefault("forked_from", row["fork_of"])
    return {"run_id": summaries[0].run_id, "branches": branches, "branch_info": info}


def tree_text(summaries: list[CheckpointSummary]) -> str:
    lines = [f"run {summaries[0].run_id}"]
    header = f"  {'step':>4}  {'branch':<14} {'status':<11} {'cost $':>10} {'tokens':>8}  {'id':<10}  {'parent':<10}  label"
    lines.append(header)
    current = None
    for s in summaries:
        if s.branch_id != current:
            current = s.branch_id
            name, revision = split_revision(s.branch_id)
            origin = _fork_of(s)
            what = f"branch {name}" + (f" (revision {revision}, after a rollback)" if revision else "")
            lines.append(f"  -- {what}" + (f", forked from {origin}" if origin and not revision else "")
                         + (f", continues from {origin}" if origin and revision else ""))
        parent = short_id(s.parent_id) if s.parent_id else "-"
        lines.append(
            f"  {s.step_index:>4}  {s.branch_id:<14} {s.status:<11} {s.llm_cost_usd:>10.6f} {s.llm_tokens_used:>8}  "
            f"{short_id(s.checkpoint_id):<10}  {parent:<10}  {s.step_label}"
        )
    return "\n".join(lines)


def checkpoint_text(cp: AgentCheckpoint) -> str:
    lines = [
        f"checkpoint {cp.checkpoint_id} ({short_id(cp.checkpoint_id)})",
        f"  run {cp.run_id}, branch {cp.branch_id}, step {cp.step_index}: {cp.step_label} [{cp.status}]",
        f"  parent     {cp.parent_id or '-'}",
        f"  created    {cp.created_at.isoformat()}",
        f"  model      {cp.model or '-'}; tokens {cp.llm_tokens_used} ({cp.prompt_tokens} in / {cp.completion_tokens} out); cost {usd(cp.llm_cost_usd)}",
        f"  tool calls {len(cp.tool_call_cache)} ({sum(r.served_from_cache for r in cp.tool_call_cache)} from cache)",
    ]
    if cp.error_info:
        lines.append(f"  error      {cp.error_info}")
    for r in cp.tool_call_cache:
        # Decisions, retries and reused effects: the calls a person, a failure or the lineage changed.
        if r.approval:
            a = r.approval
            line = f"  decision   {r.tool_name} call {r.tool_call_id}: {decision_text(a)} at {a.get('decided_at')}"
            if a.get("verdict") == "approved" and a.get("reason"):
                line += f" ({a['reason']})"
            if a.get("original_arguments") is not None:
                line += f"; asked {json.dumps(a['original_arguments'], ensure_ascii=False)[:120]}, ran {json.dumps(r.tool_input, ensure_ascii=False)[:120]}"
            lines.append(line)
        if r.attempts > 1:
            lines.append(f"  retried    {r.tool_name} call {r.tool_call_id}: answered at attempt {r.attempts}")
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
