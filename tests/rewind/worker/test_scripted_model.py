"""The scripted model server, driven through the real `openai` client."""

import asyncio
import json
import time

import aiohttp
import openai
import pytest

from rewind.worker.scripted_model import ScriptedModelServer, ScriptError

TOOLS = [
    {"type": "function", "function": {"name": "search_company", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "save_report", "parameters": {"type": "object"}}},
]
ASK = {"role": "user", "content": "Research these companies: Acme, Globex and Initech."}


@pytest.fixture
async def server():
    srv = ScriptedModelServer()
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def client(server):
    async with openai.AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        yield c


def assistant(message) -> dict:
    """The assistant message of a completion, as the agent would append it."""
    return message.model_dump(exclude_none=True)


async def run_research(client, system: str) -> list[dict]:
    """Play the research policy to its final answer, returning the transcript."""
    messages = [{"role": "system", "content": system}, ASK]
    for _ in range(5):
        resp = await client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
        msg = resp.choices[0].message
        messages.append(assistant(msg))
        if not msg.tool_calls:
            return messages
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments)
            if call.function.name == "search_company":
                result = "Error: timeout" if args["company"] == "Globex" else f"{args['company']} sells widgets."
            else:
                result = "saved as report-1"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError("research policy did not finish")


async def test_research_policy_runs_three_phases_with_parallel_calls(client):
    messages = await run_research(client, "You are a business analyst.")
    searches, save, final = messages[2], messages[6], messages[-1]

    assert [c["function"]["name"] for c in searches["tool_calls"]] == ["search_company"] * 3
    assert [json.loads(c["function"]["arguments"])["company"] for c in searches["tool_calls"]] == [
        "Acme", "Globex", "Initech"
    ]
    assert [c["id"] for c in searches["tool_calls"]] == ["call_0_0", "call_0_1", "call_0_2"]
    assert save["tool_calls"][0]["id"] == "call_1_0"

    report = json.loads(save["tool_calls"][0]["function"]["arguments"])
    assert report["title"] == "Competitive research: Acme, Globex, Initech"
    assert "## Acme" in report["content"] and "> Acme sells widgets." in report["content"]
    assert "no data (Error: timeout)" in report["content"]
    assert "Business metrics" in report["content"]

    assert "tool_calls" not in final
    assert "Saved the report 'Competitive research: Acme, Globex, Initech' (saved as report-1)" in final["content"]


async def test_system_prompt_changes_report_angle(client):
    business = await run_research(client, "You are a business analyst.")
    technical = await run_research(client, "Write a TECHNICAL deep dive.")
    b = json.loads(business[6]["tool_calls"][0]["function"]["arguments"])["content"]
    t = json.loads(technical[6]["tool_calls"][0]["function"]["arguments"])["content"]
    assert "Technical analysis" in t and "architecture" in t
    assert "Technical analysis" not in b and "revenue" in b


async def test_without_research_tools_answers_plainly(client):
    resp = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.tool_calls is None
    assert "Acme" in resp.choices[0].message.content


async def test_same_request_gets_identical_response(client, server):
    server.inject_fault(200, delay_s=0.01)  # a delayed answer must not differ either
    first = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], tools=TOOLS)
    second = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK], tools=TOOLS)
    assert first.model_dump_json() == second.model_dump_json()
    assert first.id.startswith("chatcmpl-") and len(first.id) == len("chatcmpl-") + 24
    assert first.created == 1_700_000_000
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens > 0
    other = await client.chat.completions.create(model="other", messages=[ASK], tools=TOOLS)
    assert other.id != first.id


async def test_script_turns_pass_arguments_verbatim_and_echo_tool_results(client, server):
    server.add_script("broken", [
        {"content": None, "tool_calls": [{"name": "lookup", "arguments": '{"company": '},
                                         {"name": "lookup", "arguments": {"company": "Acme"}}]},
        {"echo_tool_results": True},
    ])
    messages = [ASK]
    resp = await client.chat.completions.create(model="script:broken", messages=messages)
    calls = resp.choices[0].message.tool_calls
    assert resp.choices[0].finish_reason == "tool_calls"
    assert [c.id for c in calls] == ["call_0_0", "call_0_1"]
    assert calls[0].function.arguments == '{"company": '
    assert json.loads(calls[1].function.arguments) == {"company": "Acme"}

    messages += [assistant(resp.choices[0].message),
                 {"role": "tool", "tool_call_id": "call_0_1", "content": "second"},
                 {"role": "tool", "tool_call_id": "call_0_0", "content": "Error: bad JSON"}]
    resp = await client.chat.completions.create(model="script:broken", messages=messages)
    assert resp.choices[0].message.content == "second\nError: bad JSON"

    messages += [assistant(resp.choices[0].message), {"role": "user", "content": "more?"}]
    resp = await client.chat.completions.create(model="script:broken", messages=messages)
    assert resp.choices[0].message.content == "script exhausted"


