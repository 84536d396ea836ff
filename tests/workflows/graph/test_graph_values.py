"""A node run as one activity is named by a digest of its input state (workflows/graph/values.py):
the same on every replay, though add_messages gives a message without an id a random one."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph.message import add_messages

from workflows.graph.values import digest


def test_a_state_digest_without_message_ids_is_the_same_on_every_replay() -> None:
    replays = [{"messages": add_messages([], [{"role": "user", "content": "hi"}]), "topic": "x"} for _ in range(2)]
    assert replays[0]["messages"][0].id != replays[1]["messages"][0].id  # a random uuid4 each time
    assert digest(replays[0]) != digest(replays[1])
    assert digest(replays[0], message_ids=False) == digest(replays[1], message_ids=False)
    # What the messages say still counts, and so does every other channel.
    other = {"messages": [HumanMessage("hi"), AIMessage("no")], "topic": "x"}
    assert digest(other, message_ids=False) != digest(replays[0], message_ids=False)
    assert digest({**replays[0], "topic": "y"}, message_ids=False) != digest(replays[0], message_ids=False)
