"""What every request of `rewind serve` shares: the settings, one Temporal client, one
checkpoint store.

The client is made on first use, not at start: a server started before Temporal (or
while it restarts) serves what the store can answer and says 503 for the rest, and
connects once Temporal answers. One client for every request: the SDK's client
multiplexes its calls over one connection and reconnects by itself.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rewind.settings.config import Settings
from rewind.stores import checkpoint_store
from workflows.vocabulary.errors import TemporalUnreachableError

if TYPE_CHECKING:
    from temporalio.client import Client

    from checkpoint_bridge.checkpoints.store import CheckpointStore


class Backends:
    """The settings, the Temporal client (`await client()`), the checkpoint store (`store`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store: CheckpointStore = checkpoint_store(settings, deferred=True)
        self._client: Client | None = None
        self._connecting = asyncio.Lock()

    async def client(self) -> Client:
        """The Temporal client; TemporalConnectionError (a 503) while Temporal does not answer."""
        if self._client is None:
            async with self._connecting:
                if self._client is None:
                    from rewind.client import connect

                    self._client = await connect(self.settings, service="rewind-serve")
        return self._client

    async def reach(self) -> tuple[Client | None, TemporalUnreachableError | None]:
        """(the client, None), or (None, why) while nothing answers at Temporal's address."""
        try:
            return await self.client(), None
        except TemporalUnreachableError as exc:
            return None, exc

    async def client_or_none(self) -> Client | None:
        """The client, or None while nothing answers at Temporal's address (the store answers alone)."""
        return (await self.reach())[0]

    async def aclose(self) -> None:
        await self.store.aclose()


__all__ = ["Backends"]

