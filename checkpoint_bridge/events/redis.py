"""Events across machines: a Redis stream per run (REWIND_EVENTS=redis://..., or the
REWIND_HOT_STORE Redis when REWIND_EVENTS is unset).

Workers add every message of a run to `rewind:events:{RUN}` (XADD, capped near MAXLEN
entries, the key expiring TTL_S after its last message): a window, never the record. A
worker's publish only queues the message; one task per worker sends what is queued in
pipelined batches, so a slow or unreachable Redis delays live events, never a run (a
queue over QUEUE messages drops its oldest). A reader reads the window (its durable
events, and the calls still in flight from their current attempt's start, as a local
hub's window holds them), then blocks on what comes next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, AsyncIterator

from checkpoint_bridge.events.window import RunWindow, window_update
from workflows.vocabulary.errors import ConfigError

log = logging.getLogger("rewind.events")

MAXLEN = 20_000
TTL_S = 3600
QUEUE = 50_000
BLOCK_MS = 1000


def stream_key(run_id: str) -> str:
    return f"rewind:events:{run_id}"


def _client(url: str) -> Any:
    try:
        import redis.asyncio as aioredis
    except ImportError:
        raise ConfigError("REWIND_EVENTS on Redis needs the redis client: pip install 'rewind-agents[redis]'") from None
    return aioredis.from_url(url, socket_connect_timeout=5, socket_timeout=10, health_check_interval=30)


class RedisPublisher:
    def __init__(self, url: str) -> None:
        self._redis = _client(url)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: asyncio.Task[None] | None = None
        self._failing = False

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._sender = asyncio.create_task(self._send())

    def publish(self, message: dict[str, Any]) -> None:
        try:
            self._queue.put_nowait(message)
        except asyncio.QueueFull:
            with contextlib.suppress(asyncio.QueueEmpty, asyncio.QueueFull):
                self._queue.get_nowait()
                self._queue.put_nowait(message)

    def publish_threadsafe(self, message: dict[str, Any]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self.publish, message)

    async def _send(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < 500:
                batch.append(self._queue.get_nowait())
            try:
                pipe = self._redis.pipeline(transaction=False)
                keys = set()
                for message in batch:
                    key = stream_key(str(message.get("run_id", "")))
                    keys.add(key)
                    pipe.xadd(key, {"m": json.dumps(message, separators=(",", ":"), default=str)},
                              maxlen=MAXLEN, approximate=True)
                for key in keys:
                    pipe.expire(key, TTL_S)
                await pipe.execute()
                if self._failing:
                    log.info("live events reach Redis again")
                self._failing = False
            except Exception as exc:  # noqa: BLE001 - live events are lost, the runs go on
                if not self._failing:
                    log.warning("live events cannot reach Redis (%s): readers get the durable events from the "
                                "store meanwhile", exc)
                self._failing = True
                await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        if self._sender is not None:
            # What is queued goes out first, briefly.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drain(), 2.0)
            self._sender.cancel()
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    async def _drain(self) -> None:
        while not self._queue.empty():
            await asyncio.sleep(0.02)


class RedisSubscription:
    """A reader's side: one task reads the run's stream into a queue the reader takes from (so a
    reader that stops never waits on Redis to notice: redis-py may sit out a cancellation of
    a blocking read until its block ends)."""

    def __init__(self, url: str, run_id: str) -> None:
        self._redis = _client(url)
        self._key = stream_key(run_id)
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._read())

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._queue.get()

    async def _read(self) -> None:
        last = "0"
        first = True
        while True:
            try:
                if first:  # the window: what a hub would hold of the run
                    window = RunWindow()
                    for entry_id, fields in await self._redis.xrange(self._key, "-", "+"):
                        last = entry_id
                        message = _decode(fields)
                        if message is not None:
                            window_update(window, message, message)
                    for message in _lines(window):
                        self._queue.put_nowait(message)
                    first = False
                    continue
                found = await self._redis.xread({self._key: last}, block=BLOCK_MS, count=500)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis is away: try again, the store fills meanwhile
                await asyncio.sleep(1.0)
                continue
            for _, entries in found or ():
                for entry_id, fields in entries:
                    last = entry_id
                    message = _decode(fields)
                    if message is not None:
                        self._queue.put_nowait(message)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=BLOCK_MS / 1000 + 1.0)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._redis.aclose(), 2.0)


def _decode(fields: dict[Any, Any]) -> dict[str, Any] | None:
    raw = fields.get(b"m", fields.get("m"))
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _lines(window: RunWindow) -> list[dict[str, Any]]:
    """The window's messages (this window holds them whole, not as lines)."""
    return [*window.durable, *(m for _, held in window.calls.values() for m in held)]  # type: ignore[misc]


class RedisBus:
    def __init__(self, url: str) -> None:
        self._url = url
        self.description = "Redis streams (REWIND_EVENTS)"
        self._publisher: RedisPublisher | None = None

    async def start_publisher(self) -> RedisPublisher:
        if self._publisher is None:
            self._publisher = RedisPublisher(self._url)
            await self._publisher.start()
        return self._publisher

    async def subscribe(self, run_id: str) -> RedisSubscription:
        sub = RedisSubscription(self._url, run_id)
        await sub.start()
        return sub

    async def aclose(self) -> None:
        if self._publisher is not None:
            await self._publisher.aclose()
            self._publisher = None


__all__ = ["RedisBus", "RedisPublisher", "RedisSubscription", "stream_key"]
