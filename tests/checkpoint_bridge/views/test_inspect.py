"""`rewind show`'s text: what a person reads of one checkpoint."""

from __future__ import annotations

from checkpoint_factory import first_step, next_step

from checkpoint_bridge.document.schema import CheckpointSummary
from checkpoint_bridge.views.inspect import checkpoint_text, tree_text
from workflows.vocabulary.ids import parse_checkpoint_id


def test_show_prints_the_agent_variables() -> None:
    cp = first_step(agent_variables={"tone": "formal", "depth": 3, "filters": {"region": "EU"}})
    text = checkpoint_text(cp)
    assert "  variable   depth = 3" in text
    assert '  variable   filters = {"region": "EU"}' in text
    assert '  variable   tone = "formal"' in text
    assert "variable" not in checkpoint_text(first_step(agent_variables={}))


def test_a_long_variable_is_cut_to_one_line() -> None:
    text = checkpoint_text(first_step(agent_variables={"notes": "x" * 1000}))
    line = next(line for line in text.splitlines() if "variable   notes" in line)
    assert len(line) < 240 and line.endswith("…")


def test_the_tree_prints_ids_that_show_takes() -> None:
    run = [first_step(run_id="run-20261206-071829-abc123")]
    run.append(next_step(run[0]))
    run.append(next_step(run[1], branch_id="terse"))
    summaries = [CheckpointSummary(**cp.model_dump(include=set(CheckpointSummary.model_fields))) for cp in run]
    text = tree_text(summaries)
    first, header, *rows = text.splitlines()
    assert "cost and tokens: totals up to each step, from step 0" in first, first
    column = header.index(" id ") + 1
    ids = [row[column:].split()[0] for row in rows if not row.strip().startswith("--")]
    assert ids == [cp.checkpoint_id for cp in run], text
    for cid in ids:
        parse_checkpoint_id(cid)  # what `rewind show` and `rewind export` check first
