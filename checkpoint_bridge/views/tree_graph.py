"""A run's tree of checkpoints as a graph for docs and terminals: Mermaid or Graphviz DOT.

One node per checkpoint, one cluster per stored branch (a rollback's revisions
are clusters of their own, named `main.r1`, ...), an edge from each checkpoint
to its parent's child; the edge that starts a branch is labelled `fork`, the
one that starts a revision `rollback`; a sub-agent's run starts with an edge
`calls NAME` from the caller's step that called it. Invalidated and failed steps are drawn
dashed. Drawn from the store alone (`rewind tree RUN --format mermaid|dot`).
"""

from __future__ import annotations

import re

from checkpoint_bridge.checkpoints.lineage import split_revision
from checkpoint_bridge.document.schema import CheckpointSummary
from workflows.vocabulary.ids import parse_checkpoint_id

LABEL_CHARS = 40


def _label(s: CheckpointSummary) -> str:
    text = " ".join(s.step_label.split()) or "-"
    if len(text) > LABEL_CHARS:
        text = text[: LABEL_CHARS - 1] + "…"
    return f"{s.step_index}: {text}" + ("" if s.status == "completed" else f" ({s.status})")


def _edge_kind(s: CheckpointSummary) -> str | None:
    """None for a step after its own branch's previous step; else how the branch began."""
    if s.parent_id is None:
        return None
    _run, parent_branch, _step = parse_checkpoint_id(s.parent_id)
    if parent_branch == s.branch_id:
        return None
    return "rollback" if split_revision(s.branch_id)[1] else "fork"


def _called_by(s: CheckpointSummary, known: set[str]) -> str | None:
    """The caller's checkpoint a sub-agent's run begins from (drawn as a `calls` edge)."""
    caller = (s.agent or {}).get("called_by")
    return caller if s.parent_id is None and caller in known else None


def _node(checkpoint_id: str) -> str:
    return "n_" + re.sub(r"[^A-Za-z0-9_]", "_", checkpoint_id.split(":", 1)[1])


def _branches(summaries: list[CheckpointSummary]) -> dict[str, list[CheckpointSummary]]:
    out: dict[str, list[CheckpointSummary]] = {}
    for s in summaries:
        out.setdefault(s.branch_id, []).append(s)
    return out


def tree_mermaid(summaries: list[CheckpointSummary]) -> str:
    def text(value: str) -> str:
        return value.replace('"', "#quot;")

    known = {s.checkpoint_id for s in summaries}
    lines = ["flowchart LR"]
    for branch, steps in _branches(summaries).items():
        lines.append(f'  subgraph {_node("x:" + branch)}["{text(branch)}"]')
        lines += [f'    {_node(s.checkpoint_id)}["{text(_label(s))}"]' for s in steps]
        lines.append("  end")
    dashed = []
    for s in summaries:
        if s.parent_id in known:
            kind = _edge_kind(s)
            arrow = f"-->|{kind}|" if kind else "-->"
            lines.append(f"  {_node(s.parent_id)} {arrow} {_node(s.checkpoint_id)}")  # type: ignore[arg-type]
        caller = _called_by(s, known)
        if caller is not None:
            lines.append(f'  {_node(caller)} -.->|"{text("calls " + str((s.agent or {}).get("name")))}"| {_node(s.checkpoint_id)}')
        if s.status in ("invalidated", "failed"):
            dashed.append(_node(s.checkpoint_id))
    if dashed:
        lines.append("  classDef dropped stroke-dasharray: 5 5,color:#888")
        lines.append(f"  class {','.join(dashed)} dropped")
    return "\n".join(lines)


def tree_dot(summaries: list[CheckpointSummary]) -> str:
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    known = {s.checkpoint_id for s in summaries}
    lines = [f"digraph {quoted(summaries[0].run_id)} {{", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for index, (branch, steps) in enumerate(_branches(summaries).items()):
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    label={quoted(branch)};")
        for s in steps:
            style = ", style=dashed, fontcolor=gray" if s.status in ("invalidated", "failed") else ""
            lines.append(f"    {quoted(s.checkpoint_id)} [label={quoted(_label(s))}{style}];")
        lines.append("  }")
    for s in summaries:
        if s.parent_id in known:
            kind = _edge_kind(s)
            attrs = f" [label={quoted(kind)}, style=bold]" if kind else ""
            lines.append(f"  {quoted(s.parent_id)} -> {quoted(s.checkpoint_id)}{attrs};")  # type: ignore[arg-type]
        caller = _called_by(s, known)
        if caller is not None:
            label = quoted("calls " + str((s.agent or {}).get("name")))
            lines.append(f"  {quoted(caller)} -> {quoted(s.checkpoint_id)} [label={label}, style=dotted];")
    lines.append("}")
    return "\n".join(lines)


__all__ = ["tree_mermaid", "tree_dot"]
