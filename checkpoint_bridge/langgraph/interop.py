"""LangGraph threads into Rewind runs, and Rewind checkpoints out to LangGraph.

Import: every checkpoint of a LangGraph thread (read through a saver's public
API: `SqliteSaver`, `RewindSaver`, any `BaseCheckpointSaver`) whose state has
a `messages` list becomes an AgentCheckpoint: the conversation in OpenAI's
shape (LangChain message objects are converted), the tool calls paired with
their results, a step per LangGraph checkpoint, parent links as LangGraph
recorded them. The thread's newest line is the run's `main`; a line that time
travel left behind (a checkpoint resumed from the past) becomes a branch
`lg-<checkpoint id prefix>` forked where it left main, so `rewind tree`,
`show`, `diff` and `fork` work on it. A fork of the imported run continues
the conversation as a durable Temporal run; the imported tool calls are
history, never run again.

Export: one checkpoint as a LangGraph checkpoint on a thread, its `messages`
channel holding the conversation; a graph whose state has a `messages` list
(OpenAI-style dicts, appended) goes on from it with
`graph.invoke({"messages": [next message]}, {"configurable": {"thread_id": T}})`.

LangGraph is an optional extra (`pip install 'rewind-agents[langgraph]'`):
nothing here is imported by the core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from checkpoint_bridge.document.schema import AgentCheckpoint, ToolCallRecord
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import LangGraphThreadError, RunExistsError, UsageError
from workflows.vocabulary.ids import checkpoint_id, validate_id
from workflows.vocabulary.text import scrub_surrogates

NEEDS_LANGGRAPH = "LangGraph interop needs the langgraph extra: pip install 'rewind-agents[langgraph]'"


def _require_langgraph() -> None:
    try:
        import langgraph.checkpoint.base  # noqa: F401
    except ImportError as exc:
        raise UsageError(NEEDS_LANGGRAPH) from exc


def open_saver(*, sqlite: str | None = None, store_url: str | None = None, endpoint_url: str | None = None,
               region_name: str | None = None, create: bool = False) -> Any:
    """A sync LangGraph saver on a SqliteSaver file or a Rewind store URL (`RewindSaver`)."""
    _require_langgraph()
    if (sqlite is None) == (store_url is None):
        raise UsageError("say where the LangGraph thread is: --sqlite PATH or --store URL (one of them)")
    if sqlite is not None:
        import sqlite3
        from pathlib import Path

        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise UsageError("reading a SqliteSaver file needs langgraph-checkpoint-sqlite: "
                             "pip install 'rewind-agents[langgraph]'") from exc
        if not create and not Path(sqlite).is_file():
            raise UsageError(f"no SqliteSaver database at {sqlite}")
        saver = SqliteSaver(sqlite3.connect(sqlite, check_same_thread=False))
        saver.setup()
        return saver
    from checkpoint_bridge.langgraph.saver import RewindSaver

    return RewindSaver.from_url(store_url, endpoint_url=endpoint_url, region_name=region_name)  # type: ignore[arg-type]


def close_saver(saver: Any) -> None:
    conn = getattr(saver, "conn", None)
    if conn is not None:
        conn.close()
    elif hasattr(saver, "close"):
        saver.close()


# -- import -----------------------------------------------------------------------

def _openai_messages(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise LangGraphThreadError(f"{where}: the state's `messages` is a {type(value).__name__}, not a list")
    out: list[dict[str, Any]] = []
    for m in value:
        if isinstance(m, dict):
            out.append(dict(m))
            continue
        try:  # LangChain message objects (the add_messages reducer keeps those)
            from langchain_core.messages import BaseMessage, convert_to_openai_messages
        except ImportError:
            BaseMessage = None  # type: ignore[assignment,misc]
        if BaseMessage is None or not isinstance(m, BaseMessage):
            raise LangGraphThreadError(f"{where}: a message of type {type(m).__name__} is neither an OpenAI-style "
                                       "dict nor a LangChain message")
        converted = convert_to_openai_messages(m)
        if m.type == "tool" and "tool_call_id" not in converted:
            converted["tool_call_id"] = getattr(m, "tool_call_id", None)
        out.append(converted)
    return scrub_surrogates(out)


def _arguments(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {"_unparsed_arguments": text}
    return value if isinstance(value, dict) else {"_unparsed_arguments": text}


def _tool_records(messages: list[dict[str, Any]], at: datetime) -> list[ToolCallRecord]:
    """The conversation's tool calls paired with their results, in call order."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    records = []
    for m in messages:
        calls = (m.get("tool_calls") or []) if m.get("role") == "assistant" else []
        for call in calls:
            function = call.get("function") or {}
            name = function.get("name") or call.get("name") or "unknown"
            arguments = function.get("arguments", call.get("args"))
            answered = call.get("id") in results
            records.append(ToolCallRecord(
                tool_name=str(name), tool_input=_arguments(arguments),
                tool_output=results.get(call.get("id")) if answered else None,
                error=None if answered else "no result in the LangGraph thread",
                called_at=at, tool_call_id=call.get("id"),
            ))
    return records


def _when(checkpoint: dict[str, Any]) -> datetime:
    try:
        return datetime.fromisoformat(str(checkpoint.get("ts")).replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(timezone.utc)


def _label(metadata: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    last = messages[-1] if messages else {}
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return "final answer"
    writes = metadata.get("writes") or {}
    nodes = ", ".join(sorted(writes)) if isinstance(writes, dict) and writes else metadata.get("source") or "checkpoint"
    return f"langgraph {nodes}"


@dataclass
class ImportReport:
    run_id: str
    thread_id: str
    checkpoints: int
    branches: dict[str, int]  # branch -> checkpoints on it
    skipped: int  # LangGraph checkpoints with no messages yet (before the input was written)


def thread_tuples(saver: Any, thread_id: str) -> list[Any]:
    """Every checkpoint tuple of the thread's root namespace (the saver's own order: newest first)."""
    return list(saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}))


