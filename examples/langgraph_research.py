"""The article's LangGraph research graph, run by Rewind as a durable run.

    rewind demo --langgraph                                     (offline, on the scripted model)
    rewind worker --tool-modules examples.langgraph_research
    rewind start --graph examples.langgraph_research:agent \\
        --input '{"messages": [{"role": "user", "content": "Acme Robotics, Globex, Initech"}]}' --wait

The graph is the reference design's, unchanged: planner -> retriever ->
synthesizer -> validator, back to the retriever when validation fails ->
formatter. The nodes are ordinary LangGraph nodes: they call a `ChatOpenAI`
model and LangChain tools. In a Rewind run every model call goes through
Rewind's model path (tokens and cost in the ledger) and every tool call runs
as one of the worker's tool activities (read-only results cached across
forks, `save_report` with an idempotency key and never twice), and each
super-step is a checkpoint labelled by its node (docs/langgraph.md).
"""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, StateGraph

from examples import research_agent as research

__all__ = ["agent", "build_research_agent_graph", "SCRIPT_NAME", "script", "TASK"]

# In a Rewind run these nodes' ChatOpenAI calls go through Rewind's model path (the worker's
# OPENAI_API_KEY and OPENAI_BASE_URL, or the offline model), so ChatOpenAI's own client is never
# used. The key here is a placeholder only so that the module also imports where nothing sets
# OPENAI_API_KEY (`rewind demo --langgraph`'s in-process worker); `ChatOpenAI(model=...)` alone
# works under `rewind worker`, which gives an offline worker's user code a placeholder key.
llm = ChatOpenAI(model="gpt-4o-mini", api_key="unused-rewind-makes-the-calls")


@tool
async def search_web(company: str) -> str:
    """Look up public facts about one company."""
    return await research.search_company(company)


@tool
async def save_report(title: str, content: str) -> str:
    """Save the final report where the team reads it."""
    return await research.save_report(title, content)


# Declared once, next to the graph: which tools change the world (and how often to retry a search).
rewind_tool_options = {"save_report": {"side_effects": True}, "search_web": {"max_attempts": 6}}


class ResearchAgentState(TypedDict):
    messages: Annotated[list, operator.add]
    research_notes: str
    sources_consulted: list[str]
    draft_report: str
    validation_passed: bool


async def planner_node(state: ResearchAgentState) -> dict:
    plan = await llm.ainvoke([SystemMessage("List the companies to research, comma-separated, and nothing else."),
                              *state["messages"]])
    return {"messages": [plan]}


async def retriever_node(state: ResearchAgentState) -> dict:
    companies = [c.strip() for c in str(state["messages"][-1].content).split(",") if c.strip()]
    if state.get("validation_passed") is False:  # back from the validator: check the facts again
        companies = companies[:1]
    facts = [await search_web.ainvoke({"company": c}) for c in companies]
    return {"research_notes": "\n".join(facts), "sources_consulted": [*state.get("sources_consulted", []), *companies]}


async def synthesizer_node(state: ResearchAgentState) -> dict:
    draft = await llm.ainvoke([SystemMessage("Write a competitive report from these facts only."),
                               HumanMessage(state["research_notes"])])
    return {"draft_report": str(draft.content)}


async def validator_node(state: ResearchAgentState) -> dict:
    verdict = await llm.ainvoke([SystemMessage("Answer PASS or FAIL: is every claim supported by the sources?"),
                                 HumanMessage(f"sources: {len(state['sources_consulted'])}\n{state['draft_report']}")])
    return {"validation_passed": str(verdict.content).strip().upper().startswith("PASS")}


async def formatter_node(state: ResearchAgentState) -> dict:
    saved = await save_report.ainvoke({"title": "Competitive report", "content": state["draft_report"]})
    return {"messages": [{"role": "assistant", "content": f"{state['draft_report']}\n\n({saved})"}]}


def build_research_agent_graph():
    graph = StateGraph(ResearchAgentState)

    # Add nodes
    graph.add_node("planner", planner_node)
    graph.add_node("retriever", retriever_node)
    graph.add_node("synthesizer", synthesizer_node)
    graph.add_node("validator", validator_node)
    graph.add_node("formatter", formatter_node)

    # Add edges
    graph.set_entry_point("planner")
    graph.add_edge("planner", "retriever")
    graph.add_edge("retriever", "synthesizer")
    graph.add_edge("synthesizer", "validator")
    graph.add_conditional_edges(
        "validator",
        lambda state: "formatter" if state["validation_passed"] else "retriever",
        {"formatter": "formatter", "retriever": "retriever"}
    )
    graph.add_edge("formatter", END)

    return graph.compile()


agent = build_research_agent_graph()

TASK = {"messages": [{"role": "user", "content": "Research our top competitors: "
                      + ", ".join(research.DEFAULT_COMPANIES)}]}
SCRIPT_NAME = "langgraph-research"


def script() -> dict[str, list[dict]]:
    """The offline model's answers, by node: the first draft fails validation (back to the
    retriever), the second passes."""
    return {
        "planner": [{"content": ", ".join(research.DEFAULT_COMPANIES)}],
        "synthesizer": [{"content": "The five companies compared on revenue, growth and technology."}],
        "validator": [{"content": "FAIL: Acme Robotics' growth is not in the sources",
                       "by_user": {f"sources: {len(research.DEFAULT_COMPANIES) + 1}\n": {"content": "PASS"}}}],
    }
