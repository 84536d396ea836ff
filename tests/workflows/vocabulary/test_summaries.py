"""Activity summaries: what the Temporal UI shows, and the step `rewind status` reads back."""

from __future__ import annotations

from workflows.vocabulary.summaries import model_call_summary, summary_step, tool_call_summary


def test_the_step_of_a_summary_is_read_back() -> None:
    assert summary_step(tool_call_summary(12, "search", {"q": "x"})) == 12
    assert summary_step(model_call_summary(3, "gpt-4o-mini")) == 3
    assert summary_step(tool_call_summary(4, "search", {}, what="check")) == 4


def test_other_summaries_have_no_step() -> None:
    for text in ("checkpoint of step 3", "step x: a", "step 3 no colon", "", "fork b from step 2 of main"):
        assert summary_step(text) is None, text
