"""The soak's tools (loaded by its workers as module `soak_tools`).

Each tool keeps its own execution ledger, independent of Rewind: one JSON line
per execution start, end and applied effect, appended and fsync'd before the
tool goes on, so a SIGKILL right after a line cannot lose it. The invariants
are checked against this ledger, not against what Rewind says happened.

Tool faults are the tool's own, decided by a hash of (seed, run, branch, step,
call, attempt): the same call faults the same way whenever the seed is
replayed. Only early attempts fault (never the last ones a call may take), so
every call succeeds in the end and the run's transcript stays that of an
undisturbed run. Reference runs (run ids starting "ref-") never fault.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path

from pydantic import BaseModel

from activities.code.pipelines import pipeline
from activities.tools.registry import subagent, tool, tool_context

import soak_ledger  # this folder, on the workers' PYTHONPATH

TOOL_TIMEOUT_S = 4.0  # a "timeout" fault sleeps past it
MAX_ATTEMPTS = 6


class Unstorable:
    """What a "malformed output" fault returns: no JSON form at all."""


def _ledger(kind: str, **fields: object) -> None:
    ctx = tool_context()
    soak_ledger.append(kind, tool=ctx.tool_name, run=ctx.run_id, branch=ctx.branch_id, step=ctx.step,
                       call=ctx.tool_call_id, attempt=ctx.attempt, key=ctx.idempotency_key, **fields)


def _roll(*parts: object) -> float:
    digest = hashlib.sha256(json.dumps([os.environ.get("REWIND_SOAK_SEED", "0"), *parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _fault() -> str | None:
    """The fault this attempt of this call plays: None, "raise", "timeout" or "malformed"."""
    ctx = tool_context()
    rate = float(os.environ.get("REWIND_SOAK_TOOL_FAULT_RATE", "0"))
    if ctx.run_id.startswith("ref-") or ctx.attempt > 2 or not rate:
        return None
    roll = _roll(ctx.run_id, ctx.branch_id, ctx.step, ctx.tool_call_id, ctx.attempt)
    if roll >= rate / ctx.attempt:
        return None
    return ("raise", "timeout", "malformed")[int(_roll("kind", ctx.run_id, ctx.tool_call_id, ctx.attempt) * 3)]


async def _run(args: dict, body) -> object:  # type: ignore[no-untyped-def]
    """The ledger and the faults around one execution."""
    ctx = tool_context()
    fault = _fault()
    _ledger("start", args=args, fault=fault)
    # A little work, so a SIGKILL can land inside a tool.
    await asyncio.sleep(0.05 + 0.25 * _roll("delay", ctx.run_id, ctx.tool_call_id, ctx.attempt))
    if fault == "raise":
        _ledger("end", args=args, outcome="raised")
        raise RuntimeError("soak: injected tool failure")
    if fault == "timeout":
        await asyncio.sleep(TOOL_TIMEOUT_S + 2.0)
        _ledger("end", args=args, outcome="late")
        return "too late"
    output = await body()
    if fault == "malformed":
        _ledger("end", args=args, outcome="malformed")
        return {"value": Unstorable()}
    _ledger("end", args=args, outcome="ok")
    return output


@tool(timeout_s=TOOL_TIMEOUT_S, heartbeat_s=2, max_attempts=MAX_ATTEMPTS)
async def lookup(term: str) -> str:
    """Look a term up (read-only)."""
    async def body() -> str:
        return f"definition of {term}: " + hashlib.sha256(term.encode()).hexdigest()[:16]
    return await _run({"term": term}, body)  # type: ignore[return-value]


@tool(timeout_s=TOOL_TIMEOUT_S, heartbeat_s=2, max_attempts=MAX_ATTEMPTS)
async def blob(index: int, size: int) -> str:
    """Read-only: `size` characters of deterministic text (long runs)."""
    async def body() -> str:
        line = f"record {index}: " + "lorem ipsum dolor sit amet " * 4
        return (line * (size // len(line) + 1))[:size]
    return await _run({"index": index, "size": size}, body)  # type: ignore[return-value]


def _apply(effect: str) -> None:
    """The effect, keyed by the idempotency key (as a real side-effecting tool keys a
    remote effect): a second execution with the same key changes nothing."""
    ctx = tool_context()
    outbox = Path(os.environ["REWIND_SOAK_OUTBOX"])
    outbox.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(outbox / f"{ctx.idempotency_key}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        _ledger("effect", applied=False, effect=effect)
        return
    os.write(fd, effect.encode())
    os.fsync(fd)
    os.close(fd)
    _ledger("effect", applied=True, effect=effect)


@tool(side_effects=True, timeout_s=TOOL_TIMEOUT_S, heartbeat_s=2, max_attempts=MAX_ATTEMPTS)
async def send_message(to: str, body: str) -> str:
    """Side-effecting: sends a message (once per idempotency key)."""
    async def run() -> str:
        _apply(f"message to {to}: {body}")
        return f"sent to {to}"
    return await _run({"to": to, "body": body}, run)  # type: ignore[return-value]


@tool(side_effects=True, needs_approval=True, timeout_s=TOOL_TIMEOUT_S, heartbeat_s=2, max_attempts=MAX_ATTEMPTS)
async def wire(to: str, amount_cents: int) -> str:
    """Side-effecting; every call waits for a person's approval."""
    async def run() -> str:
        _apply(f"wire {amount_cents} to {to}")
        return f"wired {amount_cents} to {to}"
    return await _run({"to": to, "amount_cents": amount_cents}, run)  # type: ignore[return-value]


