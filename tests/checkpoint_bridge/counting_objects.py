"""An ObjectStore wrapper that counts reads and listings, for tests of how many requests a reader makes."""

from __future__ import annotations

import asyncio

from checkpoint_bridge.stores import ObjectStore


class CountingObjects:
    """An ObjectStore wrapper that counts GETs and how many were in flight at once
    (a real backend underneath), and listings, with their prefixes. With `hold`, each GET after the first (the head;
    with `head`, the first too) waits until that many are in flight (or a few
    seconds pass): a reader that needs one GET's answer before it asks the next
    could never get there."""

    def __init__(self, inner: ObjectStore, hold: int = 0, head: bool = False) -> None:
        self.inner, self.url, self.hold, self.head = inner, inner.url, hold, head
        self.gets = self.lists = self.in_flight = self.most_in_flight = 0
        self.listed: list[str] = []
        self._enough = asyncio.Event()

    def reset(self, hold: int = 0, head: bool = False) -> None:
        self.gets = self.lists = self.most_in_flight = 0
        self.listed = []
        self.hold, self.head, self._enough = hold, head, asyncio.Event()

    async def list(self, prefix: str) -> list[str]:
        self.lists += 1
        self.listed.append(prefix)
        return await self.inner.list(prefix)

    async def get(self, key: str) -> bytes:
        self.gets += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.in_flight >= self.hold:
                self._enough.set()
            if self.hold and (self.gets > 1 or self.head):
                try:
                    await asyncio.wait_for(self._enough.wait(), 5)
                except TimeoutError:
                    pass
            return await self.inner.get(key)
        finally:
            self.in_flight -= 1

    def __getattr__(self, name: str):  # put_if_absent, list, ... pass straight through
        return getattr(self.inner, name)
