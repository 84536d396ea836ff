"""One reader of one branch's stream: the store, the live bus and the run's state, merged.

What a reader gets (docs/streaming.md, "Guarantees"):
- every durable event of the branch and of the runs it started (sub-agents, child
  pipelines, each with its `path`) after its cursor, once, in order per run: held back
  while one before it is missing, filled from the store (where every durable event of a
  stored step is, whatever the live path lost), let go after HOLD_S if the store cannot
  fill the gap (the store is down: later events are not withheld for ever);
- live events as they come: a call in flight from its current attempt's start, nothing
  of a call once its durable event (or the end of its attempt) has come;
- what the run waits for, from Temporal, when the reader connects and while it reads (a
  call waiting for a person, a paused budget), under the ids the run's own live events
  have, so a reader that got both gets one;
- the stream ends with the branch's `run.completed`, `run.failed` or `run.cancelled`.
Without a live bus the same reader polls the store (POLL_S) and Temporal.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable

from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.events.bus import Bus
from checkpoint_bridge.events.window import ENDED
from checkpoint_bridge.events.cursor import Cursor, relative_path
from checkpoint_bridge.events.replay import hydrated, stored_events
from workflows.vocabulary.errors import CheckpointError, StoreUnavailableError
from workflows.vocabulary.events import END_TYPES, EVENTS_VERSION, RunEvent, live_id

TICK_S = 0.25
HOLD_S = 5.0  # a durable event waits this long for a missing one before it goes out anyway
POLL_S = 2.0  # the store's pace while the bus says nothing (or there is none)
QUIET_S = 3.0  # the bus is quiet this long: the store and Temporal are asked
STATE_S = 3.0  # Temporal's pace for what the run waits for
CLOSED_GRACE_S = 6.0  # a closed run's end event may still be on its way to the store


@dataclass
class RunState:
    """A branch's workflow as Temporal knows it (`state_of`)."""

    open: bool
    state: str  # running, waiting_for_approval, budget_exceeded, completed, failed, cancelled, terminated, ...
    step: int = 0
    pending: list[Any] = field(default_factory=list)  # PendingApproval of the branch's waiting calls
    reason: str | None = None
    final_answer: str | None = None


StateOf = Callable[[str], Awaitable["RunState | None"]]
ResolveOutputs = Callable[[list[str]], Awaitable[dict[str, Any]]]


@dataclass
class _Source:
    branch: str
    path: str
    mark: tuple[int, int] | None = None  # the last durable event delivered in order
    mark_is_checkpoint: bool = False
    held: dict[tuple[int, int], RunEvent] = field(default_factory=dict)
    held_since: float | None = None
    gaps: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)
    late: set[tuple[int, int]] = field(default_factory=set)  # delivered inside a gap
    completed_calls: set[str] = field(default_factory=set)
    ended_attempts: set[tuple[str, int]] = field(default_factory=set)
    live_seen: set[str] = field(default_factory=set)

    def in_order(self, key: tuple[int, int]) -> bool:
        """Whether `key` is the next durable event after the mark (after a step's checkpoint:
        the run's end, of the same step, or the next step's first event)."""
        if self.mark is None:
            return key[1] == 0
        step, n = self.mark
        return key == (step, n + 1) or (self.mark_is_checkpoint and key == (step + 1, 0))

    def delivered(self, key: tuple[int, int]) -> bool:
        if key in self.late:
            return True
        if self.mark is None or key > self.mark:
            return False
        return not any(low < key < high for low, high in self.gaps)


