"""Where live events travel between the workers that publish them and the readers.

A worker publishes every event of the runs it works on (the durable ones as they happen,
the live ones: model deltas, calls starting, progress) to its bus without waiting: a
publish is a put into memory, and a reader that falls behind is dropped (it reconnects
and resumes from its cursor), never the run slowed. What a bus holds is a short window,
never the record: a reader gets older durable events from the store (replay.py).

    REWIND_EVENTS=local          (default) each worker process serves its events on
                                 loopback, announced in a folder (REWIND_HOME/live):
                                 readers on this machine, with the same REWIND_HOME
    REWIND_EVENTS=redis://...    a Redis stream per run (default when REWIND_HOT_STORE is
                                 a Redis URL): readers anywhere that reach the Redis
    REWIND_EVENTS=off            no live events: readers get the durable events from the
                                 store and what the run waits for from Temporal
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator, Protocol

from workflows.vocabulary.errors import ConfigError

class Publisher(Protocol):
    """A worker's side of a bus. Never waits, never raises."""

    def publish(self, message: dict[str, Any]) -> None: ...

    def publish_threadsafe(self, message: dict[str, Any]) -> None: ...


class Subscription(Protocol):
    """A reader's side: the run's messages as they come (the bus's window first)."""

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


class Bus(Protocol):
    description: str

    async def start_publisher(self) -> Publisher: ...

    async def subscribe(self, run_id: str) -> Subscription: ...

    async def aclose(self) -> None: ...


class _Silent:
    def publish(self, message: dict[str, Any]) -> None:
        pass

    def publish_threadsafe(self, message: dict[str, Any]) -> None:
        pass


class _Empty:
    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._none()

    async def _none(self) -> AsyncIterator[dict[str, Any]]:
        return
        yield  # pragma: no cover

    async def aclose(self) -> None:
        pass


class NoBus:
    """REWIND_EVENTS=off: nothing travels live."""

    description = "no live events (REWIND_EVENTS=off)"

    async def start_publisher(self) -> Publisher:
        return _Silent()

    async def subscribe(self, run_id: str) -> Subscription:
        return _Empty()

    async def aclose(self) -> None:
        pass


def open_bus(url: str, live_dir: Path) -> Bus:
    """The bus REWIND_EVENTS names (`local`, `redis://...`, `rediss://...`, `off`)."""
    if url == "off":
        return NoBus()
    if url == "local":
        from checkpoint_bridge.events.local import LocalBus

        return LocalBus(live_dir)
    if url.startswith(("redis://", "rediss://")):
        from checkpoint_bridge.events.redis import RedisBus

        return RedisBus(url)
    raise ConfigError(f"REWIND_EVENTS={url!r}: use local (the default), redis://HOST:PORT[/DB] or off")


__all__ = ["Bus", "Publisher", "Subscription", "NoBus", "open_bus"]
