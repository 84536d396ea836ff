"""GET /runs/{run}/events: a run's events as server-sent events (docs/streaming.md).

One SSE event per RunEvent: `event:` its type, `data:` its JSON (what `rewind watch
--json` prints a line of), and `id:` on every durable event: its cursor, the resume token.
A live event (a model's delta, a call starting) has no `id:`, so a browser's EventSource
keeps the last durable one as its Last-Event-ID. Resuming, with the `Last-Event-ID` header
(an EventSource sends it by itself when it reconnects) or `?after=` (the header wins: an
EventSource reconnects to the address it was opened with): every durable event after it
comes once, in order; a call still in flight comes again from its current attempt's start.
The stream ends after the run's end (`run.completed`, `run.failed`, `run.cancelled`); an
EventSource should close() on it, or it reconnects.

The reader is `rewind.events()` (rewind/watching.py), run in a task of its own that feeds
a bounded queue: a client that disconnects cancels that task once, and the reader closes
its store and bus subscription as it ends (not cut short by the response's own
cancellation); a client that stops reading holds the reader back, never the run.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from checkpoint_bridge.events.cursor import Cursor
from rewind.serve.backends import Backends
from rewind.serve.routes import BRANCH, RUN, Answer, Endpoint, Group, Param, branch_of, error_answers, run_of
from rewind.watching import events
from workflows.vocabulary.events import RunEvent

log = logging.getLogger("rewind.serve")

# Events a slow client may be behind before its reader waits for it (the run never does).
QUEUE = 1000
# A comment line this often keeps proxies from closing a quiet stream.
PING_S = 15
# How long a disconnected client's reader may take to close its store and subscriptions.
CLOSE_S = 10.0
_END = object()
# The readers running (asyncio holds its tasks weakly; a reader lives until it has closed what it opened).
_READERS: set[asyncio.Task[None]] = set()


def sse_of(event: RunEvent) -> ServerSentEvent:
    """One RunEvent as an SSE event: its type, its JSON, its cursor as the id of a durable one."""
    return ServerSentEvent(data=event.model_dump_json(exclude_none=True), event=event.type,
                           id=event.cursor if event.durable and event.cursor else None)


async def _pump(source: AsyncIterator[RunEvent], queue: asyncio.Queue[Any]) -> None:
    """Feed `queue` from `source` until it ends or fails (the failure is the last item)."""
    try:
        async for event in source:
            await queue.put(event)
    except Exception as exc:  # noqa: BLE001 - handed to the response, which logs it and ends the stream
        await queue.put(exc)
        return
    finally:
        await source.aclose()  # type: ignore[attr-defined]
    await queue.put(_END)


async def _frames(source: AsyncIterator[RunEvent], where: str) -> AsyncIterator[ServerSentEvent]:
    queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE)
    pump = asyncio.create_task(_pump(source, queue), name=f"rewind-serve {where}")
    _READERS.add(pump)
    pump.add_done_callback(_READERS.discard)
    try:
        while True:
            item = await queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                # Headers are sent: the stream can only end. A client reconnects with its Last-Event-ID.
                log.warning("%s: the stream ended early: %s: %s", where, type(item).__name__, item)
                return
            yield sse_of(item)
    finally:
        if not pump.done():
            pump.cancel()
            # Not cut short by this response's own cancellation: the reader closes what it opened.
            await asyncio.shield(asyncio.wait([pump], timeout=CLOSE_S))


async def events_route(request: Request, backends: Backends, _body: Any) -> Response:
    run, branch = run_of(request), branch_of(request)
    after = request.headers.get("last-event-id") or request.query_params.get("after") or None
    Cursor.parse(after)  # a 400 now, before the stream's headers are sent
    client, unreachable = await backends.reach()
    # A 404 now too: the reader would say it only once the stream has begun.
    if client is not None:
        from rewind.client import run_view

        await run_view(client, run, branch, store=backends.store)
    elif not await backends.store.branches(run):
        assert unreachable is not None
        raise unreachable  # a 503: the store has no such run, and Temporal, which may, does not answer
    source = events(run, branch, after, settings=backends.settings, client=client)
    return EventSourceResponse(_frames(source, f"GET /runs/{run}/events"), ping=PING_S)


GROUP = Group(
    tag="events", description="A run's events as they happen (server-sent events, docs/streaming.md)",
    endpoints=(
        Endpoint("GET", "/runs/{run}/events", events_route, "A run's events as server-sent events, until it ends",
                 "One SSE event per event of the run: `event:` its type, `data:` its JSON, `id:` (durable events "
                 "only) the cursor to resume after. Resume with the Last-Event-ID header or ?after=: every durable "
                 "event after it comes once, in order; a call in flight comes again from its attempt's start. The "
                 "stream ends after the run's end event.",
                 params=(RUN, BRANCH,
                         Param("after", "query", "resume after this cursor or durable event id (4.2)"),
                         Param("Last-Event-ID", "header", "resume after this cursor (an EventSource sends it when "
                                                          "it reconnects; it wins over ?after=)")),
                 answers=(Answer(200, "the events, as text/event-stream", {"type": "string"}, "text/event-stream"),
                          *error_answers(400, 404, 503)),
                 operation_id="runEvents"),
    ),
)

__all__ = ["GROUP", "sse_of"]
