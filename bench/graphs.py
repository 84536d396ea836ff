"""The graph the LangGraph-graphs benchmark runs (`--tool-modules bench.graphs`): one node,
`work`, run `limit` times in a row (a conditional edge back to itself), each time one
ChatOpenAI call and one LangChain tool call, as one step of the loop does."""

from __future__ import annotations

from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

__all__ = ["graph", "builder", "State", "blob_text", "NODE"]

NODE = "work"
# The Rewind run sends its calls through Rewind's model path; the benchmark points this one at the
# scripted model for the runs without Rewind (bench/b15_langgraph.py).
llm = ChatOpenAI(model="bench", api_key="unused")


class State(TypedDict):
    n: int
    limit: int


@tool
async def blob_text(index: int, size: int = 256) -> str:
    """A tool result of `size` characters."""
    return (f"{index}:" * size)[:size]


async def work(state: State) -> dict:
    await llm.ainvoke([HumanMessage(f"turn {state['n']}")])
    await blob_text.ainvoke({"index": state["n"]})
    return {"n": state["n"] + 1}


async def route(state: State) -> str:
    """Back to the node until it ran `limit` times (async: the plugin's workflow runs no thread)."""
    return NODE if state["n"] < state["limit"] else END


def builder(metadata: dict | None = None) -> StateGraph:
    """The graph's builder (`metadata`: the node's, e.g. temporalio-langgraph's execute_in)."""
    b = StateGraph(State)
    b.add_node(NODE, work, metadata=metadata)
    b.add_edge(START, NODE)
    b.add_conditional_edges(NODE, route, {NODE: NODE, END: END})
    return b


graph = builder().compile()
