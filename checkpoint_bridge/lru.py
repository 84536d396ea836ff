"""A small least-recently-used cache, for the documents and transcripts that
a step reads again right after the previous step wrote them."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class LRU(Generic[V]):
    def __init__(self, size: int) -> None:
        self._items: OrderedDict[str, V] = OrderedDict()
        self._size = size

    def get(self, key: str) -> V | None:
        """The value, now the most recently used; None when absent."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._items
