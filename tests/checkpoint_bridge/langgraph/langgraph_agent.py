"""A LangGraph tool-calling agent for the RewindSaver tests, importable and runnable.

A `StateGraph` whose `model` node asks the scripted model (the real openai
client over HTTP) and whose `tool` node runs each tool call of a turn as its
own task (one `Send` per call), so the tool calls of one turn run in parallel
and each finished one is saved as pending writes of the checkpoint.

Every message gets an id that depends only on the conversation (the
scripted model's completion id, the tool call id), so two runs of one
script on two checkpointers can be compared message for message.

As a script (the crash test runs it in a subprocess, then kills it):

    python langgraph_agent.py --store URL [--endpoint URL] --thread T --base-url URL --model script:NAME
                              --tool-log FILE [--hang-on KEY --marker FILE] [--resume]

prints the final messages as one JSON line. `--hang-on KEY`: the `lookup`
call for KEY writes `--marker` and then waits forever (to be killed there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import openai
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage, convert_to_openai_messages
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Send

TOOLS = [{
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a key up.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}, "size": {"type": "integer"}},
                       "required": ["key"]},
    },
}]


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def lookup_text(key: str, size: int = 64) -> str:
    line = f"{key}: lorem ipsum dolor sit amet "
    return (line * (size // len(line) + 1))[:size]


def build_graph(base_url: str, model: str, *, tool_log: Path | None = None, hang_on: str | None = None,
                marker: Path | None = None) -> StateGraph:
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)

    def model_node(state: State) -> dict[str, Any]:
        response = client.chat.completions.create(
            model=model, messages=convert_to_openai_messages(state["messages"]), tools=TOOLS,
        )
        message = response.choices[0].message
        calls = [{"name": c.function.name, "args": json.loads(c.function.arguments or "{}"), "id": c.id,
                  "type": "tool_call"} for c in message.tool_calls or []]
        return {"messages": [AIMessage(content=message.content or "", tool_calls=calls, id=response.id)]}

    def route(state: State) -> Any:
        calls = state["messages"][-1].tool_calls
        return [Send("tool", {"call": c}) for c in calls] if calls else END

    def tool_node(arg: dict[str, Any]) -> dict[str, Any]:
        call = arg["call"]
        key = call["args"]["key"]
        if tool_log is not None:
            with open(tool_log, "a") as f:
                f.write(json.dumps({"pid": os.getpid(), "key": key}) + "\n")
        if hang_on is not None and key == hang_on:
            assert marker is not None
            marker.write_text(str(os.getpid()))
            while True:  # until the test kills the process
                time.sleep(60)
        content = lookup_text(key, call["args"].get("size", 64))
        return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], id=f"tool-{call['id']}")]}

    builder = StateGraph(State)
    builder.add_node("model", model_node)
    builder.add_node("tool", tool_node)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tool", END])
    builder.add_edge("tool", "model")
    return builder


def first_input(task: str = "look up a, b and c") -> dict[str, Any]:
    return {"messages": [HumanMessage(content=task, id="human-0")]}


def summary(messages: list[AnyMessage]) -> list[dict[str, Any]]:
    """What two runs must agree on, message by message."""
    out = []
    for m in messages:
        item = {"type": m.type, "id": m.id, "content": m.content}
        if isinstance(m, AIMessage):
            item["tool_calls"] = [{"name": c["name"], "args": c["args"], "id": c["id"]} for c in m.tool_calls]
        if isinstance(m, ToolMessage):
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def main(argv: list[str] | None = None) -> int:
    from checkpoint_bridge.langgraph.saver import RewindSaver

    parser = argparse.ArgumentParser()
    parser.add_argument("--store", required=True)
    parser.add_argument("--endpoint")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--tool-log", type=Path, required=True)
    parser.add_argument("--hang-on")
    parser.add_argument("--marker", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    builder = build_graph(args.base_url, args.model, tool_log=args.tool_log, hang_on=args.hang_on, marker=args.marker)
    with RewindSaver.from_url(args.store, endpoint_url=args.endpoint) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": args.thread}}
        final = graph.invoke(None if args.resume else first_input(), config, durability="sync")
    print(json.dumps(summary(final["messages"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
