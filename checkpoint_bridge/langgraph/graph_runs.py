"""A Rewind graph run's steps as a LangGraph thread, for `RewindSaver` to read.

A graph run (`rewind start --graph`, workflows/graph/runner.py) keeps its state
as AgentCheckpoints: a super-step per step, its `messages` channel in the
document's messages and its other channels in `agent_variables`. LangGraph
reads a thread through its checkpointer; `RewindSaver` on the same store
answers a thread named like a graph run (and holding no LangGraph checkpoints
of its own) from these documents, so `graph.get_state_history(thread)` of the
graph compiled with that saver shows the run's steps, newest first, each with
the channels as the step left them. The run's `main` branch is the thread;
its checkpoint ids are its step indices, zero-padded, so they sort as steps do.
Read only: a graph resumed on such a thread writes a thread of its own.
"""

from __future__ import annotations

from typing import Any

from checkpoint_bridge.checkpoints.lineage import lineage_in
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.schema import code_kind
from checkpoint_bridge.stores import ObjectStore
from workflows.vocabulary.errors import CheckpointNotFoundError, RunNotFoundError

ID_WIDTH = 8


def thread_checkpoint_id(step: int) -> str:
    return f"{step:0{ID_WIDTH}d}"


async def graph_run_tuples(objects: ObjectStore, run_id: str) -> list[Any]:
    """The graph run `run_id`'s main-branch steps (its newest revision's line) as LangGraph
    CheckpointTuples, oldest first ([]
    when no graph run of that id is in the store)."""
    from langchain_core.messages import convert_to_messages
    from langgraph.checkpoint.base import CheckpointTuple

    store = CheckpointStore(objects)
    try:
        summaries = await store.list_checkpoints(run_id)
        # The main branch as it stands: after a rollback (or a resume), its newest revision's line.
        line = lineage_in(summaries, "main", store.url) if summaries else []
    except (CheckpointNotFoundError, RunNotFoundError, ValueError):
        return []
    documents = [await store.load(s.checkpoint_id) for s in line]
    if not any(code_kind(d.pipeline) == "graph" for d in documents):
        return []
    with_messages = any(d.messages for d in documents)
    out: list[Any] = []
    for document in documents:
        values: dict[str, Any] = dict(document.agent_variables)
        if with_messages:  # as LangChain messages, as a graph's nodes see them
            values["messages"] = convert_to_messages(list(document.messages))
        step = document.step_index
        details = document.pipeline if isinstance(document.pipeline, dict) else {}
        out.append(CheckpointTuple(
            config=_config(run_id, step),
            checkpoint={"v": 4, "id": thread_checkpoint_id(step), "ts": document.created_at.isoformat(),
                        "channel_values": values, "channel_versions": {c: 1 for c in values},
                        "versions_seen": {}, "updated_channels": None},
            metadata={"source": "input" if step == 0 else "loop", "step": details.get("superstep", step - 1),
                      "parents": {}, "rewind_checkpoint": document.checkpoint_id, "rewind_label": document.step_label},
            parent_config=_config(run_id, step - 1) if step else None,
            pending_writes=[],
        ))
    return out


def _config(run_id: str, step: int) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id, "checkpoint_ns": "", "checkpoint_id": thread_checkpoint_id(step)}}


__all__ = ["graph_run_tuples", "thread_checkpoint_id"]
