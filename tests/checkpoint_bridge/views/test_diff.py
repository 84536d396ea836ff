"""Diffing two branches of a run: fork point, per-side steps, tool calls, spend and answers."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from checkpoint_factory import T0, first_step

from checkpoint_bridge.views.diff import (
    BranchDiff,
    LineageError,
    diff_branches,
    diff_json,
    diff_text,
    fork_point,
)
from checkpoint_bridge.document.schema import AgentCheckpoint, ToolCallRecord
from workflows.vocabulary.ids import checkpoint_id

MAIN_PROMPT = "You are a careful analyst. Compare the companies using the search tool, then save a report."
ALT_PROMPT = "You are a terse analyst. Answer in one sentence."


def _step(parent: AgentCheckpoint, label: str, *, calls: tuple[dict[str, Any], ...] = (), answer: str | None = None,
          branch: str | None = None, prompt: int = 0, completion: int = 0, cost: float = 0.0,
          model: str | None = None, system: str | None = None, status: str = "completed",
          extra_records: tuple[ToolCallRecord, ...] = ()) -> AgentCheckpoint:
    """The step after ``parent``: one assistant message, its tool results and records.

    Each call is ``{"id", "tool", "args", **ToolCallRecord fields}``.
    """
    branch = branch or parent.branch_id
    step = parent.step_index + 1
    at = T0 + timedelta(seconds=step)
    messages = [dict(m) for m in parent.messages]
    if system is not None:
        messages[0] = {"role": "system", "content": system}
    assistant: dict[str, Any] = {"role": "assistant", "content": answer}
    if calls:
        assistant["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
            "name": c["tool"], "arguments": json.dumps(c["args"])}} for c in calls]
    messages.append(assistant)
    records = []
    for c in calls:
        fields = {k: v for k, v in c.items() if k not in ("id", "tool", "args")}
        fields.setdefault("tool_output", {"ok": True})
        records.append(ToolCallRecord(tool_name=c["tool"], tool_input=c["args"], tool_call_id=c["id"],
                                      called_at=at, duration_ms=0 if fields.get("served_from_cache") else 300,
                                      **fields))
        content = f"error: {fields['error']}" if fields.get("error") else json.dumps(fields["tool_output"])
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": content})
    return AgentCheckpoint(
        checkpoint_id=checkpoint_id(parent.run_id, branch, step), run_id=parent.run_id,
        parent_id=parent.checkpoint_id, branch_id=branch, step_index=step, step_label=label,
        messages=messages, tool_call_cache=[*parent.tool_call_cache, *records, *extra_records],
        created_at=at, status=status, model=model or parent.model,
        llm_tokens_used=parent.llm_tokens_used + prompt + completion,
        prompt_tokens=parent.prompt_tokens + prompt, completion_tokens=parent.completion_tokens + completion,
        llm_cost_usd=round(parent.llm_cost_usd + cost, 10),
    )


def _search(call_id: str, company: str, **fields: Any) -> dict[str, Any]:
    return {"id": call_id, "tool": "search_company", "args": {"company": company}, **fields}


def _start(branch: str = "main") -> AgentCheckpoint:
    return first_step(branch_id=branch, model="gpt-4o-mini", messages=[
        {"role": "system", "content": MAIN_PROMPT},
        {"role": "user", "content": "Which of Acme and Globex grew faster last year?"},
    ])


@pytest.fixture
def main() -> list[AgentCheckpoint]:
    s0 = _start()
    s1 = _step(s0, "search_company x2", calls=(_search("call_1a", "Acme"), _search("call_1b", "Globex")),
               prompt=350, completion=50, cost=0.0011)
    s2 = _step(s1, "save_report", calls=({"id": "call_2", "tool": "save_report", "args": {"title": "Acme vs Globex"},
                                          "side_effects": True},), prompt=200, completion=50, cost=0.0007)
    s3 = _step(s2, "final answer", answer="Globex grew faster (12% vs 7%).",
               prompt=150, completion=30, cost=0.0005)
    return [s0, s1, s2, s3]


@pytest.fixture
def alt(main: list[AgentCheckpoint]) -> list[AgentCheckpoint]:
    """Forked after main step 2 with a new prompt and model; re-asks for Acme (served from cache)."""
    s3 = _step(main[2], "search_company", branch="alt", system=ALT_PROMPT, model="gpt-4o",
               calls=(_search("call_a3", "Acme", served_from_cache=True),), prompt=900, completion=100, cost=0.004)
    s4 = _step(s3, "final answer", answer="Acme grew faster.", prompt=700, completion=60, cost=0.003)
    return [*main[:3], s3, s4]


@pytest.fixture
def alt2(alt: list[AgentCheckpoint]) -> list[AgentCheckpoint]:
    """Forked from "alt" after its step 3; its tool call fails and so does the step."""
    s4 = _step(alt[3], "search_company", branch="alt2", status="failed", prompt=800, completion=40, cost=0.0025,
               calls=(_search("call_b4", "Initech", error="HTTP 503 from the registry"),))
    return [*alt[:4], s4]


def test_fork_point_is_the_last_shared_checkpoint(main, alt, alt2) -> None:
    assert fork_point(main, alt).checkpoint_id == "run-1:main:2"
    assert fork_point(alt, main).checkpoint_id == "run-1:main:2"
    assert fork_point(alt, alt2).checkpoint_id == "run-1:alt:3"
    assert fork_point(main, alt2).checkpoint_id == "run-1:main:2"


def test_a_fork_with_a_new_prompt_and_model(main, alt) -> None:
    d = diff_branches("run-1", "main", main, "alt", alt)
    assert d.fork_point is not None
    assert (d.fork_point.checkpoint_id, d.fork_point.step_index, d.fork_point.step_label) == (
        "run-1:main:2", 2, "save_report")

    assert [(s.step_index, s.step_label, s.checkpoint_id) for s in d.a.steps] == [(3, "final answer", "run-1:main:3")]
    assert d.a.tool_calls == []
    assert (d.a.tool_calls_executed, d.a.tool_calls_from_cache, d.a.tool_errors) == (0, 0, 0)
    assert (d.a.tokens.total, d.a.tokens.prompt, d.a.tokens.completion) == (180, 150, 30)
    assert d.a.cost_usd == 0.0005
    assert (d.a.model, d.a.system_prompt) == ("gpt-4o-mini", MAIN_PROMPT)

    assert [s.checkpoint_id for s in d.b.steps] == ["run-1:alt:3", "run-1:alt:4"]
    [call] = d.b.tool_calls
    assert (call.step_index, call.tool_name, call.arguments, call.served_from_cache, call.error) == (
        3, "search_company", 'company="Acme"', True, None)
    assert (d.b.tool_calls_executed, d.b.tool_calls_from_cache, d.b.tool_errors) == (0, 1, 0)
    assert (d.b.tokens.total, d.b.tokens.prompt, d.b.tokens.completion) == (1760, 1600, 160)
    assert d.b.cost_usd == 0.007
    assert (d.b.model, d.b.system_prompt) == ("gpt-4o", ALT_PROMPT)

    assert d.a.final_answer == "Globex grew faster (12% vs 7%)."
    assert d.b.final_answer == "Acme grew faster."
    assert d.same_final_answer is False


def test_a_fork_of_a_fork_that_failed(main, alt, alt2) -> None:
    d = diff_branches("run-1", "alt", alt, "alt2", alt2)
    assert d.fork_point is not None and d.fork_point.checkpoint_id == "run-1:alt:3"
    assert [s.step_index for s in d.a.steps] == [4]
    assert [(s.step_index, s.status) for s in d.b.steps] == [(4, "failed")]
    assert d.b.head_status == "failed"
    assert d.b.final_answer is None and d.same_final_answer is False
    [call] = d.b.tool_calls
    assert (call.step_index, call.error, call.served_from_cache) == (4, "HTTP 503 from the registry", False)
    assert (d.b.tool_calls_executed, d.b.tool_calls_from_cache, d.b.tool_errors) == (1, 0, 1)
    assert (d.b.tokens.total, d.b.cost_usd) == (840, 0.0025)
    assert d.a.system_prompt == d.b.system_prompt == ALT_PROMPT

    d = diff_branches("run-1", "main", main, "alt2", alt2)
    assert d.fork_point is not None and d.fork_point.checkpoint_id == "run-1:main:2"
    assert [s.checkpoint_id for s in d.b.steps] == ["run-1:alt:3", "run-1:alt2:4"]
    assert [c.step_index for c in d.b.tool_calls] == [3, 4]
    assert (d.b.tool_calls_executed, d.b.tool_calls_from_cache, d.b.tool_errors) == (1, 1, 1)
    assert d.b.cost_usd == 0.0065


def test_branches_with_no_common_checkpoint_count_from_step_zero(main) -> None:
    other = [_start("retry")]
    other.append(_step(other[0], "final answer", answer="No idea.", prompt=40, completion=5, cost=0.0001))
    assert fork_point(main, other) is None
    d = diff_branches("run-1", "main", main, "retry", other)
    assert d.fork_point is None
    assert [s.step_index for s in d.a.steps] == [0, 1, 2, 3]
    assert [(c.step_index, c.tool_name) for c in d.a.tool_calls] == [
        (1, "search_company"), (1, "search_company"), (2, "save_report")]
    assert [c.side_effects for c in d.a.tool_calls] == [False, False, True]
    assert (d.a.tool_calls_executed, d.a.tokens.total, d.a.cost_usd) == (3, 830, 0.0023)
    assert (d.b.tokens.total, d.b.cost_usd, d.b.final_answer) == (45, 0.0001, "No idea.")
    assert "fork point: none" in diff_text(d)


def test_the_same_branch_twice_has_empty_sides(main) -> None:
    d = diff_branches("run-1", "main", main, "main", main)
    assert d.fork_point is not None and d.fork_point.checkpoint_id == "run-1:main:3"
    for side in (d.a, d.b):
        assert side.steps == [] and side.tool_calls == []
        assert (side.tokens.total, side.cost_usd) == (0, 0.0)
        assert side.final_answer == "Globex grew faster (12% vs 7%)."
    assert d.same_final_answer is True
    assert "≠" not in diff_text(d)


def test_a_prefix_forks_at_the_shorter_head(main) -> None:
    d = diff_branches("run-1", "main@2", main[:3], "main", main)
    assert d.fork_point is not None and d.fork_point.checkpoint_id == "run-1:main:2"
    assert d.a.steps == [] and d.a.final_answer is None  # its head asked for a tool
    assert [s.step_index for s in d.b.steps] == [3]
    assert (d.b.tokens.total, d.b.cost_usd) == (180, 0.0005)
    assert d.same_final_answer is False


def test_an_invalidated_checkpoint_is_refused_by_id(main, alt) -> None:
    bad = [*main[:3], main[3].model_copy(update={"status": "invalidated"})]
    with pytest.raises(ValueError, match="run-1:main:3.*invalidated"):
        diff_branches("run-1", "main", bad, "alt", alt)
    with pytest.raises(LineageError, match="run-1:main:3"):
        fork_point(alt, bad)


def test_a_broken_or_empty_lineage_is_refused(main) -> None:
    with pytest.raises(LineageError, match="parent"):
        diff_branches("run-1", "main", [main[0], main[2]], "main", main)
    with pytest.raises(LineageError, match="empty"):
        diff_branches("run-1", "main", [], "main", main)
    with pytest.raises(LineageError, match="not of run 'run-2'"):
        diff_branches("run-2", "main", main, "main", main)


def test_a_record_no_model_message_names_has_the_step_that_recorded_it(main) -> None:
    """A pipeline's tool call is in no assistant message: its row says the step whose record holds it."""
    orphan = ToolCallRecord(tool_name="lookup", tool_input={"q": "x"}, called_at=T0, tool_call_id="call_gone")
    head = _step(main[2], "final answer", branch="b", answer="Done.", extra_records=(orphan,))
    d = diff_branches("run-1", "main", main, "b", [*main[:3], head])
    assert [(c.tool_name, c.step_index) for c in d.b.tool_calls] == [("lookup", head.step_index)]


