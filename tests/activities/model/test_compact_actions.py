"""What compression did is recorded in O(1) entries, so long runs stay linear."""

from __future__ import annotations

import random

from activities.model.context_window import compact_actions, compress_messages, rebuild_view


def _conversation(steps: int, rng: random.Random) -> list[dict]:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for i in range(steps):
        call = f"call_{i}"
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": call, "type": "function", "function": {"name": "blob", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": "x" * rng.choice([50, 2000, 4000])})
    return messages


def test_compact_actions_rebuild_the_same_view_in_constant_size():
    rng = random.Random(7)
    for steps in (20, 80, 200):
        messages = _conversation(steps, rng)
        for budget in (2_000, 20_000, 60_000):
            fitted = compress_messages(messages, model="gpt-4o-mini", budget_tokens=budget, keep_last=4)
            if not fitted.compressed:
                continue
            compact = compact_actions(messages, fitted.actions)
            assert rebuild_view(messages, compact) == rebuild_view(messages, fitted.actions) == fitted.messages
            assert len(compact) <= 3, (steps, budget, compact)
