"""LangGraph's `Store` in a graph run: the run's own, rebuilt from the run itself.

A graph compiled with `store=` (`get_store()` in its nodes, a node's `store` argument) runs
with a store that lives in the run's workflow: the store's contents when the module was
imported (an `InMemoryStore` filled at import), then every write the run's nodes made, in
order. A call-level node's writes are workflow code, made again identically on every replay;
a node-level node's activity gets the store's contents and gives back its writes, which are
kept with the node's answer in the record. So the store is durable as the run is: a worker
crash, a fork (which runs the graph again with the record's answers: the writes up to its
point, then its own) and continue-as-new rebuild the same contents, and a branch's writes
never reach another branch's store.
"""

from __future__ import annotations

from typing import Any

from workflows.graph.values import pack, unpack


def run_store(user_store: Any) -> Any:
    """The run's store, holding what `user_store` held (when it is an InMemoryStore)."""
    from langgraph.store.memory import InMemoryStore

    store = InMemoryStore()
    if isinstance(user_store, InMemoryStore):
        apply_writes(store, [(list(ns), key, item.value) for ns, items in user_store._data.items()
                             for key, item in items.items()])
    return store


def contents(store: Any) -> str:
    """Every item of the store, packed: (namespace, key, value)."""
    return pack([(list(ns), key, item.value) for ns, items in store._data.items() for key, item in items.items()],
                "the graph's store")


def apply_writes(store: Any, writes: list[Any]) -> None:
    """Writes as a node made them: (namespace, key, value); None deletes."""
    from langgraph.store.base import PutOp

    if writes:
        store.batch([PutOp(namespace=tuple(ns), key=key, value=value) for ns, key, value in writes])


class WriteLog:
    """A node-level node's store: the run's contents, its writes kept to hand back."""

    def __init__(self, packed: str) -> None:
        from langgraph.store.base import BaseStore, PutOp
        from langgraph.store.memory import InMemoryStore

        inner = InMemoryStore()
        apply_writes(inner, unpack(packed))
        self.writes: list[tuple[list[str], str, Any]] = []
        log = self.writes

        class Logged(BaseStore):
            def batch(self, ops: Any) -> Any:
                ops = list(ops)
                log.extend((list(op.namespace), op.key, op.value) for op in ops if isinstance(op, PutOp))
                return inner.batch(ops)

            async def abatch(self, ops: Any) -> Any:
                return self.batch(ops)

        self.store = Logged()


__all__ = ["run_store", "contents", "apply_writes", "WriteLog"]
