"""A block's merged content (document/blocks.py) and the pipeline calls it lists: pure, no store."""

from __future__ import annotations

import json

import pytest

from checkpoint_bridge.document.blocks import block_calls, content_bytes, merge_block, parse_block
from checkpoint_bridge.document.envelope import decode, encode

RUN, BRANCH = "run-1", "main"


def _delta(step: int, base: tuple[int, int], *, call: dict | None, output: str) -> tuple[str, object]:
    call_id = f"call_{step}"
    payload = {
        "schema_version": 8, "checkpoint_id": f"{RUN}:{BRANCH}:{step}", "parent_id": f"{RUN}:{BRANCH}:{step - 1}",
        "base_message_count": base[0], "base_tool_count": base[1], "agent_variables": {"done": step},
        "new_messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": call_id}]},
                         {"role": "tool", "tool_call_id": call_id, "content": output}],
        "new_tool_records": [{"tool_name": "search", "tool_call_id": call_id, "tool_output": json.loads(output)
                              if output.startswith("{") else output}],
    }
    if call is not None:
        payload["pipeline"] = call
    key = f"runs/{RUN}/branches/{BRANCH}/steps/{step:08d}.json"
    return key, decode(encode("delta", payload, chain=[(BRANCH, 0, step - 1)]), key, link=True)


def _block(calls: list[dict | None]) -> dict:
    links = [_delta(4 + i, (2 + 2 * i, i), call=c, output='{"n": %d}' % i if i % 2 else f"text {i}")
             for i, c in enumerate(calls)]
    return merge_block(RUN, BRANCH, 4, links)


def _call(position: int) -> dict:
    return {"pipeline": "p", "position": position, "label": f"l{position}", "kind": "tool", "digest": "0" * 64}


def test_a_block_lists_its_pipeline_calls_and_gives_back_their_own_messages_and_records() -> None:
    content = _block([_call(0), None, _call(1), _call(2)])
    assert [c[0] for c in content["calls"]] == [0, 2, 3]
    parsed = parse_block(content_bytes(content)[0], RUN, BRANCH, 4, 7)
    assert parsed == content
    calls = block_calls(parsed, "block 4-7")
    assert [c.step for c in calls] == [4, 6, 7]
    assert [c.last_tool_record["tool_output"] for c in calls] == ["text 0", "text 2", {"n": 3}]
    assert calls[1].last_message == {"role": "tool", "tool_call_id": "call_6", "content": "text 2"}
    assert [len(c.records) for c in calls] == [1, 1, 1]


def test_a_block_of_the_loops_steps_is_what_it_was_before_calls_were_listed() -> None:
    assert "calls" not in _block([None, None, None, None])


@pytest.mark.parametrize("calls", [
    "not a list", [[0, 0, 2, 0, 1]], [[0, 0, 2, 0, 1, "not a call"]], [[4, 0, 2, 0, 1, {}]],
    [[0, 0, 99, 0, 1, {}]], [[0, 2, 1, 0, 1, {}]], [[1, 0, 2, 0, 1, {}], [1, 2, 4, 1, 2, {}]], [[-1, 0, 2, 0, 1, {}]],
], ids=["not-a-list", "short", "call-not-an-object", "step-outside", "past-the-messages", "backwards",
        "same-step-twice", "negative"])
def test_a_malformed_list_of_calls_makes_the_block_unreadable(calls: object) -> None:
    """parse_block's None sends a reader to the block's step objects, which are the record."""
    content = {**_block([_call(0), None, None, None]), "calls": calls}
    assert parse_block(content_bytes(content)[0], RUN, BRANCH, 4, 7) is None
