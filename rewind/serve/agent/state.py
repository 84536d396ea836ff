"""A thread's state as the Agent Server API shows it, read from the run's checkpoints.

A graph run's step is one LangGraph checkpoint of the thread (docs/langgraph.md): its
`messages` the graph's messages channel, its `agent_variables` the other channels. Here they
become what `threads.get_state` / `get_history` answer (LangGraph's ThreadState): `values`
(the messages as LangChain message dicts, as LangGraph's server serializes them), `next`
(the nodes the following step ran, or the node an interrupt() waits in), `checkpoint` (its
id is the Rewind checkpoint id, `RUN:BRANCH:STEP`: what `rewind show` takes), `metadata`,
`parent_checkpoint`, `tasks` and `interrupts`.
"""

from __future__ import annotations

from typing import Any

from checkpoint_bridge.checkpoints.lineage import lineage
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.schema import AgentCheckpoint
from workflows.vocabulary.errors import CheckpointNotFoundError, ConfigError, RunNotFoundError
from workflows.vocabulary.ids import parse_checkpoint_id

# Steps of a graph run that are no super-step of LangGraph's: the input, a turn's input, the end.
INPUT_LABELS = ("start", "input")


def lc_messages(messages: list[dict[str, Any]], thread_id: str) -> list[dict[str, Any]]:
    """Chat messages as the dicts LangGraph's server sends (`{"type": "human", "content": ...}`),
    each with an id (kept, or the thread's and its place in the channel)."""
    try:
        from langchain_core.messages import convert_to_messages
    except ImportError:
        raise ConfigError("the Agent Server API shows a graph's messages as LangChain's: install rewind with the "
                          "langgraph extra where rewind serve runs (pip install -e '.[langgraph]')") from None

    out = []
    for index, message in enumerate(convert_to_messages([dict(m) for m in messages])):
        data = message.model_dump()
        if not data.get("id"):
            data["id"] = f"{thread_id}-{index}"
        out.append(data)
    return out


def values_of(document: AgentCheckpoint) -> dict[str, Any]:
    """The graph's channels at a step: its state, with `messages` when the graph has them."""
    values: dict[str, Any] = dict(document.agent_variables or {})
    if document.messages or "messages" in values:
        values["messages"] = lc_messages(list(document.messages), document.run_id)
    return values


def nodes_of(document: AgentCheckpoint) -> list[str]:
    details = document.pipeline if isinstance(document.pipeline, dict) else {}
    nodes = details.get("nodes")
    if isinstance(nodes, list):
        return [str(n) for n in nodes]
    return [] if document.step_label in (*INPUT_LABELS, "result") else [document.step_label]


def config_of(thread_id: str, checkpoint_id: str | None) -> dict[str, Any] | None:
    if checkpoint_id is None:
        return None
    return {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id, "checkpoint_map": None}


def interrupt_list(pending: list[Any]) -> list[dict[str, Any]]:
    """The interrupt()s a thread waits on (a run's pending approvals of tool `interrupt`): their
    value, and as id the call `rewind approve` names (interrupt_N)."""
    out = []
    for approval in pending:
        if getattr(approval, "tool_name", None) == "interrupt":
            arguments = approval.arguments or {}
            out.append({"value": arguments.get("value"), "id": approval.tool_call_id,
                        "node": arguments.get("node"), "step": getattr(approval, "step", None)})
    return out


def thread_state(thread_id: str, document: AgentCheckpoint, parent: AgentCheckpoint | None,
                 after: AgentCheckpoint | None, interrupts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One step as LangGraph's ThreadState. `after`: the step that followed it on the line
    (its nodes are this one's `next`); `interrupts`: what the head waits on."""
    waiting = interrupts or []
    nxt = nodes_of(after) if after is not None else [str(i.get("node")) for i in waiting if i.get("node")]
    tasks = [{"id": i["id"], "name": i.get("node") or "", "path": [], "error": None,
              "interrupts": [{"value": i["value"], "id": i["id"]}], "checkpoint": None, "state": None, "result": None}
             for i in waiting]
    details = document.pipeline if isinstance(document.pipeline, dict) else {}
    metadata = {"source": "input" if document.step_label in INPUT_LABELS else "loop",
                "step": details.get("superstep", document.step_index - 1), "parents": {},
                "rewind_checkpoint": document.checkpoint_id, "rewind_label": document.step_label,
                "graph_id": details.get("graph")}
    return {
        "values": values_of(document),
        "next": nxt,
        "tasks": tasks,
        "checkpoint": config_of(thread_id, document.checkpoint_id),
        "metadata": metadata,
        "created_at": document.created_at.isoformat(),
        "parent_checkpoint": config_of(thread_id, parent.checkpoint_id if parent is not None else None),
        "interrupts": [{"value": i["value"], "id": i["id"]} for i in waiting],
    }


async def line_of(store: CheckpointStore, run_id: str, branch: str) -> list[AgentCheckpoint]:
    """The thread's line, step 0 first (empty: no step stored yet)."""
    try:
        summaries = await lineage(store, run_id, branch)
    except (RunNotFoundError, CheckpointNotFoundError):
        return []
    return [await store.load(s.checkpoint_id) for s in summaries if s.status != "invalidated"]


async def document_at(store: CheckpointStore, checkpoint_id: str) -> AgentCheckpoint:
    parse_checkpoint_id(checkpoint_id)  # a 400 for an id no checkpoint can have
    return await store.load(checkpoint_id)


def empty_state(thread_id: str) -> dict[str, Any]:
    """A thread with no step yet (created, not run): LangGraph's empty state."""
    return {"values": {}, "next": [], "tasks": [], "checkpoint": config_of(thread_id, None) or
            {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None, "checkpoint_map": None},
            "metadata": {}, "created_at": None, "parent_checkpoint": None, "interrupts": []}


__all__ = ["INPUT_LABELS", "config_of", "document_at", "empty_state", "interrupt_list", "lc_messages", "line_of",
           "nodes_of", "thread_state", "values_of"]