class BranchReader:
    def __init__(self, run_id: str, branch: str, *, store: CheckpointStore | None, bus: Bus,
                 state_of: StateOf | None = None, resolve_outputs: ResolveOutputs | None = None,
                 after: str | None = None, follow: bool = True) -> None:
        self.run_id, self.branch = run_id, branch
        self._store, self._bus, self._state_of, self._resolve = store, bus, state_of, resolve_outputs
        self._cursor = Cursor.parse(after)
        self._follow = follow  # False: what is there now, then stop (a finished run's replay)
        self._sources: dict[str, _Source] = {}
        self._out: list[tuple[RunEvent, str | None]] = []
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._done = False
        self._last_bus = 0.0
        self._last_poll = 0.0
        self._last_state = 0.0
        self._closed_since: float | None = None
        self._synthesized: set[str] = set()

    # -- sources --------------------------------------------------------------------------
    def _source(self, branch: str) -> _Source | None:
        found = self._sources.get(branch)
        if found is not None:
            return found
        path = relative_path(branch, self.branch)
        if path is None:
            return None
        source = _Source(branch, path)
        position = self._cursor.positions.get(path)
        if position is not None:
            source.mark = position
            source.mark_is_checkpoint = False  # resumed mid-step: the store tells the step's end
        self._sources[branch] = source
        return source

    def cursor(self) -> str:
        return Cursor({s.path: s.mark for s in self._sources.values() if s.mark is not None}).text()

    # -- delivering -----------------------------------------------------------------------
    def _as_seen(self, source: _Source, event: RunEvent) -> RunEvent:
        if not source.path:
            return event
        return event.model_copy(update={"id": f"{source.path}/{event.id}", "path": source.path.split("/")})

    def _offer_durable(self, source: _Source, event: RunEvent) -> None:
        key = (int(event.step or 0), int(event.id.rsplit(".", 1)[-1]))
        if key == source.mark:  # a resumed reader's mark, read again: is it its step's checkpoint?
            source.mark_is_checkpoint = event.type == "checkpoint"
        if source.delivered(key) or key in source.held:
            if source.path == "" and event.type in END_TYPES and source.delivered(key):
                self._done = True  # resumed after the branch's end: nothing more will come
            return
        inside_gap = source.mark is not None and key < source.mark
        if inside_gap:  # a gap's event, come late (see _release): out of order, but once
            source.late.add(key)
            self._deliver(source, event, durable=True)
            return
        source.held[key] = event
        if source.held_since is None:
            source.held_since = time.monotonic()
        self._release(source)

    def _release(self, source: _Source, force: bool = False) -> None:
        while source.held:
            first = min(source.held)
            in_order = source.in_order(first)
            if not in_order and source.mark is not None and first <= source.mark:
                source.held.pop(first)  # delivered meanwhile
                continue
            if not in_order and not force:
                break
            if not in_order and source.mark is not None:
                source.gaps.append((source.mark, first))
            event = source.held.pop(first)
            source.mark, source.mark_is_checkpoint = first, event.type == "checkpoint"
            self._deliver(source, event, durable=True)
        source.held_since = time.monotonic() if source.held else None

    def _deliver(self, source: _Source, event: RunEvent, *, durable: bool) -> None:
        call = event.data.get("call")
        if durable and call and event.type in ("model.completed", "tool.completed"):
            source.completed_calls.add(str(call))
            source.live_seen = {i for i in source.live_seen if not i.startswith(f"{call}~")}
        self._out.append((self._as_seen(source, event), self.cursor() if durable else None))
        if source.path == "" and event.type in END_TYPES:
            self._done = True

    def _offer_live(self, source: _Source, event: RunEvent) -> None:
        call = event.data.get("call")
        if call is not None and (str(call) in source.completed_calls
                                 or (str(call), int(event.data.get("attempt") or 1)) in source.ended_attempts):
            return
        if event.id in source.live_seen or event.id in self._synthesized and source.path == "":
            return
        source.live_seen.add(event.id)
        self._deliver(source, event, durable=False)

    def _take(self, message: dict[str, Any]) -> None:
        source = self._source(str(message.get("branch", "")))
        if source is None:
            return
        if message.get("control") == ENDED:
            source.ended_attempts.add((str(message.get("call")), int(message.get("attempt") or 1)))
            return
        if int(message.get("v", EVENTS_VERSION)) > EVENTS_VERSION:
            return  # a newer worker's event this reader cannot read: the store's form comes instead
        try:
            event = RunEvent.model_validate(message)
        except ValueError:
            return
        if event.durable:
            self._offer_durable(source, event)
        else:
            self._offer_live(source, event)

    # -- the store and Temporal -------------------------------------------------------------
    async def _from_store(self) -> None:
        if self._store is None:
            return
        try:
            branches = [b for b in await self._store.branches(self.run_id) if relative_path(b, self.branch) is not None]
        except (StoreUnavailableError, CheckpointError):
            return
        streams: list[list[tuple[_Source, RunEvent]]] = []
        for branch in sorted(branches, key=lambda b: (b.count("."), b)):
            source = self._source(branch)
            assert source is not None
            after = source.mark[0] - 1 if source.mark is not None else -1
            try:
                events = await stored_events(self._store, self.run_id, branch, after)
            except (StoreUnavailableError, CheckpointError):
                continue
            streams.append([(source, event) for event in events])
        # A sub-agent's steps happen inside its caller's step: in the order of their times (each
        # run's own events keep theirs), the caller's step that waited for them comes after them.
        for source, event in heapq.merge(*streams, key=lambda item: item[1].time):
            self._offer_durable(source, event)
        self._last_poll = time.monotonic()

    async def _from_state(self) -> None:
        self._last_state = time.monotonic()
        if self._state_of is None:
            return
        try:
            state = await self._state_of(self.branch)
        except Exception:  # noqa: BLE001 - Temporal away: the store and the bus go on
            state = None
        if state is None:
            return
        own = self._source(self.branch)
        assert own is not None
        for pending in state.pending:
            call = f"{pending.step}/{pending.tool_call_id}"
            self._synthesize(own, live_id(call, "approval.waiting"), "approval.waiting", pending.step, {
                "call": call, "tool_call_id": pending.tool_call_id, "tool": pending.tool_name,
                "arguments": pending.arguments,
                "approve": f"rewind approve {pending.run_id} {pending.tool_call_id} --branch {pending.branch_id}",
                "reject": f"rewind reject {pending.run_id} {pending.tool_call_id} --branch {pending.branch_id}"})
        if state.state == "budget_exceeded":
            self._synthesize(own, live_id(f"{state.step}/run", "paused"), "run.paused", state.step,
                             {"reason": state.reason})
        if state.open:
            self._closed_since = None
            return
        now = time.monotonic()
        if self._closed_since is None:
            self._closed_since = now
            return
        if now - self._closed_since < CLOSED_GRACE_S:
            return
        # Closed, and no end event came from the store or the bus: say how it ended.
        for source in [own]:
            self._release(source, force=True)
        if self._done:
            return
        if state.state in ("completed",):
            self._synthesize(own, live_id(f"{state.step}/run", "completed"), "run.completed", state.step,
                             {"answer": state.final_answer})
        elif state.state in ("failed", "timed_out"):
            self._synthesize(own, live_id(f"{state.step}/run", "failed"), "run.failed", state.step,
                             {"reason": state.reason})
        else:
            self._synthesize(own, live_id(f"{state.step}/run", "cancelled"), "run.cancelled", state.step,
                             {"state": state.state})
        self._done = True

    def _synthesize(self, source: _Source, event_id: str, kind: str, step: int | None, data: dict[str, Any]) -> None:
        from datetime import datetime, timezone

        if event_id in source.live_seen:
            return
        self._synthesized.add(event_id)
        source.live_seen.add(event_id)
        event = RunEvent(id=event_id, type=kind, run_id=self.run_id, branch=source.branch, step=step,
                         time=datetime.now(timezone.utc), data=data)
        self._deliver(source, event, durable=False)

    async def _hydrated(self, event: RunEvent) -> RunEvent:
        ref = event.data.get("output_ref")
        if ref is None or self._resolve is None:
            return event
        try:
            found = await self._resolve([str(ref)])
        except Exception:  # noqa: BLE001 - the payload store is away: the reference stays
            return event
        copy = event.model_copy(deep=True)
        hydrated(copy, found)
        return copy

    # -- the stream -----------------------------------------------------------------------
    async def events(self) -> AsyncIterator[tuple[RunEvent, str | None]]:
        """(event, the cursor after it: None for a live event) until the branch ends."""
        self._source(self.branch)
        subscription = await self._bus.subscribe(self.run_id) if self._follow else None
        pump = asyncio.create_task(self._pump(subscription)) if subscription is not None else None
        try:
            await self._from_store()
            await self._from_state()
            while True:
                while self._out:
                    event, cursor = self._out.pop(0)
                    yield await self._hydrated(event), cursor
                if self._done or not self._follow:
                    return
                try:
                    message = await asyncio.wait_for(self._inbox.get(), TICK_S)
                    self._last_bus = time.monotonic()
                    self._take(message)
                    while not self._inbox.empty() and len(self._out) < 256:
                        self._take(self._inbox.get_nowait())
                except asyncio.TimeoutError:
                    pass
                await self._tick()
        finally:
            if pump is not None:
                pump.cancel()
                await asyncio.wait([pump], timeout=2.0)
            if subscription is not None:
                await subscription.aclose()

    async def _pump(self, subscription: Any) -> None:
        async for message in subscription:
            if message.get("run_id") == self.run_id:
                self._inbox.put_nowait(message)

    async def _tick(self) -> None:
        now = time.monotonic()
        holding = [s for s in self._sources.values() if s.held]
        quiet = now - self._last_bus > QUIET_S
        if (holding or quiet) and now - self._last_poll > POLL_S:
            await self._from_store()
        for source in holding:
            if source.held and source.held_since is not None and now - source.held_since > HOLD_S:
                self._release(source, force=True)
        if now - self._last_state > (STATE_S if quiet or self._closed_since is not None else STATE_S * 3):
            await self._from_state()


__all__ = ["BranchReader", "RunState", "TICK_S", "HOLD_S"]
