"""written_beside: an activity's work with the carried checkpoints' write beside it."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from activities.record.checkpoint_writer import written_beside
from workflows.vocabulary.contracts import CarriedWrite


async def test_the_write_starts_before_the_works_own_cpu_bound_start() -> None:
    order: list[str] = []
    stored = asyncio.Event()

    async def write() -> CarriedWrite:
        order.append("write sent")
        await asyncio.sleep(0.01)  # the store's answer
        stored.set()
        return CarriedWrite(written=1)

    async def work() -> str:
        # A long conversation's request built and encoded before the call's first wait: the
        # write must have been sent by then, or the checkpoint waits behind all of it.
        order.append("work began")
        sum(range(200_000))
        await asyncio.sleep(0)
        return "response"

    result, carried = await written_beside(work(), write())
    assert order == ["write sent", "work began"]
    assert result == "response" and carried == CarriedWrite(written=1) and stored.is_set()


async def test_without_a_write_the_work_alone() -> None:
    async def work() -> int:
        return 7

    assert await written_beside(work(), None) == (7, None)


@pytest.mark.filterwarnings("error")  # a work coroutine left unawaited warns when collected
async def test_cancelled_while_the_write_goes_first_cancels_both_and_leaves_no_coroutine_behind() -> None:
    with warnings.catch_warnings():  # earlier tests' garbage (an unclosed socket) is not this test's
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    write_cancelled = asyncio.Event()
    began: list[str] = []

    async def write() -> CarriedWrite:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            write_cancelled.set()
            raise
        return CarriedWrite(written=1)

    async def work() -> str:
        began.append("work")
        await asyncio.sleep(10)
        return "never"

    task = asyncio.ensure_future(written_beside(work(), write()))
    await asyncio.sleep(0)  # the task is at the write's head start
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    gc.collect()
    assert write_cancelled.is_set() and began == []
