"""A model call's fitted view counted from what is new (activities/model/prompt_fit.py) is the one
`compress_messages` gives for the whole conversation."""

from __future__ import annotations

import hashlib
import json

from activities.model.context_budget import message_budget
from activities.model.context_window import compress_messages
from activities.model.prompt_fit import INLINE_CHARS, PromptFitter

MODEL = "gpt-4o"


def _head(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def _turn(i: int, output: str) -> list[dict]:
    return [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "look", "arguments": json.dumps({"i": i})}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": output},
    ]


async def _walk(fitter: PromptFitter, turns: list[list[dict]], budget: int) -> None:
    """Call after call, as the model activity does, each checked against the full count."""
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}]
    base: list[dict] = []
    base_head = None
    for new in [conversation, *turns]:
        sent = [*base, *new]
        head = _head(sent)
        got = await fitter.fit(list(sent), model=MODEL, budget_tokens=budget, keep_last=2, tool_result_chars=50,
                               base_head=base_head, base_len=len(base), head=head)
        want = compress_messages(list(sent), model=MODEL, budget_tokens=budget, keep_last=2, tool_result_chars=50)
        assert (got.messages, got.compressed, got.tokens_before, got.tokens_after, got.actions, got.over_budget) == (
            want.messages, want.compressed, want.tokens_before, want.tokens_after, want.actions, want.over_budget)
        base, base_head = sent, head


async def test_counted_from_the_new_messages_it_is_the_full_count() -> None:
    await _walk(PromptFitter(), [_turn(i, f"result {i} " * 40) for i in range(12)], budget=100_000)


async def test_a_conversation_that_outgrows_its_budget_is_compressed_as_before() -> None:
    await _walk(PromptFitter(), [_turn(i, f"result {i} " * 80) for i in range(12)], budget=1_200)


async def test_large_new_messages_and_an_unknown_head_take_the_full_path() -> None:
    fitter = PromptFitter()
    big = [{"role": "user", "content": "x " * INLINE_CHARS}]
    assert fitter._count_inline(big, MODEL, None, 0) is None
    assert fitter._count_inline([{"role": "user", "content": "hi"}], MODEL, "f" * 64, 0) is None
    await _walk(fitter, [[{"role": "user", "content": "y " * INLINE_CHARS}], _turn(1, "z")], budget=100_000)


def test_the_budget_is_message_budget_once_per_tool_set() -> None:
    tools = [{"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}]
    fitter = PromptFitter()
    assert fitter.budget(MODEL, tools, "d" * 64, None) == message_budget(MODEL, tools, None)
    assert fitter.budget(MODEL, tools, "d" * 64, None) == message_budget(MODEL, tools, None)
    assert fitter.budget(MODEL, tools, "d" * 64, 5000) == 5000
