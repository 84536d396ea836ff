"""A starting worker waits for Temporal and its stores to come up.

Deployments start everything at once (docker compose, a Kubernetes rollout), and
stores and servers restart under running workers. A worker that exited at the
first refused connection would be started again by its supervisor after a
back-off that grows with every exit (up to five minutes in Kubernetes), so a
few seconds of outage at the wrong moment cost minutes without a worker (the
seeded soak measured it: half of the workers started during its S3 outages
exited at once). So a starting worker retries, for up to
``REWIND_STARTUP_WAIT_S`` (60 s), what heals by itself: nothing answering at
the Temporal address, a store that does not answer, times out or fails. It
says so once, at the first failure, on its log. What a person must fix (a
missing bucket, refused credentials, a TLS mismatch, a namespace that is not
there, a store that overwrites) stops it at once with one line, as before.

A worker that already polls never needs this: the SDK reconnects to Temporal
and every activity retries its store calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable, TypeVar

from workflows.vocabulary.errors import StoreUnreachableError, TemporalUnreachableError

log = logging.getLogger("rewind.worker")

T = TypeVar("T")

# What heals by itself; anything else a starting worker reports at once.
HEALS = (TemporalUnreachableError, StoreUnreachableError)
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 5.0


def deadline(wait_s: float) -> float:
    """The moment (time.monotonic()) a start that may wait ``wait_s`` seconds gives up."""
    return time.monotonic() + wait_s


async def when_up(call: Callable[[], Awaitable[T]], until: float) -> T:
    """``call()``, tried again while it raises one of ``HEALS``, until ``until`` (one
    deadline for everything a start waits for); then its last error goes up, as it
    would have without waiting."""
    pause, waited_for = FIRST_PAUSE_S, None
    while True:
        try:
            result = await call()
        except HEALS as exc:
            left = until - time.monotonic()
            if left <= 0:
                raise
            if waited_for is None:
                log.warning("%s; waiting up to %.0f s for it to answer (REWIND_STARTUP_WAIT_S)", exc, left)
                waited_for = time.monotonic()
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, MAX_PAUSE_S)
            continue
        if waited_for is not None:
            log.warning("it answers now, after %.1f s; starting", time.monotonic() - waited_for)
        return result


__all__ = ["when_up", "deadline", "HEALS"]
