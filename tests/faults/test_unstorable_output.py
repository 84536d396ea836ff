"""A tool whose output has no JSON form fails that attempt, which is retried like a tool
that raised; the next attempt's output is the call's result.

Found by the soak (bench/soak, a "malformed output" tool fault): the except clause that
should have caught the serializer's error named `pydantic.PydanticSerializationError`,
which does not exist, so it raised AttributeError instead.
"""

from __future__ import annotations

import asyncio

from helpers import final_transcript, read_events, scripted, start_agent


async def test_an_unstorable_output_is_retried_then_the_good_one_is_the_result(worker, client, settings, model,
                                                                              events_file):
    name = scripted(model, [{"tool_calls": [{"name": "shaky_output", "arguments": {"term": "x"}}]},
                            {"content": "done"}])
    handle = await start_agent(client, settings, "store an output", model=name, tools=["shaky_output"])
    result = await asyncio.wait_for(handle.result(), 90)
    assert result.status.state == "completed"
    tool_messages = [m["content"] for m in await final_transcript(settings, handle.id) if m["role"] == "tool"]
    assert tool_messages == ["stored x"], tool_messages
    attempts = [e["attempt"] for e in read_events(events_file) if e["kind"] == "shaky_output"]
    assert attempts == [1, 2], attempts


async def test_an_output_that_never_stores_reaches_the_model_as_what_it_is(worker, client, settings, model, events_file):
    name = scripted(model, [{"tool_calls": [{"name": "shaky_output", "arguments": {"term": "never"}}]},
                            {"content": "done"}])
    handle = await start_agent(client, settings, "store an output", model=name, tools=["shaky_output"])
    assert (await asyncio.wait_for(handle.result(), 90)).status.state == "completed"
    [message] = [m["content"] for m in await final_transcript(settings, handle.id) if m["role"] == "tool"]
    assert "returned a value that is not JSON-serializable" in message and "AttributeError" not in message, message
    assert [e["attempt"] for e in read_events(events_file) if e["kind"] == "shaky_output"] == [1, 2, 3]