def to_agent_checkpoints(run_id: str, thread_id: str, tuples: list[Any]) -> tuple[list[AgentCheckpoint], int]:
    """The thread as AgentCheckpoints, parents first, and how many LangGraph checkpoints had no messages."""
    validate_id("run", run_id)
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    parent = {cid: (t.parent_config or {}).get("configurable", {}).get("checkpoint_id") for cid, t in by_id.items()}
    with_messages = {cid for cid, t in by_id.items()
                     if isinstance((t.checkpoint.get("channel_values") or {}).get("messages"), list)}
    if not with_messages:
        raise LangGraphThreadError(f"LangGraph thread {thread_id!r} has no checkpoint whose state holds `messages`; "
                                   "only message-based agents can be imported")

    def up(cid: str | None) -> str | None:  # the nearest ancestor that has messages
        while cid is not None and cid not in with_messages:
            cid = parent.get(cid)
        return cid

    def line(cid: str) -> list[str]:
        out: list[str] = []
        node: str | None = cid
        while node is not None:
            out.append(node)
            node = up(parent.get(node))
        return out[::-1]

    newest = max(with_messages, key=lambda c: (by_id[c].checkpoint.get("ts") or "", c))
    placed: dict[str, tuple[str, int]] = {}  # LangGraph id -> (branch, step)
    order: list[tuple[str, str, int]] = []  # (LangGraph id, branch, step), parents first
    for step, cid in enumerate(line(newest)):
        placed[cid] = ("main", step)
        order.append((cid, "main", step))
    children = {p for c in with_messages for p in [up(parent.get(c))] if p is not None}
    leaves = sorted((c for c in with_messages if c not in children and c not in placed),
                    key=lambda c: by_id[c].checkpoint.get("ts") or "", reverse=True)
    for leaf in leaves:
        path = line(leaf)
        start = next(i for i in range(len(path) - 1, -1, -1) if path[i] in placed or i == 0)
        if path[start] not in placed:
            start = -1  # a separate root: its own branch from step 0
        branch = validate_id("branch", f"lg-{leaf.replace('-', '')[:12]}")
        for i in range(start + 1, len(path)):
            placed[path[i]] = (branch, i)
            order.append((path[i], branch, i))

    out: list[AgentCheckpoint] = []
    for cid, branch, step in order:
        t = by_id[cid]
        where = f"LangGraph checkpoint {cid} of thread {thread_id!r}"
        messages = _openai_messages(t.checkpoint["channel_values"]["messages"], where)
        at = _when(t.checkpoint)
        above = up(parent.get(cid))
        parent_id = checkpoint_id(run_id, *placed[above]) if above is not None else None
        out.append(AgentCheckpoint(
            checkpoint_id=checkpoint_id(run_id, branch, step), run_id=run_id, parent_id=parent_id,
            branch_id=branch, step_index=step, step_label=_label(t.metadata or {}, messages), messages=messages,
            agent_variables={"langgraph_thread_id": thread_id, "langgraph_checkpoint_id": cid},
            tool_call_cache=_tool_records(messages, at), created_at=at,
        ))
    return out, len(by_id) - len(with_messages)


async def import_thread(store: CheckpointStore, saver: Any, thread_id: str, run_id: str) -> ImportReport:
    """Store the thread as run `run_id` (which must be new)."""
    import asyncio

    validate_id("run", run_id)
    if not thread_id.strip():
        raise UsageError("--thread is empty; name the LangGraph thread to import")
    if await store.list_checkpoints(run_id):
        raise RunExistsError(f"the store already has a run {run_id!r}; choose another --run-id")
    tuples = await asyncio.to_thread(thread_tuples, saver, thread_id)
    if not tuples:
        raise LangGraphThreadError(f"no LangGraph thread {thread_id!r} in that saver; check --thread and the saver")
    checkpoints, skipped = to_agent_checkpoints(run_id, thread_id, tuples)
    for cp in checkpoints:
        await store.save(cp)
    branches: dict[str, int] = {}
    for cp in checkpoints:
        branches[cp.branch_id] = branches.get(cp.branch_id, 0) + 1
    return ImportReport(run_id, thread_id, len(checkpoints), branches, skipped)


# -- export ------------------------------------------------------------------------

def export_to_thread(cp: AgentCheckpoint, saver: Any, thread_id: str) -> str:
    """Write `cp` as the newest checkpoint of LangGraph thread `thread_id`; its checkpoint id."""
    _require_langgraph()
    from langgraph.checkpoint.base import empty_checkpoint

    if not thread_id.strip():
        raise UsageError("--thread is empty; name the LangGraph thread to write")
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    latest = saver.get_tuple(config)
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"messages": [dict(m) for m in cp.messages]}
    checkpoint["channel_versions"] = {"messages": version}
    metadata = {"source": "update", "step": cp.step_index, "parents": {},
                "rewind_checkpoint_id": cp.checkpoint_id}
    if latest is not None:
        config = latest.config
    written = saver.put(config, checkpoint, metadata, {"messages": version})
    return written["configurable"]["checkpoint_id"]


__all__ = ["LangGraphThreadError", "ImportReport", "open_saver", "close_saver", "thread_tuples",
           "to_agent_checkpoints", "import_thread", "export_to_thread", "NEEDS_LANGGRAPH"]
