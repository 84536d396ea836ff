"""A small least-recently-used cache, for the documents and transcripts that
a step reads again right after the previous step wrote them."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    """At most ``size`` items and, with ``weigh``, at most ``budget`` of their weight."""

    def __init__(self, size: int, *, weigh: Callable[[V], int] | None = None, budget: int = 0) -> None:
        self._items: OrderedDict[str, V] = OrderedDict()
        self._size = size
        self._weigh = weigh
        self._budget = budget
        self._weight = 0

    def get(self, key: str) -> V | None:
        """The value, now the most recently used; None when absent."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        if self._weigh is not None:
            old = self._items.get(key)
            self._weight += self._weigh(value) - (self._weigh(old) if old is not None else 0)
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size or (self._weigh is not None and self._weight > self._budget and self._items):
            _key, gone = self._items.popitem(last=False)
            if self._weigh is not None:
                self._weight -= self._weigh(gone)

    def __contains__(self, key: str) -> bool:
        return key in self._items
