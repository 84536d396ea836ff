"""`rewind tree --format mermaid|dot`: the tree of branches and revisions as a graph."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from checkpoint_bridge.document.schema import CheckpointSummary
from checkpoint_bridge.views.tree_graph import tree_dot, tree_mermaid

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _s(branch: str, step: int, parent: str | None, label: str, status: str = "completed") -> CheckpointSummary:
    return CheckpointSummary(checkpoint_id=f"r1:{branch}:{step}", run_id="r1", branch_id=branch, parent_id=parent,
                             step_index=step, step_label=label, status=status, llm_cost_usd=0.0,  # type: ignore[arg-type]
                             llm_tokens_used=0, created_at=T0)


# main 0..3, rolled back to 1 (2 and 3 invalidated, continued as main.r1), and a fork "tech" from main:1.
TREE = [
    _s("main", 0, None, "start"), _s("main", 1, "r1:main:0", "search_company x5"),
    _s("main", 2, "r1:main:1", 'save_report "draft"', "invalidated"), _s("main", 3, "r1:main:2", "final answer", "invalidated"),
    _s("main.r1", 2, "r1:main:1", "save_report"), _s("main.r1", 3, "r1:main.r1:2", "final answer"),
    _s("tech", 2, "r1:main:1", "save_report"),
]


def test_mermaid_draws_branches_revisions_fork_and_rollback_edges():
    text = tree_mermaid(TREE)
    assert text.startswith("flowchart LR\n")
    assert re.findall(r'subgraph \w+\["([^"]+)"\]', text) == ["main", "main.r1", "tech"]
    assert text.count("\n  end") == 3
    assert "n_main_1 -->|fork| n_tech_2" in text and "n_main_1 -->|rollback| n_main_r1_2" in text
    assert "n_main_0 --> n_main_1" in text and "n_main_r1_2 --> n_main_r1_3" in text
    assert "class n_main_2,n_main_3 dropped" in text
    assert 'save_report #quot;draft#quot; (invalidated)' in text  # quotes cannot end a label
    node_ids = re.findall(r"^\s+(n_\w+)\[", text, re.M)
    assert len(node_ids) == len(set(node_ids)) == len(TREE)


def test_dot_is_one_cluster_per_branch_with_dashed_dropped_steps():
    text = tree_dot(TREE)
    assert text.startswith('digraph "r1" {') and text.endswith("}")
    assert text.count("{") == text.count("}") == 4  # the graph and three clusters
    assert re.findall(r'label="([^"]+)";', text) == ["main", "main.r1", "tech"]
    assert '"r1:main:1" -> "r1:tech:2" [label="fork", style=bold];' in text
    assert '"r1:main:1" -> "r1:main.r1:2" [label="rollback", style=bold];' in text
    assert '"r1:main:2" [label="2: save_report \\"draft\\" (invalidated)", style=dashed, fontcolor=gray];' in text
    assert len(re.findall(r" -> ", text)) == len(TREE) - 1  # every checkpoint but the root has its parent's edge


def test_long_labels_are_shortened_and_a_fork_whose_parent_is_elsewhere_has_no_dangling_edge():
    lone = [_s("tech", 2, "r1:main:1", "x" * 100)]
    assert "-->" not in tree_mermaid(lone) and "->" not in tree_dot(lone)
    assert "x" * 39 + "…" in tree_mermaid(lone)
