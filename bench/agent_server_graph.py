"""The graph the Agent Server benchmark serves (bench/b18_agent_server.py), the same module for
`rewind serve` (a worker's `--tool-modules bench.agent_server_graph`) and for `langgraph dev`
(its langgraph.json names this file): STEPS nodes in a row that each add one to `n` (a
super-step each, no call), then `speak`, one ChatOpenAI call the scripted model streams."""

from __future__ import annotations

import operator
import os
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

STEPS = 10
MODEL = "script:agent-server-bench"
llm = ChatOpenAI(model=MODEL, api_key=os.environ.get("OPENAI_API_KEY") or "unused")


class State(TypedDict, total=False):
    n: int
    messages: Annotated[list, operator.add]


def _step(state: State) -> dict:
    return {"n": state.get("n", 0) + 1}


async def speak(state: State) -> dict:
    answer = await llm.ainvoke([HumanMessage(f"say it after {state.get('n', 0)} steps")])
    return {"messages": [{"role": "assistant", "content": str(answer.content)}]}


builder = StateGraph(State)
previous = START
for index in range(1, STEPS + 1):
    builder.add_node(f"step_{index}", _step)
    builder.add_edge(previous, f"step_{index}")
    previous = f"step_{index}"
builder.add_node("speak", speak)
builder.add_edge(previous, "speak")
builder.add_edge("speak", END)
graph = builder.compile()

__all__ = ["graph", "STEPS", "MODEL"]
