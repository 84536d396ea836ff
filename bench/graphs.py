"""The graph the LangGraph-graphs benchmark runs (`--tool-modules bench.graphs`): one node,
`work`, run `limit` times in a row (a conditional edge back to itself), each time one
ChatOpenAI call and one LangChain tool call, as one step of the loop does; `node_graph` is the
same graph with its node declared node-level (one activity a node)."""

from __future__ import annotations

from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

__all__ = ["graph", "builder", "State", "blob_text", "NODE", "node_graph", "NODE_LEVEL"]

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

# The same node declared node-level: one activity per node, its model and tool calls made inside it.
NODE_LEVEL = "work_at_once"
rewind_node_options = {NODE_LEVEL: {"durability": "node"}}


def node_level_builder() -> StateGraph:
    b = StateGraph(State)
    b.add_node(NODE_LEVEL, work)
    b.add_edge(START, NODE_LEVEL)
    b.add_conditional_edges(NODE_LEVEL, _route_node_level, {NODE_LEVEL: NODE_LEVEL, END: END})
    return b


async def _route_node_level(state: State) -> str:
    return NODE_LEVEL if state["n"] < state["limit"] else END


node_graph = node_level_builder().compile()
