"""Keep an activity heart-beating while it awaits something slow.

With a heartbeat timeout set, Temporal notices a dead worker after that
timeout instead of after the whole start-to-close timeout, and retries the
call elsewhere. The SDK throttles the actual RPCs, so beating often is cheap.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

from temporalio import activity


@asynccontextmanager
async def heartbeating(interval_s: float = 1.0) -> AsyncIterator[None]:
    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
