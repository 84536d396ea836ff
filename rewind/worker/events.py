"""The worker's side of the event stream: the bus it publishes to, and the extern function
through which workflow code hands it each event (workflows/loop/events.py).

Workflow code runs in a worker thread; the extern only schedules the publish on the
worker's event loop (`publish_threadsafe`), so a workflow task never waits for a reader,
a socket or Redis.
"""

from __future__ import annotations

from typing import Any

from temporalio.worker import Interceptor

from checkpoint_bridge.events.bus import Publisher
from workflows.loop.events import EXTERN_EVENT


class EventsInterceptor(Interceptor):
    """Gives every workflow of the worker the extern its events go out through."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher

    def workflow_interceptor_class(self, input: Any) -> Any:
        input.unsafe_extern_functions[EXTERN_EVENT] = self._publish
        return None

    def _publish(self, event: Any) -> None:
        self._publisher.publish_threadsafe(event.model_dump(mode="json"))


__all__ = ["EventsInterceptor"]
