"""A LangGraph graph the recorded histories run (tests/histories/record.py, the graph-* files):
a call-level node (a ChatOpenAI call and a LangChain tool call, a Store write), a node that does
its own I/O (one activity), and a Send fan-out, one step per send."""

from __future__ import annotations

import operator
import os
import tempfile
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore
from langgraph.types import Send

llm = ChatOpenAI(model="gpt-4o-mini", api_key="unused")


@tool
async def define(term: str) -> str:
    """A term's definition."""
    return f"{term}: a word"


class State(TypedDict, total=False):
    topic: str
    terms: list[str]
    sizes: list[int]
    notes: Annotated[list, operator.add]


async def plan(state: State) -> dict:
    answer = await llm.ainvoke([HumanMessage("Terms about " + state["topic"])])
    terms = [t.strip() for t in str(answer.content).split(",")]
    get_store().put(("topics",), state["topic"], {"terms": terms})
    return {"terms": terms, "notes": [await define.ainvoke({"term": terms[0]})]}


def measure(state: State) -> dict:
    with tempfile.TemporaryFile(dir=os.environ.get("TMPDIR")) as f:  # its own I/O: one activity
        f.write(" ".join(state["terms"]).encode())
        return {"sizes": [len(t) for t in state["terms"]]}


async def explain(task: dict) -> dict:
    answer = await llm.ainvoke([HumanMessage("Explain " + task["term"])])
    return {"notes": [str(answer.content)]}


def fan_out(state: State) -> list[Send]:
    return [Send("explain", {"term": term}) for term in state["terms"]]


builder = StateGraph(State)
builder.add_node("plan", plan)
builder.add_node("measure", measure)
builder.add_node("explain", explain)
builder.add_edge(START, "plan")
builder.add_edge("plan", "measure")
builder.add_conditional_edges("measure", fan_out, ["explain"])
builder.add_edge("explain", END)
graph = builder.compile(store=InMemoryStore())
