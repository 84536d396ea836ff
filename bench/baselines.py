"""Baselines (a) and (c): the same scripted agent loop without Temporal.

(a) plain asyncio, nothing persisted: the openai client against the
    scripted model over HTTP, the same `@tool` functions called in-process.
(c) LangGraph with its SqliteSaver (a file db): a model node and a tools node,
    messages in a list channel with an `operator.add` reducer, which is how a
    LangGraph agent keeps its conversation. Optional: `langgraph_available()`.

Both return per-step seconds (model call start to next model call start).
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from activities.tools.registry import ToolRegistry
from workflows.vocabulary.contracts import DEFAULT_SYSTEM_PROMPT


def _first_messages(task: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": task}]


def _schemas(registry: ToolRegistry) -> list[dict[str, Any]]:
    return [s.openai_schema() for s in registry.specs()]


def _assistant(data: dict[str, Any]) -> dict[str, Any]:
    message = data["choices"][0]["message"]
    return {k: v for k, v in message.items() if v is not None or k == "content"}


async def _run_tool(registry: ToolRegistry, call: dict[str, Any]) -> dict[str, Any]:
    fn = call["function"]
    registered = registry.get(fn["name"])
    output = await registered.fn(**registered.validate(json.loads(fn["arguments"] or "{}")))
    return {"role": "tool", "tool_call_id": call["id"], "content": output if isinstance(output, str) else json.dumps(output)}


async def asyncio_loop(base_url: str, model: str, registry: ToolRegistry, task: str, max_steps: int) -> list[float]:
    """(a): per-step seconds of the loop with no persistence at all."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    messages, tools, marks = _first_messages(task), _schemas(registry), []
    try:
        for _ in range(max_steps):
            marks.append(time.perf_counter())
            raw = await client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=tools)
            reply = _assistant(raw.http_response.json())
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            messages.extend(await asyncio.gather(*(_run_tool(registry, c) for c in calls)))
        marks.append(time.perf_counter())
    finally:
        await client.close()
    return [b - a for a, b in zip(marks, marks[1:])]


def langgraph_available() -> str | None:
    """None if LangGraph and its SqliteSaver import, else why not."""
    try:
        import langgraph.graph  # noqa: F401
        from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401
    except ImportError as exc:
        return f"langgraph / langgraph-checkpoint-sqlite not installed ({exc}); `pip install -e '.[bench]'`"
    return None


class _State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def langgraph_loop(base_url: str, model: str, registry: ToolRegistry, task: str, max_steps: int, db: Path) -> dict[str, Any]:
    """(c): run the loop as a LangGraph graph checkpointed by SqliteSaver into `db` (blocking)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(db)) as saver:
        out = langgraph_run(base_url, model, registry, task, max_steps, saver)
        out["checkpoints"] = saver.conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    # Closing the last connection folds the WAL into the db file.
    wal = db.with_name(db.name + "-wal")
    out["db_bytes"] = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return out


def langgraph_run(base_url: str, model: str, registry: ToolRegistry, task: str, max_steps: int,
                  checkpointer: Any, durability: str | None = None) -> dict[str, Any]:
    """The LangGraph loop of (c) on any checkpointer (blocking): per-step seconds, wall time, final messages.
    `durability`: LangGraph's (None: its default, "async": a checkpoint is saved while the next step runs)."""
    import openai
    from langgraph.graph import END, START, StateGraph

    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    tools = _schemas(registry)
    marks: list[float] = []
    loop = asyncio.new_event_loop()  # the @tool functions are async

    def model_node(state: _State) -> dict[str, Any]:
        marks.append(time.perf_counter())
        raw = client.chat.completions.with_raw_response.create(model=model, messages=state["messages"], tools=tools)
        return {"messages": [_assistant(raw.http_response.json())]}

    def tools_node(state: _State) -> dict[str, Any]:
        calls = state["messages"][-1].get("tool_calls") or []
        return {"messages": [loop.run_until_complete(_run_tool(registry, c)) for c in calls]}

    def route(state: _State) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    builder = StateGraph(_State)
    builder.add_node("model", model_node)
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    started = time.perf_counter()
    try:
        graph = builder.compile(checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * max_steps + 10}
        final = graph.invoke({"messages": _first_messages(task)}, config,
                             **({"durability": durability} if durability else {}))
        marks.append(time.perf_counter())
    finally:
        loop.close()
        client.close()
    return {
        "durations": [b - a for a, b in zip(marks, marks[1:])],
        "wall_s": time.perf_counter() - started,
        "steps": sum(1 for m in final["messages"] if m.get("role") == "assistant"),
        "messages": final["messages"],
    }


def langgraph_functional_pipeline(base_url: str, model: str, registry: ToolRegistry, pairs: int, size: int,
                                  db: Path) -> dict[str, Any]:
    """LangGraph's functional API on SqliteSaver (blocking): an `@entrypoint` whose `pairs` turns
    each call a model `@task` and a tool `@task` (the `blob` tool), as a pipeline does; each
    task's result is checkpointed. Per-pair seconds (model call start to the next one)."""
    import openai
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.func import entrypoint, task

    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    loop = asyncio.new_event_loop()
    tool = registry.get("blob")
    marks: list[float] = []

    @task
    def call_model(index: int) -> str:
        marks.append(time.perf_counter())
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": f"turn {index}"}])
        return _assistant(raw.http_response.json()).get("content") or ""

    @task
    def call_tool(index: int) -> str:
        return loop.run_until_complete(tool.fn(index=index, size=size))

    started = time.perf_counter()
    try:
        with SqliteSaver.from_conn_string(str(db)) as saver:
            @entrypoint(checkpointer=saver)
            def run(n: int) -> str:
                for index in range(n):
                    call_model(index).result()
                    call_tool(index).result()
                return "finished"

            assert run.invoke(pairs, {"configurable": {"thread_id": "bench"}}) == "finished"
            marks.append(time.perf_counter())
    finally:
        loop.close()
        client.close()
    return {"durations": [b - a for a, b in zip(marks, marks[1:])], "wall_s": time.perf_counter() - started}
