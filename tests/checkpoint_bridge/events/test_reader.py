"""BranchReader's promises, one at a time, on a real folder store and a bus the test feeds
(docs/streaming.md, "Guarantees"): durable events once, in order, a gap held and filled from the
store, a gap the store cannot fill let go after HOLD_S, live events of a finished call dropped,
resuming after a cursor, a sub-agent's events with their path. The as-user tests
(tests/rewind/test_watch_as_user.py) run the same reader against real workers."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator

import pytest

from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from checkpoint_bridge.events import reader as reader_module
from checkpoint_bridge.events.cursor import Cursor, relative_path
from checkpoint_bridge.events.reader import BranchReader
from checkpoint_bridge.events.window import ended_message
from checkpoint_bridge.projection.projector import record_parts
from workflows.vocabulary.contracts import Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.errors import InvalidIdError
from workflows.vocabulary.events import step_events

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _record(step: int, *, branch: str = "main", final: bool = False, calls: int = 1) -> StepRecord:
    parent = None if step == 0 else f"r1:{branch}:{step - 1}"
    if step == 0:
        return StepRecord(run_id="r1", branch_id=branch, step_index=0, parent_id=None, step_label="start",
                          new_messages=[{"role": "user", "content": "go"}], created_at=T0, model="m")
    if final:
        message = {"role": "assistant", "content": "done"}
        return StepRecord(run_id="r1", branch_id=branch, step_index=step, parent_id=parent, step_label="final answer",
                          new_messages=[message], created_at=T0 + timedelta(seconds=step), model="m",
                          step_ledger=Ledger(prompt_tokens=10, completion_tokens=2, total_tokens=12, model_calls=1))
    tool_calls = [{"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in range(calls)]
    logs = [ToolCallLog(step=step, tool_call_id=f"c{i}", tool_name="t", arguments={}, output=f"out {i}",
                        called_at=T0) for i in range(calls)]
    messages = [{"role": "assistant", "content": None, "tool_calls": tool_calls},
                *({"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"} for i in range(calls))]
    return StepRecord(run_id="r1", branch_id=branch, step_index=step, parent_id=parent, step_label="t",
                      new_messages=messages, new_tool_calls=logs, created_at=T0 + timedelta(seconds=step), model="m",
                      step_ledger=Ledger(prompt_tokens=10, completion_tokens=2, total_tokens=12, model_calls=1,
                                         tool_calls=calls))


class FedBus:
    """A bus whose messages the test publishes."""

    description = "the test's"

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def publish(self, event: Any) -> None:
        self.queue.put_nowait(event.model_dump(mode="json") if hasattr(event, "model_dump") else event)

    async def start_publisher(self) -> Any:
        return self

    async def subscribe(self, run_id: str) -> Any:
        bus = self

        class Sub:
            def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
                return self._messages()

            async def _messages(self) -> AsyncIterator[dict[str, Any]]:
                while True:
                    yield await bus.queue.get()

            async def aclose(self) -> None:
                pass

        return Sub()

    async def aclose(self) -> None:
        pass


@pytest.fixture
async def store(tmp_path):
    async with open_checkpoint_store(f"file://{tmp_path / 'store'}") as opened:
        yield opened


async def _collect(reader: BranchReader, into: list) -> None:
    async for event, cursor in reader.events():
        into.append((event, cursor))


async def _until(got: list, count: int) -> None:
    for _ in range(400):
        if len(got) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(got)} events, wanted {count}: {[e.id for e, _ in got]}")


async def test_a_missing_event_is_held_for_and_filled_from_the_store(store):
    bus = FedBus()
    got: list = []
    reader = BranchReader("r1", "main", store=store, bus=bus)
    task = asyncio.create_task(_collect(reader, got))
    zero, one = step_events(_record(0)), step_events(_record(1, calls=2))
    for event in zero:
        bus.publish(event)
    bus.publish(one[0])
    bus.publish(one[2])  # one[1] was lost on the way
    await _until(got, len(zero) + 1)
    await asyncio.sleep(0.3)
    assert [e.id for e, _ in got] == [e.id for e in zero] + ["1.0"]  # 1.2 waits for 1.1
    await store.save_step(record_parts(_record(0)))
    await store.save_step(record_parts(_record(1, calls=2)))
    bus.publish(one[3])  # the checkpoint: the store has the step now
    await _until(got, len(zero) + 4)
    assert [e.id for e, _ in got][len(zero):] == ["1.0", "1.1", "1.2", "1.3"]
    final = step_events(_record(2, final=True))
    for event in final:
        bus.publish(event)
    await asyncio.wait_for(task, 10)
    ids = [e.id for e, _ in got]
    assert len(ids) == len(set(ids)) and ids[-1] == final[-1].id and got[-1][0].type == "run.completed"


async def test_a_gap_the_store_cannot_fill_is_let_go(store, monkeypatch):
    monkeypatch.setattr(reader_module, "HOLD_S", 0.3)
    bus = FedBus()
    got: list = []
    reader = BranchReader("r1", "main", store=store, bus=bus)
    task = asyncio.create_task(_collect(reader, got))
    one = step_events(_record(1))
    bus.publish(step_events(_record(0))[0])
    bus.publish(one[1])  # 1.0 never comes, and the store has nothing (it is down, say)
    await _until(got, 2)
    assert [e.id for e, _ in got] == ["0.0", "1.1"]
    bus.publish(one[0])  # it comes late after all: once
    await _until(got, 3)
    assert got[2][0].id == "1.0"
    task.cancel()


async def test_live_events_of_a_call_that_has_completed_are_dropped(store):
    bus = FedBus()
    got: list = []
    reader = BranchReader("r1", "main", store=store, bus=bus)
    task = asyncio.create_task(_collect(reader, got))

    def delta(call: str, attempt: int, index: int) -> dict[str, Any]:
        return {"v": 1, "id": f"{call}~a{attempt}.d{index}", "type": "model.delta", "run_id": "r1", "branch": "main",
                "step": 1, "time": T0.isoformat(), "data": {"call": call, "attempt": attempt, "index": index,
                                                            "text": "x"}, "path": []}

    for event in step_events(_record(0)):
        bus.publish(event)
    bus.publish(delta("1/model", 1, 1))
    bus.publish(ended_message("r1", "main", "1/model", 1))
    bus.publish(delta("1/model", 1, 2))  # after its attempt ended: dropped
    bus.publish(delta("1/model", 2, 1))  # the next attempt's
    bus.publish(delta("1/model", 2, 1))  # a copy (another hub's window): dropped
    bus.publish(step_events(_record(1))[0])  # model.completed of 1/model
    bus.publish(delta("1/model", 2, 2))  # after its call completed: dropped
    await _until(got, 5)
    await asyncio.sleep(0.3)
    assert [e.id for e, _ in got] == ["0.0", "0.1", "1/model~a1.d1", "1/model~a2.d1", "1.0"]
    assert [c is None for _, c in got] == [False, False, True, True, False]
    task.cancel()


async def test_a_resumed_reader_gets_what_came_after_its_cursor_once(store):
    records = [_record(0), _record(1), _record(2, final=True)]
    for record in records:
        await store.save_step(record_parts(record))
    everything = [e for r in records for e in step_events(r)]
    got: list = []
    await _collect(BranchReader("r1", "main", store=store, bus=FedBus()), got)
    assert [e.id for e, _ in got] == [e.id for e in everything]
    for index, (_, cursor) in enumerate(got):
        rest: list = []
        await _collect(BranchReader("r1", "main", store=store, bus=FedBus(), after=cursor), rest)
        assert [e.id for e, _ in rest] == [e.id for e in everything[index + 1:]], cursor


async def test_a_sub_agents_events_carry_its_path_and_the_cursor_names_it(store):
    child = "main.s1-c0"
    for record in (_record(0), _record(0, branch=child), _record(1, branch=child, final=True), _record(1),
                   _record(2, final=True)):
        await store.save_step(record_parts(record))
    got: list = []
    await _collect(BranchReader("r1", "main", store=store, bus=FedBus()), got)
    own = [e for e, _ in got if e.path]
    assert own and all(e.path == ["s1-c0"] and e.id.startswith("s1-c0/") for e in own)
    cursors = [c for _, c in got]
    assert any(c.startswith("0.1,s1-c0/") or ",s1-c0/" in c for c in cursors), cursors
    assert got[-1][0].type == "run.completed" and not got[-1][0].path


def test_cursors_and_paths():
    assert Cursor.parse("8.3,s3-call_1/4.2").positions == {"": (8, 3), "s3-call_1": (4, 2)}
    assert Cursor.parse("8.3,s3-call_1/4.2").text() == "8.3,s3-call_1/4.2"
    with pytest.raises(InvalidIdError):
        Cursor.parse("p3~a1.d2")
    assert relative_path("main.s3-call_1.s2-x", "main") == "s3-call_1/s2-x"
    assert relative_path("main", "main") == "" and relative_path("alt", "main") is None
