"""Keep an activity heart-beating while it awaits something slow.

With a heartbeat timeout set, Temporal notices a dead worker after that
timeout instead of after the whole start-to-close timeout, and retries the
call elsewhere. The SDK throttles the actual RPCs, so beating often is cheap.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from temporalio import activity

from activities.takeover import release_stickiness_after_timeout


# When an activity's first heartbeat goes out (its details show in `rewind status` from then on).
FIRST_BEAT_S = 0.25


@asynccontextmanager
async def heartbeating(*details: Any, interval_s: float = 1.0) -> AsyncIterator[None]:
    """`details` (e.g. the tool's name) travel with each beat: `rewind status` shows
    them for a running activity, from Temporal's pending-activity info."""

    if activity.info().is_local:
        # A local activity has no heartbeat: the worker keeps its workflow task alive.
        yield
        return

    async def beat() -> None:
        # The first beat once the activity has run FIRST_BEAT_S: one that ends sooner
        # needs none (heartbeat timeouts are seconds), and a beat costs the worker
        # ~0.4 ms of CPU (the SDK converts the details and hands them to its core),
        # two beats a step when every model call and mirror beat at once.
        await asyncio.sleep(min(FIRST_BEAT_S, interval_s))
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(interval_s)

    task = asyncio.create_task(beat())
    # Beside the call, not before it: the call never waits for the server here.
    takeover = asyncio.create_task(release_stickiness_after_timeout())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        # Done before the call completes, so the workflow task that follows
        # already goes to the shared queue (activities/takeover.py).
        await takeover