def test_diff_json_round_trips(main, alt2) -> None:
    d = diff_branches("run-1", "main", main, "alt2", alt2)
    data = diff_json(d)
    assert json.loads(json.dumps(data)) == data
    assert BranchDiff.model_validate(data) == d
    assert data["fork_point"] == {"checkpoint_id": "run-1:main:2", "step_index": 2, "step_label": "save_report"}
    assert data["b"]["tool_calls"][1]["error"] == "HTTP 503 from the registry"
    assert diff_json(diff_branches("run-1", "a", main, "b", [_start("b")]))["fork_point"] is None


def test_diff_text_shows_both_sides_within_the_width(main, alt) -> None:
    d = diff_branches("run-1", "main", main, "alt", alt)
    text = diff_text(d)
    assert "diff of run run-1: main vs alt" in text
    assert "fork point: step 2 (save_report) run-1:main:2" in text
    assert "Globex grew faster (12% vs 7%)." in text
    assert "Acme grew faster." in text
    assert '3  search_company(company="Acme") [cache]' in text
    lines = text.splitlines()
    assert max(map(len, lines)) <= 100
    for label in ("model", "system prompt", "final answer"):
        assert "≠" in next(line for line in lines if line.startswith(label))
    assert "≠" not in next(line for line in lines if line.startswith("head"))


