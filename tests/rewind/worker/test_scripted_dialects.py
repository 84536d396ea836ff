"""The scripted model's dialects: each real server's rejections, driven through the real openai client.

Verbatim OpenAI-shaped conversations (what the transcript stores) are rejected
by the servers the evidence says reject them, with their status and error
body; the same conversations through `outgoing_messages` pass every dialect.
"""

from __future__ import annotations

import copy
from typing import Iterator

import openai
import pytest

from activities.model.wire_format import outgoing_messages
from rewind.worker.scripted_model import DIALECTS, ScriptedModelServer, ScriptError, _parse_args

CALL = {"id": "call_Xq1", "type": "function", "function": {"name": "search_company", "arguments": '{"company":"Acme"}'}}
ASK = {"role": "user", "content": "Research Acme."}

# An OpenAI tool-calling turn exactly as the API returns it, then its answer.
TOOL_TURN = [
    {"role": "system", "content": "You are a business analyst."},
    ASK,
    {"role": "assistant", "content": None, "refusal": None, "annotations": [], "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_Xq1", "content": "Acme sells widgets."},
]
# An OpenAI refusal: null content and no tool_calls.
REFUSAL = [
    ASK,
    {"role": "assistant", "content": None, "refusal": "I can't help with that.", "annotations": []},
    {"role": "user", "content": "Please try again."},
]
# The model emitted invalid JSON arguments; Rewind answered with an error tool message and goes on.
MALFORMED = [
    ASK,
    {"role": "assistant", "content": None, "refusal": None, "annotations": [], "tool_calls": [
        {"id": "call_bad", "type": "function", "function": {"name": "search_company", "arguments": '{"company": "Acme'}}]},
    {"role": "tool", "tool_call_id": "call_bad", "content": "Error: the arguments are not valid JSON."},
]
# A reply as vLLM returns it (null reasoning_content, empty tool_calls), replayed to another server.
VLLM_REPLY = [
    ASK,
    {"role": "assistant", "content": "Acme sells widgets.", "reasoning_content": None, "tool_calls": []},
    {"role": "user", "content": "Thanks. And Globex?"},
]
CONVERSATIONS = {"tool_turn": TOOL_TURN, "refusal": REFUSAL, "malformed": MALFORMED, "vllm_reply": VLLM_REPLY}

# (dialect, conversation, status, fragment of the message, error body fields) — see DIALECTS for the sources.
REJECTED = [
    ("llamacpp", "tool_turn", 500, "Expected 'content' to be a string or an array", {"type": "server_error", "code": 500}),
    ("llamacpp", "refusal", 500, "Expected 'content' to be a string or an array", {"type": "server_error", "code": 500}),
    ("llamacpp", "malformed", 500, "Expected 'content' to be a string or an array", {"type": "server_error", "code": 500}),
    ("llamacpp", "vllm_reply", 500, "type must be string, but is null", {"type": "server_error", "code": 500}),
    ("ollama", "refusal", 400, "invalid message content type: <nil>", {"type": "invalid_request_error", "code": None}),
    ("ollama", "malformed", 400, "invalid tool call arguments", {"type": "invalid_request_error", "code": None}),
    ("vllm", "malformed", 400, "Unterminated string starting at", {"type": "BadRequestError", "code": 400}),
]
# Verbatim conversations the evidence says a strict server accepts (not everything is rejected):
# Ollama allows null content next to tool_calls since v0.2.6; vLLM parses null content as no parts.
ACCEPTED_VERBATIM = [("ollama", "tool_turn"), ("ollama", "vllm_reply"), ("vllm", "tool_turn"), ("vllm", "refusal"),
                     ("vllm", "vllm_reply")]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ScriptedModelServer]]:
    started: dict[str, ScriptedModelServer] = {}
    try:
        for dialect in DIALECTS:
            started[dialect] = ScriptedModelServer(dialect=dialect)
            started[dialect].start_in_thread()
        yield started
    finally:
        for server in started.values():
            server.stop_thread()


async def _send(server: ScriptedModelServer, messages: list[dict]):
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        return await client.chat.completions.create(model="gpt-4o-mini", messages=messages)


@pytest.mark.parametrize("dialect,name,status,fragment,fields", REJECTED, ids=[f"{d}-{n}" for d, n, *_ in REJECTED])
async def test_strict_dialects_reject_verbatim_openai_messages(servers, dialect, name, status, fragment, fields):
    with pytest.raises(openai.APIStatusError) as err:
        await _send(servers[dialect], CONVERSATIONS[name])
    assert err.value.status_code == status
    error = err.value.response.json()["error"]
    assert fragment in error["message"]
    assert {k: error[k] for k in fields} == fields
    assert servers[dialect].requests()[-1]["status"] == status


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_default_dialect_still_accepts_the_verbatim_form(servers, name):
    # The same bytes pass the default server, so the rejections above are the dialects' doing.
    resp = await _send(servers["openai"], CONVERSATIONS[name])
    assert resp.choices[0].message.role == "assistant"


@pytest.mark.parametrize("dialect,name", ACCEPTED_VERBATIM, ids=[f"{d}-{n}" for d, n in ACCEPTED_VERBATIM])
async def test_strict_dialects_accept_what_their_server_accepts(servers, dialect, name):
    assert (await _send(servers[dialect], CONVERSATIONS[name])).choices


@pytest.mark.parametrize("name", CONVERSATIONS)
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_outgoing_messages_pass_every_dialect(servers, dialect, name):
    conversation = CONVERSATIONS[name]
    before = copy.deepcopy(conversation)
    resp = await _send(servers[dialect], outgoing_messages(conversation))
    assert resp.choices[0].finish_reason in ("stop", "tool_calls")
    assert conversation == before


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_whole_research_run_passes_every_dialect(servers, dialect):
    # The research policy's own replies (content null next to tool_calls) fed back through outgoing_messages.
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("search_company", "save_report")]
    messages = [{"role": "user", "content": "Research these companies: Acme, Globex"}]
    async with openai.AsyncOpenAI(base_url=servers[dialect].base_url, api_key="x", max_retries=0) as client:
        for _ in range(4):
            resp = await client.chat.completions.create(model="gpt-4o-mini", messages=outgoing_messages(messages),
                                                        tools=tools)
            reply = resp.model_dump(exclude_unset=False)["choices"][0]["message"]  # verbatim, nulls included
            messages.append(reply)
            if not reply.get("tool_calls"):
                break
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in reply["tool_calls"]]
    assert messages[-1]["content"].startswith("Saved the report")


def test_unknown_dialect_is_refused():
    with pytest.raises(ScriptError, match="dialect"):
        ScriptedModelServer(dialect="tgi")


def test_the_environment_is_read_by_the_cli_only(monkeypatch):
    monkeypatch.setenv("REWIND_SCRIPTED_DIALECT", "llamacpp")
    assert ScriptedModelServer().dialect == "openai"
    assert _parse_args([]).dialect == "llamacpp"
    assert _parse_args(["--dialect", "vllm"]).dialect == "vllm"
    monkeypatch.setenv("REWIND_SCRIPTED_DIALECT", "tgi")
    with pytest.raises(SystemExit):
        _parse_args([])
    monkeypatch.delenv("REWIND_SCRIPTED_DIALECT")
    assert _parse_args([]).dialect == "openai"
