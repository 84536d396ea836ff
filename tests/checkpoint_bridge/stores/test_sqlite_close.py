"""Closing a SQLite store while a listing still runs in a worker thread (its awaiting task
was cancelled, as a timed-out activity's is: the thread goes on). A CI run crashed a test
process with a segfault inside sqlite3 in `_list` in such a thread; aclose now waits for
running threads before it closes their connections. This test does not reproduce that
crash on demand (it did not fail without the fix on this machine); it checks that closing
during a listing neither breaks nor hangs the store, which then works again."""

from __future__ import annotations

import asyncio
import sqlite3

from checkpoint_bridge.stores import SqliteObjectStore


async def test_aclose_waits_for_a_listing_still_running_in_its_thread(tmp_path) -> None:
    path = tmp_path / "rewind.db"
    store = SqliteObjectStore(path)
    await store.put_if_absent("probe/0.json", b"{}")
    with sqlite3.connect(path) as conn:  # enough rows that a listing takes a while
        conn.executemany("INSERT INTO objects (key, data) VALUES (?, ?)",
                         ((f"runs/r/{i:07d}.json", b"x") for i in range(200_000)))
    for _ in range(5):
        listing = asyncio.create_task(store.list("runs/"))
        await asyncio.sleep(0.01)  # the thread is inside execute/fetchall now
        listing.cancel()
        await store.aclose()
    assert len(await store.list("runs/")) == 200_000
    await store.aclose()