@pytest.mark.parametrize("width", [60, 72, 100, 160])
def test_long_content_is_shortened_to_fit(main, width) -> None:
    long_answer = " ".join(f"word{i}" for i in range(600))
    fork = _step(main[2], "search_company", branch="long", system="x" * 500,
                 calls=(_search("call_l3", "A" * 300, error="E" * 400),))
    fork2 = _step(fork, "final answer", answer=long_answer)
    d = diff_branches("run-1", "main", main, "long-branch-" + "n" * 120, [*main[:3], fork, fork2])
    [call] = d.b.tool_calls
    assert len(call.arguments) <= 40 and call.arguments.endswith("…")
    text = diff_text(d, width=width)
    assert max(map(len, text.splitlines())) <= width
    assert "word0" in text and "word599" not in text and "…" in text
    assert "[error]" in text


def test_diff_text_refuses_a_width_too_narrow_for_two_columns(main) -> None:
    with pytest.raises(ValueError, match="width 20"):
        diff_text(diff_branches("run-1", "main", main, "main", main), width=20)


def test_two_long_answers_that_differ_late_show_the_difference_at_80_columns(main) -> None:
    shared = " ".join(f"Finding {i}: revenue grew and margins held." for i in range(12))
    a = _step(main[2], "final answer", branch="main", answer=shared + " Verdict: buy Globex, sell Acme.")
    b = _step(main[2], "final answer", branch="alt", answer=shared + " Verdict: hold Initech for now.")
    d = diff_branches("run-1", "main", [*main[:3], a], "alt", [*main[:3], b])
    text = diff_text(d, width=80)
    assert max(map(len, text.splitlines())) <= 80
    answer = text[text.index("\nfinal answer") + 1:]
    assert "≠" in answer.splitlines()[0]
    assert "buy Globex" in answer and "hold Initech" in answer, answer
    assert "… " in answer  # the shared beginning is cut, and says so
    # The heads name their branch and step, not the run again, so the status fits.
    assert "main:3 (completed)" in text and "alt:3 (completed)" in text


