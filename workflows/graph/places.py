"""Where in a graph a node's code runs, and what a graph is made of.

LangGraph's config says which node (or @task) runs and in which task and checkpoint namespace;
a subgraph's nodes are named `SUBGRAPH/NODE`, and a `Send`'s task has its index in the fan-out.
The namespaces hold ids of this execution only: they tell tasks apart in memory, never in a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workflows.graph.routing import active_graph_run


def current_node() -> str:
    """The node (or task) whose code is running, as LangGraph's config says (a subgraph's node
    as `SUBGRAPH/NODE`)."""
    return current_place().node


@dataclass
class Place:
    """Where in the graph a node's code runs: the node (a subgraph's as `SUBGRAPH/NODE`), the
    graph it belongs to and its own task (LangGraph's checkpoint namespaces: ids of this
    execution, never recorded) and, for a `Send`'s task, its index in the fan-out."""

    node: str
    graph_ns: str = ""
    task_ns: str = ""
    send: int | None = None

    @property
    def subgraph(self) -> str:
        return ns_label(self.graph_ns)


def current_place() -> Place:
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    metadata = config.get("metadata") or {}
    task_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or metadata.get("langgraph_checkpoint_ns")
                  or "")
    graph_ns = task_ns.rsplit("|", 1)[0] if "|" in task_ns else ""
    runner = active_graph_run()
    if runner is not None and runner.functional:
        graph_ns = ""  # an @entrypoint's tasks run in its namespace: they are the graph's own steps
    name = str(metadata.get("langgraph_node") or "graph")
    prefix = ns_label(graph_ns)
    path = metadata.get("langgraph_path") or ()
    send = path[1] if len(path) > 1 and path[0] == "__pregel_push" and isinstance(path[1], int) else None
    return Place(node=f"{prefix}/{name}" if prefix else name, graph_ns=graph_ns, task_ns=task_ns, send=send)


def ns_label(graph_ns: str) -> str:
    """A subgraph's namespace as its nodes' path (`outer/inner`), without LangGraph's task ids."""
    return "/".join(part.split(":", 1)[0] for part in graph_ns.split("|")) if graph_ns else ""


@dataclass
class Ran:
    """A node that completed in the super-step in flight (of its graph: `place.graph_ns`)."""

    place: Place
    seconds: float
    update: Any = None  # what the node returned, as JSON (its `graph.update` event)


def is_graph(bound: Any) -> bool:
    """Whether a node is a compiled graph (a subgraph)."""
    try:
        from langgraph.pregel import Pregel
    except ImportError:  # pragma: no cover - the extra installs it
        return False
    return isinstance(bound, Pregel)


def node_names(graph: Any, prefix: str = "") -> list[str]:
    """A graph's nodes, a subgraph's as `subgraph/node` (and by its own name)."""
    out = []
    for name, node in graph.nodes.items():
        if name.startswith("__"):
            continue
        qualified = f"{prefix}/{name}" if prefix else name
        out.append(qualified)
        if is_graph(node.bound):
            inner = node_names(node.bound, qualified)
            out += inner + [n.rsplit("/", 1)[-1] for n in inner]
    return list(dict.fromkeys(out))


def task_names(module: Any) -> list[str]:
    """The @task functions of a functional graph's module, by name."""
    try:
        from langgraph.func import _TaskFunction
    except ImportError:  # pragma: no cover - the extra installs it
        return []
    return [getattr(v.func, "_rewind_task", v.func).__name__ for v in vars(module).values()
            if isinstance(v, _TaskFunction)]


__all__ = ["Place", "Ran", "current_place", "current_node", "ns_label", "is_graph", "node_names", "task_names"]
