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

from activities.liveness.takeover import release_stickiness_after_timeout


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

    # Beats are timer callbacks, not a task that sleeps: two activities a step start and
    # stop this, and a task (its creation, its sleeps, its cancellation and the await of
    # it) cost several times what a timer does. A callback runs in a copy of the
    # activity's context, where `activity.heartbeat` finds its activity.
    loop = asyncio.get_running_loop()

    def beat() -> None:
        nonlocal timer
        try:
            activity.heartbeat(*details)
        finally:  # one beat that fails does not stop the next
            timer = loop.call_later(interval_s, beat)

    # The first beat once the activity has run FIRST_BEAT_S: one that ends sooner
    # needs none (heartbeat timeouts are seconds), and a beat costs the worker
    # ~0.4 ms of CPU (the SDK converts the details and hands them to its core),
    # two beats a step when every model call and mirror beat at once.
    timer = loop.call_later(min(FIRST_BEAT_S, interval_s), beat)
    # Beside the call, not before it: the call never waits for the server here. Only a
    # retried attempt may have a dead worker to take over from (activities/liveness/takeover.py).
    takeover = asyncio.create_task(release_stickiness_after_timeout()) if activity.info().attempt > 1 else None
    try:
        yield
    finally:
        timer.cancel()
        # Done before the call completes, so the workflow task that follows
        # already goes to the shared queue (activities/liveness/takeover.py).
        if takeover is not None:
            await takeover