async def test_unknown_script_is_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as err:
        await client.chat.completions.create(model="script:nope", messages=[ASK])
    assert err.value.code == "model_not_found"


def test_malformed_script_is_rejected():
    with pytest.raises(ScriptError):
        ScriptedModelServer().add_script("x", [{"tool_calls": [{"arguments": "{}"}]}])


CALL = {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


@pytest.mark.parametrize("messages, fragment", [
    ([ASK, {"role": "assistant", "tool_calls": [CALL]}, {"role": "user", "content": "hi"}], "call_a"),
    ([ASK, {"role": "assistant", "tool_calls": [CALL]}], "call_a"),
    ([ASK, {"role": "tool", "tool_call_id": "call_a", "content": "x"}], "orphaned"),
    ([ASK, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_a", "content": "x"},
      {"role": "tool", "tool_call_id": "call_a", "content": "again"}], "orphaned"),
    ([ASK, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_a", "content": "x"},
      {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "call_a", "content": "x"}],
     "unique id"),
    ([], "non-empty"),
    ([{"role": "robot", "content": "beep"}], "role"),
])
async def test_invalid_conversations_are_bad_requests(client, messages, fragment):
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert fragment in err.value.message


async def test_invalid_tools_are_bad_requests(client):
    for tools in ([{"type": "function", "function": {}}], [{"type": "function", "function": "lookup"}], ["x"]):
        with pytest.raises(openai.BadRequestError, match="function.name"):
            await client.chat.completions.create(model="m", messages=[ASK], tools=tools)


async def test_faults_map_to_openai_exceptions(client, server):
    server.inject_fault(429, retry_after=0.5)
    server.inject_fault(401)
    server.inject_fault(500, count=2, message="boom")
    with pytest.raises(openai.RateLimitError) as rate:
        await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    assert rate.value.response.headers["retry-after"] == "0.5"
    assert rate.value.body["type"] == "rate_limit_error"
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    for _ in range(2):
        with pytest.raises(openai.InternalServerError, match="boom"):
            await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    assert (await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])).choices
    assert [r["status"] for r in server.requests()] == [429, 401, 500, 500, 200]


async def test_a_fault_with_a_window_lapses_when_no_request_comes_in_it(client, server):
    server.inject_fault(500, count=2, within_s=0.05)  # an outage nobody called the provider during
    await asyncio.sleep(0.2)
    server.inject_fault(429, within_s=600)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    assert (await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])).choices
    assert [r["status"] for r in server.requests()] == [429, 200]
    with pytest.raises(ScriptError, match="within_s"):
        server.inject_fault(500, within_s=0)


async def test_a_slow_answer_does_not_hold_up_the_others(client, server):
    server.inject_fault(200, delay_s=20)  # the next request is answered after 20 s
    slow = asyncio.create_task(client.chat.completions.create(model="gpt-4o-mini", messages=[ASK]))
    while server._faults:  # until the slow request has taken the fault
        await asyncio.sleep(0.01)
    fast = await client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    assert fast.choices and not slow.done()  # answered while the other still waits
    slow.cancel()


async def test_latency_applies_to_every_answer():
    srv = ScriptedModelServer(latency_ms=300)
    await srv.start()
    try:
        async with openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0) as c:
            started = time.perf_counter()
            await c.chat.completions.create(model="m", messages=[ASK])
            assert time.perf_counter() - started >= 0.3  # a floor the server keeps, not a speed
    finally:
        await srv.stop()


