"""The scripted model streams (`stream: true`), driven through the real `openai` client:
the streamed answer put back together is the unstreamed one, in each dialect's chunks, at the
pace a script turn or the server sets, and a provider that cannot stream is emulated too."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import openai
import pytest

from rewind.worker.scripted_model import ScriptedModelServer, ScriptError, _parse_args
from rewind.worker.scripted_stream import Pace, pieces

TOOLS = [
    {"type": "function", "function": {"name": "search_company", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "save_report", "parameters": {"type": "object"}}},
]
ASK = {"role": "user", "content": "Research these companies: Acme, Globex and Initech."}
DIALECTS = ["openai", "vllm", "ollama", "llamacpp"]


async def put_together(stream: Any) -> tuple[dict[str, Any], list[Any]]:
    """A streamed answer as an unstreamed one reads (what a client assembles), and its chunks."""
    chunks = [chunk async for chunk in stream]
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish = usage = None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += [choice.delta.content] if choice.delta.content else []
            for part in choice.delta.tool_calls or []:
                slot = calls.setdefault(part.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                slot["id"] = part.id or slot["id"]
                slot["function"]["name"] += (part.function.name or "") if part.function else ""
                slot["function"]["arguments"] += (part.function.arguments or "") if part.function else ""
            finish = choice.finish_reason or finish
    message = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    ids = {chunk.id for chunk in chunks}
    assert len(ids) == 1, ids
    return {"id": ids.pop(), "message": message, "finish_reason": finish,
            "usage": usage.model_dump() if usage else None}, chunks


def unstreamed(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message.model_dump(exclude_none=True)
    message.setdefault("content", None)
    return {"id": completion.id, "message": message, "finish_reason": completion.choices[0].finish_reason,
            "usage": completion.usage.model_dump()}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tool_calls", "text"])
async def test_a_streamed_answer_is_the_unstreamed_one(served, dialect, tools):
    server, client = await served(dialect=dialect)
    options = {"tools": tools} if tools else {}
    whole = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], **options)
    stream = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], stream=True,
                                                  stream_options={"include_usage": True}, **options)
    assembled, chunks = await put_together(stream)
    assert assembled == unstreamed(whole)
    if tools:  # the first turn asks for three searches, each with its id
        assert [c["id"] for c in assembled["message"]["tool_calls"]] == ["call_0_0", "call_0_1", "call_0_2"]
    else:  # a chunk per token
        text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
        assert text == pieces(whole.choices[0].message.content) and len(text) > 5
    log = server.requests()
    assert [(r["stream"], r["finished"]) for r in log] == [(None, True), ("sse", True)]
    assert log[1]["tokens"] == sum(1 for c in chunks if c.choices and (c.choices[0].delta.content or c.choices[0].delta.tool_calls))


async def sse(url: str, body: dict[str, Any]) -> list[Any]:
    """The `data:` payloads of a streamed answer, as sent (JSON objects, then "[DONE]")."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/chat/completions", json=body) as response:
            assert response.status == 200 and response.content_type == "text/event-stream"
            text = await response.text()
    events = [block.removeprefix("data: ") for block in text.split("\n\n") if block]
    return [e if e == "[DONE]" else json.loads(e) for e in events]


async def test_openai_chunks_in_order_and_a_retry_gets_the_same_ones(served):
    server, _ = await served()
    body = {"model": "gpt-4o-mini", "messages": [ASK], "tools": TOOLS, "stream": True,
            "stream_options": {"include_usage": True}}
    first = await sse(server.base_url, body)
    assert await sse(server.base_url, body) == first  # a retried request: the same deltas
    *chunks, usage, done = first
    assert done == "[DONE]" and usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None and c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": None, "refusal": None}  # tool calls only: null content
    opening = deltas[1]["tool_calls"][0]
    assert opening == {"index": 0, "id": "call_0_0", "type": "function",
                       "function": {"name": "search_company", "arguments": ""}}
    assert {"id", "type"}.isdisjoint(deltas[2]["tool_calls"][0]) and deltas[2]["tool_calls"][0]["function"]["arguments"]
    assert deltas[-1] == {} and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # Without include_usage: no usage anywhere.
    plain = await sse(server.base_url, {**body, "stream_options": None})
    assert all("usage" not in c for c in plain[:-1])


async def test_llamacpp_sends_the_usage_on_its_last_chunk_asked_or_not(served):
    server, client = await served(dialect="llamacpp")
    *_, last, done = await sse(server.base_url, {"model": "m", "messages": [ASK], "stream": True})
    assert done == "[DONE]" and last["choices"][0]["finish_reason"] == "stop" and last["usage"]["total_tokens"] > 0
    assembled, _ = await put_together(await client.chat.completions.create(model="m", messages=[ASK], stream=True))
    assert assembled["usage"] == unstreamed(await client.chat.completions.create(model="m", messages=[ASK]))["usage"]


async def test_a_script_turn_sets_its_pace(served):
    """A turn at 4 tokens a second (about 4 s for these) is still being written when its first
    chunks arrive, one token a chunk."""
    server, client = await served()
    text = "One two three four five six seven eight nine ten eleven twelve thirteen fourteen."
    server.add_script("slow", [{"content": text, "stream": {"tokens_per_s": 4}}])
    stream = await client.chat.completions.create(model="script:slow", messages=[ASK], stream=True)
    seen: list[str] = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen.append(chunk.choices[0].delta.content)
            if len(seen) == 2:
                assert server.requests()[-1]["finished"] is False  # the rest is not written yet
    assert seen == pieces(text) and server.requests()[-1]["finished"] is True