class Topic(BaseModel):
    topic: str


researcher = subagent(
    name="researcher", description="Research one topic with lookup and report.", system_prompt="You research.",
    tools=["lookup"], args=Topic, task_template="Look into {topic}", max_steps=6,
)


@pipeline
async def soak_pipeline(ctx, topic: str) -> str:
    """The soak's pipeline: parallel lookups, a labelled model call, an effect, a cached lookup."""
    found = await asyncio.gather(*(ctx.tool("lookup", term=f"{topic}-{i}") for i in range(3)))
    ctx.state["found"] = len(found)
    summary = await ctx.llm("summarize", user="\n".join(found))
    await ctx.tool("send_message", to="ops", body=summary)
    again = await ctx.tool("lookup", term=f"{topic}-0")  # answered from the run's cache
    return f"{summary} / {again[:24]}"


# A graph (LangGraph): a call-level node (a Rewind tool and a ChatOpenAI call, each an activity),
# a node that does its own I/O (an sqlite3 database: one activity, run again whole after a crash
# inside it) and a call-level node after it. Its answer is its final state: the same however it
# was interrupted on the way.
from typing import TypedDict  # noqa: E402 - the graph's part of the module

from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

soak_llm = ChatOpenAI(model="soak", api_key="unused")  # the run's model answers (--model, the shape's script)


class SoakGraphState(TypedDict, total=False):
    topic: str
    facts: list[str]
    rows: int
    summary: str


async def gather_facts(state: SoakGraphState) -> dict:
    facts = [await lookup(term=f"{state['topic']}-{i}") for i in range(2)]
    answer = await soak_llm.ainvoke([HumanMessage("Pick the facts: " + "; ".join(facts))])
    return {"facts": [*facts, str(answer.content)]}


def count_rows(state: SoakGraphState) -> dict:
    import sqlite3

    with sqlite3.connect(":memory:") as db:  # its own I/O: the node runs as one activity
        db.execute("create table facts (text)")
        db.executemany("insert into facts values (?)", [(f,) for f in state["facts"]])
        return {"rows": db.execute("select count(*) from facts").fetchone()[0]}


async def summarize_graph(state: SoakGraphState) -> dict:
    answer = await soak_llm.ainvoke([HumanMessage(f"Summarize {state['rows']} facts")])
    await send_message(to="graph", body=str(answer.content))
    return {"summary": str(answer.content)}


_soak_builder = StateGraph(SoakGraphState)
_soak_builder.add_node("gather_facts", gather_facts)
_soak_builder.add_node("count_rows", count_rows)
_soak_builder.add_node("summarize_graph", summarize_graph)
_soak_builder.add_edge(START, "gather_facts")
_soak_builder.add_edge("gather_facts", "count_rows")
_soak_builder.add_edge("count_rows", "summarize_graph")
_soak_builder.add_edge("summarize_graph", END)
soak_graph = _soak_builder.compile()