async def test_admin_endpoints(server):
    root = server.base_url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{root}/_admin/health") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
        async with http.get(f"{server.base_url}/models") as r:
            assert "gpt-4o-mini" in [m["id"] for m in (await r.json())["data"]]
        async with http.post(f"{root}/_admin/scripts/hello", json={"turns": [{"content": "hi"}]}) as r:
            assert r.status == 200
        async with http.post(f"{root}/_admin/faults", json={"status": 503, "retry_after": 2}) as r:
            assert r.status == 200
        for bad in ({"status": 503, "bogus": 1}, {"status": 503, "retry_after": "soon"}, {"status": 302}):
            async with http.post(f"{root}/_admin/faults", json=bad) as r:
                assert r.status == 400 and "error" in await r.json()
        body = {"model": "script:hello", "messages": [ASK], "tools": TOOLS}
        async with http.post(f"{server.base_url}/chat/completions", json=body) as r:
            assert r.status == 503 and r.headers["retry-after"] == "2"
        async with http.post(f"{server.base_url}/chat/completions", json=body,
                             headers={"Authorization": "Bearer anything"}) as r:
            assert (await r.json())["choices"][0]["message"]["content"] == "hi"
        async with http.get(f"{root}/_admin/requests") as r:
            log = (await r.json())["requests"]
        assert [e["status"] for e in log] == [503, 200]
        assert log[1]["tools"] == ["search_company", "save_report"] and log[1]["model"] == "script:hello"
        assert log[1]["response"]["choices"][0]["message"]["content"] == "hi"
        async with http.post(f"{root}/_admin/reset") as r:
            assert r.status == 200
        async with http.get(f"{root}/_admin/requests") as r:
            assert (await r.json())["requests"] == []
        async with http.post(f"{server.base_url}/chat/completions", json=body) as r:
            assert r.status == 404  # the script went with the reset
        async with http.get(f"{root}/nowhere") as r:
            assert r.status == 404 and "error" in await r.json()


def test_start_in_thread_serves_sync_clients():
    srv = ScriptedModelServer()
    base_url = srv.start_in_thread()
    with openai.OpenAI(base_url=base_url, api_key="test", max_retries=0) as c:
        try:
            srv.add_script("t", [{"content": "from a thread"}])
            resp = c.chat.completions.create(model="script:t", messages=[ASK])
            assert resp.choices[0].message.content == "from a thread"
            assert srv.base_url == base_url and len(srv.requests()) == 1
        finally:
            srv.stop_thread()
        with pytest.raises(openai.APIConnectionError):
            c.chat.completions.create(model="script:t", messages=[ASK])


async def test_anthropics_messages_api_is_answered_as_the_chat_it_says(server):
    """`ChatAnthropic` pointed at the server's root: the real anthropic client, a tool round trip,
    the usage the chat completion counted, and errors in Anthropic's shape."""
    import anthropic

    server.add_script("claude", [{"tool_calls": [{"name": "search_company", "arguments": {"company": "Acme"}}]},
                                 {"content": "Acme sells widgets."}])
    async with anthropic.AsyncAnthropic(base_url=server.base_url.removesuffix("/v1"), api_key="test",
                                        max_retries=0) as claude:
        tools = [{"name": "search_company", "description": "Search.", "input_schema": {"type": "object"}}]
        ask = [{"role": "user", "content": "Research Acme."}]
        first = await claude.messages.create(model="script:claude", max_tokens=100, system="Be brief.",
                                             messages=ask, tools=tools)
        assert first.stop_reason == "tool_use" and first.content[0].type == "tool_use"
        assert first.content[0].name == "search_company" and first.content[0].input == {"company": "Acme"}
        result = {"type": "tool_result", "tool_use_id": first.content[0].id, "content": "Acme sells widgets."}
        second = await claude.messages.create(
            model="script:claude", max_tokens=100, system="Be brief.", tools=tools,
            messages=[*ask, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                      {"role": "user", "content": [result]}])
        assert second.stop_reason == "end_turn" and second.content[0].text == "Acme sells widgets."
        asked = [r for r in server.requests() if r.get("api") == "messages"]
        assert asked[1]["messages"] == [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Research Acme."},
            {"role": "assistant", "content": None, "tool_calls": [{"id": first.content[0].id, "type": "function",
                                                                   "function": {"name": "search_company",
                                                                                "arguments": '{"company": "Acme"}'}}]},
            {"role": "tool", "tool_call_id": first.content[0].id, "content": "Acme sells widgets."}]
        usage = asked[1]["response"]["usage"]
        assert (second.usage.input_tokens, second.usage.output_tokens) == (usage["prompt_tokens"],
                                                                           usage["completion_tokens"])
        with pytest.raises(anthropic.NotFoundError, match="no script named 'nope'"):
            await claude.messages.create(model="script:nope", max_tokens=10, messages=ask)