def test_texts_that_differ_early_are_shown_from_the_start() -> None:
    from checkpoint_bridge.views.diff import aligned_pair, first_difference

    assert first_difference("abc", "abd") == 2 and first_difference("ab", "abc") == 2 and first_difference("a", "a") == 1
    left, right = aligned_pair("Acme grew faster.", "Globex grew faster.", 30)
    assert left == ["Acme grew faster."] and right == ["Globex grew faster."]


def test_spend_is_said_after_the_fork_point_and_in_all_as_tree_counts(main, alt) -> None:
    d = diff_branches("run-1", "main", main, "alt", alt)
    # After the fork point (main:2): each head's total minus the fork point's.
    assert (d.a.tokens.total, d.b.tokens.total) == (180, 1760)
    # In all: the head's own totals, what `rewind tree` prints at main:3 and alt:4.
    assert (d.a.tokens_in_all.total, d.a.cost_usd_in_all) == (main[-1].llm_tokens_used, main[-1].llm_cost_usd)
    assert (d.b.tokens_in_all.total, d.b.cost_usd_in_all) == (alt[-1].llm_tokens_used, alt[-1].llm_cost_usd)
    text = diff_text(d)
    assert "spent after the fork point (step 2); \"in all\" counts from step 0, as `rewind tree` does" in text
    in_all = next(line for line in text.splitlines() if line.startswith("in all"))
    assert f"{main[-1].llm_tokens_used} tokens" in in_all and f"{alt[-1].llm_tokens_used} tokens" in in_all, in_all
    # With no shared checkpoint, what is spent is the whole: one figure, said so.
    other = [_start(branch="other")]
    alone = diff_text(diff_branches("run-1", "main", main, "other", other))
    assert "spent from step 0, as `rewind tree` counts" in alone and "in all" not in alone