async def test_the_server_can_tell_when_it_wrote_each_token(served):
    """`chunk_times` (what bench/b17_streaming.py times a watcher's deltas against): a time per
    token chunk, in order; off by default."""
    server, client = await served(chunk_times=True)
    text = "One two three four five six seven eight nine ten."
    server.add_script("timed", [{"content": text}])
    before = time.time()
    stream = await client.chat.completions.create(model="script:timed", messages=[ASK], stream=True)
    seen = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    after = time.time()
    await client.chat.completions.create(model="script:timed", messages=[ASK])  # unstreamed: no times
    streamed, whole = server.requests()
    times = streamed["chunk_times"]
    assert len(times) == len(seen) == len(pieces(text)) and "chunk_times" not in whole
    assert before <= times[0] and times == sorted(times) and times[-1] <= after
    plain, plain_client = await served()
    plain.add_script("timed", [{"content": text}])
    [_ async for _ in await plain_client.chat.completions.create(model="script:timed", messages=[ASK], stream=True)]
    assert "chunk_times" not in plain.requests()[0]


async def test_the_server_pace_is_the_default(served):
    server, client = await served(tokens_per_s=3)  # this answer's 20 tokens: about 7 s
    stream = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], stream=True)
    first = await anext(aiter(stream))
    assert first.choices[0].delta.role == "assistant" and server.requests()[-1]["finished"] is False
    await stream.close()


@pytest.mark.parametrize("where", ["server", "script"])
async def test_a_provider_that_cannot_stream(served, where):
    server, client = await served(**({"stream_mode": "refuse"} if where == "server" else {}))
    server.add_script("refuses", [{"content": "whole", "stream": {"mode": "refuse"}}])
    server.add_script("whole", [{"content": "whole", "stream": {"mode": "whole"}}])
    model = "gpt-4o-mini" if where == "server" else "script:refuses"
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model=model, messages=[ASK], stream=True)
    assert refused.value.param == "stream" and "'stream' does not support true" in refused.value.message
    assert (await client.chat.completions.create(model=model, messages=[ASK])).choices[0].finish_reason == "stop"
    # A server that ignores `stream`: the whole completion as JSON (a turn's mode over the server's).
    whole = await client.chat.completions.create(model="script:whole", messages=[ASK], stream=True)
    assert whole.response.headers["content-type"].startswith("application/json")
    assert json.loads(await whole.response.aread())["choices"][0]["message"]["content"] == "whole"
    assert [r["stream"] for r in server.requests()] == ["refused", None, "whole"]


async def test_a_connection_dropped_mid_stream_is_a_connection_error(served):
    server, client = await served()
    server.inject_fault(200, cut_after=3)
    stream = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], stream=True)
    seen = []
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            seen.append(chunk)
    assert len(seen) == 4  # the role, then three tokens
    assert server.requests()[-1]["finished"] is False
    assembled, _ = await put_together(await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], stream=True))
    assert assembled["finish_reason"] == "stop"  # the next one comes whole


async def test_bad_stream_requests_and_specs_are_refused(served):
    server, client = await served()
    with pytest.raises(openai.BadRequestError, match="stream_options"):
        await client.chat.completions.create(model="m", messages=[ASK], stream_options={"include_usage": True})
    for spec, fragment in [({"tokens_per_s": -1}, "tokens_per_s"), ({"mode": "fast"}, "mode"), (5, "stream"),
                           ({"tokens_per_second": 3}, "stream"), ({"tokens_per_s": True}, "tokens_per_s")]:
        with pytest.raises(ScriptError, match=fragment):
            server.add_script("bad", [{"content": "x", "by_seed": {"1": {"content": "y", "stream": spec}}}])
    for options, fragment in [({"tokens_per_s": float("inf")}, "tokens_per_s"), ({"stream_mode": "sometimes"}, "mode")]:
        with pytest.raises(ScriptError, match=fragment):
            ScriptedModelServer(**options)
    with pytest.raises(ScriptError, match="cut_after"):
        server.inject_fault(500, cut_after=2)


def test_tool_call_arguments_may_have_a_pace_of_their_own():
    assert Pace(tokens_per_s=40).interval("arguments") == Pace(tokens_per_s=40).interval("text") == 0.025
    fast_arguments = Pace().over({"tokens_per_s": 40, "arguments_tokens_per_s": 400})
    assert (fast_arguments.interval("text"), fast_arguments.interval("arguments")) == (0.025, 0.0025)
    assert Pace(tokens_per_s=40).over({"arguments_tokens_per_s": 0}).interval("arguments") == 0
    with pytest.raises(ScriptError, match="arguments_tokens_per_s"):
        Pace().over({"arguments_tokens_per_s": -1})


def test_the_command_line_takes_a_pace_and_a_mode(monkeypatch):
    monkeypatch.setenv("REWIND_SCRIPTED_TOKENS_PER_S", "25")
    args = _parse_args(["--stream-mode", "whole"])
    assert (args.tokens_per_s, args.stream_mode) == (25.0, "whole")
    assert _parse_args(["--tokens-per-s", "0"]).tokens_per_s == 0
    for bad in (["--tokens-per-s", "-3"], ["--stream-mode", "never"]):
        with pytest.raises(SystemExit):
            _parse_args(bad)


def test_pieces_are_tokens_and_keep_characters_whole():
    text = "Ünïcode 日本語 🎉🎉 and\n\n## words"
    cut = pieces(text)
    assert "".join(cut) == text and len(cut) > 8 and "🎉" in cut  # a two-token emoji stays one piece
    assert pieces("") == [] and "".join(pieces("lone \ud800 surrogate")) == "lone \ud800 surrogate"
