"""`rewind show`'s text: what a person reads of one checkpoint."""

from __future__ import annotations

from checkpoint_factory import first_step

from checkpoint_bridge.views.inspect import checkpoint_text


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
