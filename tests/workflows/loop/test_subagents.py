"""Sub-agent calls in the loop (workflows/loop/subagents.py): depth, arguments, their records."""

from __future__ import annotations

from helpers import read_events, scripted, start_agent

from checkpoint_bridge.checkpoints.store import open_checkpoint_store


def _call(name: str, **arguments: object) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def test_sub_agents_nest_up_to_the_depth_limit_and_no_deeper(worker, client, settings, model, events_file):
    name = scripted(model, [
        {"by_user": {"level a": _call("nest_b", task="level b"), "level b": _call("nest_c", task="level c"),
                     "level c": _call("nest_d", task="level d"), "level d": _call("lookup", term="deep")},
         **_call("nest_a", task="level a")},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "go deep", model=name, tools=["nest_a"])
    result = await handle.result()
    assert result.status.state == "completed"
    # nest_a (depth 1) -> nest_b (2) -> nest_c (3) -> nest_d would be depth 4: refused, as a tool error.
    assert "sub-agent depth limit" in result.final_answer and "at most 3 deep" in result.final_answer
    assert read_events(events_file) == []  # nothing below the limit ran
    async with open_checkpoint_store(settings.store_url) as store:
        branches = await store.branches(handle.id)
        assert sorted(branches) == ["main", "main.s1-call_0_0", "main.s1-call_0_0.s1-call_0_0",
                                    "main.s1-call_0_0.s1-call_0_0.s1-call_0_0"]
        deepest = await store.load_latest(handle.id, "main.s1-call_0_0.s1-call_0_0.s1-call_0_0")
        (refused,) = [r for r in deepest.tool_call_cache if r.tool_name == "nest_d"]
        assert refused.subagent["state"] == "refused" and deepest.agent["depth"] == 3


async def test_a_sub_agent_with_an_argument_model_is_checked_and_rendered(worker, client, settings, model, events_file):
    name = scripted(model, [
        {"by_user": {"Look up durable": _call("lookup", term="durable")},
         "tool_calls": [{"name": "looker", "arguments": {"term": "durable", "limit": 2}},
                        {"name": "looker", "arguments": {"term": "", "limit": 99}},
                        {"name": "looker", "arguments": {"task": "wrong shape"}}]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, "define", model=name, tools=["looker"])
    result = await handle.result()
    assert result.status.state == "completed"
    answer = result.final_answer
    assert "definition of durable" in answer
    assert answer.count("arguments for looker are invalid") == 2
    users = {m["content"] for r in model.requests() for m in r["messages"] if m["role"] == "user"}
    assert "Look up durable (at most 2 results)." in users  # the template, filled with the validated arguments
    assert [e["term"] for e in read_events(events_file)] == ["durable"]
