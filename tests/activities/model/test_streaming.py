"""A streamed answer put back together (activities/model/streaming.py), from the scripted model
over HTTP through the real `openai` client: the message is the unstreamed one, the deltas come
in order with their attempt, redacted, and a stream that stops short is no answer."""

from __future__ import annotations

import json
import logging
import random
from typing import Any

import openai
import pytest
from temporalio.testing import ActivityEnvironment

from activities.model.llm import LlmActivities, ModelEndpoint
from activities.model.pricing import PriceTable
from activities.model.streaming import StreamBroken, assembled
from activities.model.transcript import TranscriptStore
from activities.record.live import CallEvents
from activities.record.redaction import NO_REDACTION, Redactor, StreamRedactor
from checkpoint_bridge.stores import FileObjectStore
from rewind.worker.scripted_stream import pieces
from workflows.vocabulary.contracts import LlmRequest

TOOLS = [
    {"type": "function", "function": {"name": "search_company", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "save_report", "parameters": {"type": "object"}}},
]
ASK = {"role": "user", "content": "Research these companies: Acme, Globex and Initech."}
SECRET = "hunter2-correct-horse-battery"


class Collected:
    """A publisher that keeps what it is given (the worker's bus is where this goes in a run)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def publish(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    publish_threadsafe = publish

    def deltas(self) -> list[dict[str, Any]]:
        return [m["data"] for m in self.messages if m["type"] == "model.delta"]


async def stream_of(client: openai.AsyncOpenAI, body: dict[str, Any], usage: bool = True) -> Any:
    """The request as the model activity sends it (a raw post, the answer as plain JSON)."""
    streamed = {**body, "stream": True, **({"stream_options": {"include_usage": True}} if usage else {})}
    return await client.post("/chat/completions", body=streamed, cast_to=object, stream=True,
                             stream_cls=openai.AsyncStream[object])


def events(publisher: Collected, attempt: int = 1) -> CallEvents:
    return CallEvents(publisher, "run-1", "main", 3, "3/model", attempt)


@pytest.mark.parametrize("dialect", ["openai", "vllm", "ollama", "llamacpp"])
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tool_calls", "text"])
async def test_the_assembled_message_is_the_unstreamed_one(served, dialect, tools):
    _, client = await served(dialect=dialect)
    body = {"model": "gpt-4o-mini", "messages": [ASK], **({"tools": tools} if tools else {})}
    whole = await client.post("/chat/completions", body=body, cast_to=object)
    published = Collected()
    got = await assembled(await stream_of(client, body), events(published, attempt=2), NO_REDACTION)
    # content, tool calls, finish_reason, usage, and the fingerprint that tells the offline model's demo turns
    assert got == {k: whole[k] for k in ("id", "choices", "usage", "system_fingerprint") if k in whole}
    deltas = published.deltas()
    assert [d["index"] for d in deltas] == list(range(1, len(deltas) + 1))  # in order
    assert {(d["call"], d["attempt"]) for d in deltas} == {("3/model", 2)}
    message = whole["choices"][0]["message"]
    text = [d["text"] for d in deltas if "text" in d]
    assert "".join(text) == (message["content"] or "")
    if not tools:
        assert text == pieces(message["content"])  # a delta per token
    for i, call in enumerate(message.get("tool_calls") or []):
        parts = [d["tool_call"] for d in deltas if "tool_call" in d and d["tool_call"]["index"] == i]
        assert (parts[0]["id"], parts[0]["name"]) == (call["id"], call["function"]["name"])  # id and name first
        assert "".join(p["arguments"] for p in parts) == call["function"]["arguments"]


async def test_deltas_are_redacted_and_put_together_read_as_the_redacted_answer(served):
    server, client = await served()
    content = f"The key is {SECRET}, and sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX too."
    arguments = {"company": "Acme", "password": SECRET}
    server.add_script("leaky", [{"content": content, "tool_calls": [{"name": "search_company", "arguments": arguments}]}])
    redactor = Redactor.build({"DB_PASSWORD": SECRET})
    published = Collected()
    got = await assembled(await stream_of(client, {"model": "script:leaky", "messages": [ASK]}), events(published),
                          redactor)
    deltas = published.deltas()
    text = "".join(d.get("text", "") for d in deltas)
    args = "".join(d["tool_call"]["arguments"] for d in deltas if "tool_call" in d)
    assert text == redactor.redact_text(content) and "[REDACTED:DB_PASSWORD]" in text and "[REDACTED:openai_key]" in text
    assert args == redactor.redact_text(json.dumps(arguments))
    assert not [d for d in deltas if any(part in json.dumps(d) for part in ("hunter2", "battery", "ABCDEFGH"))]
    # The record is redacted where the call returns (llm.py); the assembled message is the provider's.
    assert got["choices"][0]["message"]["content"] == content


def test_a_secret_split_anywhere_never_goes_out_in_part():
    redactor = Redactor.build({"DB": "hunter2hunter2", "KEY": "sk-live-0123456789abcdef"}, [r"ticket-\d{4,}"])
    text = ("Use sk-live-0123456789abcdef, AKIAABCDEFGHIJKLMNOP, Bearer abc.def-ghi_jkl, sk-proj-ABCDEFGHIJKLMNOPQRSTUV "
            "and hunter2hunter2 for ticket-123456; task-abcdefghijklmnopqrstuv is no key, nor is A or s.\n"
            "-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY----- done")
    want = redactor.redact_text(text)
    rng = random.Random(59)
    for _ in range(500):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 60)))
        parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        stream = StreamRedactor(redactor)
        out = [stream.feed(p) for p in parts] + [stream.flush()]
        assert "".join(out) == want, parts


def test_prose_is_held_back_a_few_characters_at_most():
    stream = StreamRedactor(Redactor.build({"DB": "hunter2hunter2"}))
    words = "The quick brown fox jumps over the lazy dog and keeps on running".split(" ")
    sent = [stream.feed(w + " ") for w in words]
    assert all(s == w + " " for s, w in zip(sent, words))
    assert stream.feed("hunt") == "" and stream.feed("ing season") == "hunting season"


async def test_a_stream_that_stops_short_is_no_answer(served):
    server, client = await served()
    server.inject_fault(200, cut_after=4)
    published = Collected()
    with pytest.raises(StreamBroken, match="connection dropped after 5 chunks"):
        await assembled(await stream_of(client, {"model": "gpt-4o-mini", "messages": [ASK]}), events(published),
                        NO_REDACTION)
    assert len(published.deltas()) == 4  # what was shown before it broke; the next attempt starts again


async def test_a_stream_without_usage_says_so(served):
    _, client = await served()
    got = await assembled(await stream_of(client, {"model": "gpt-4o-mini", "messages": [ASK]}, usage=False),
                          events(Collected()), NO_REDACTION)
    assert got["usage"] is None and got["choices"][0]["finish_reason"] == "stop"


def _activities(server: Any, tmp_path: Any, publisher: Collected | None, stream: bool = True) -> LlmActivities:
    return LlmActivities(ModelEndpoint(base_url=server.base_url, api_key="k"), PriceTable.parse(),
                         TranscriptStore(FileObjectStore(tmp_path)), NO_REDACTION, events=publisher, stream=stream)


REQUEST = LlmRequest(run_id="run-1", step=1, model="gpt-4o-mini", new_messages=[ASK], tools=TOOLS, transcript=False)


async def test_the_model_call_returns_the_same_whether_it_streamed_or_not(served, tmp_path):
    server, _ = await served()
    env = ActivityEnvironment()
    whole = await env.run(_activities(server, tmp_path, None).call_llm, REQUEST)
    published = Collected()
    streamed = await env.run(_activities(server, tmp_path, published).call_llm, REQUEST)
    assert streamed == whole  # the record is unchanged: message, usage, cost, finish_reason, response id
    assert [r["stream"] for r in server.requests()] == [None, "sse"]
    kinds = [m["type"] for m in published.messages if "type" in m]  # (and the attempt's end, for the bus)
    assert kinds[0] == "model.started" and set(kinds[1:]) == {"model.delta"} and len(kinds) > 4, kinds


async def test_a_stream_without_usage_is_counted_once_then_the_model_answers_whole(served, tmp_path, caplog):
    server, _ = await served(stream_usage=False)  # a server from before stream_options.include_usage
    acts, env = _activities(server, tmp_path, Collected()), ActivityEnvironment()
    with caplog.at_level(logging.WARNING, logger="rewind.model"):
        counted = await env.run(acts.call_llm, REQUEST)
        exact = await env.run(acts.call_llm, REQUEST)
    assert [r["stream"] for r in server.requests()] == ["sse", None]
    assert exact.usage.total_tokens == server.requests()[1]["response"]["usage"]["total_tokens"]
    assert counted.usage.prompt_tokens > 0 and counted.usage.completion_tokens > 0  # the tokenizer's count
    assert counted.message == exact.message
    said = [r.getMessage() for r in caplog.records if "does not stream" in r.getMessage()]
    assert len(said) == 1 and "carry no usage" in said[0], said
