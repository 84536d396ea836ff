"""The Redis hot tier (checkpoint_bridge/stores/hot.py) against real Redis servers: what the
shared conformance suite cannot see from outside (the flusher, TTLs, Redis down or lost,
a durable store that had other bytes first). The durable store is a folder; "down" is a
regular file where its parent folder should be (every write fails at the OS level)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
import redis

from checkpoint_bridge.stores import FileObjectStore, HotTierObjectStore
from checkpoint_bridge.stores.postgres import PostgresObjectStore
from rewind.local.servers import PostgresServer, RedisServer
from workflows.vocabulary.errors import CheckpointExistsError, StoreUnavailableError


async def _until(check, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


@pytest.fixture
async def private_redis():  # type: ignore[no-untyped-def]
    server = await asyncio.to_thread(RedisServer.start)
    yield server
    await asyncio.to_thread(server.remove)


async def test_the_flusher_moves_objects_to_the_durable_store_and_starts_their_ttl(redis_url, tmp_path):
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(redis_url, durable, ttl_s=3600)
    try:
        keys = [f"runs/r1/branches/main/steps/{i:08d}.json" for i in range(5)] + ["runs/r2/x.json"]
        for key in keys:
            assert await hot.put_if_absent(key, key.encode()) is True
        lag = await hot.lag("runs/r1/")
        assert (lag.pending, lag.matching) == (6, 5) and lag.oldest_s is not None
        assert await durable.list("runs/") == []  # nothing there until the flusher runs
        assert await hot.list("runs/r1/") == keys[:5]  # but listed: the pending ones count
        hot.start_flusher()

        async def flushed() -> bool:
            return (await hot.lag()).pending == 0

        await _until(flushed, "the flusher did not empty the backlog")
        assert await durable.list("runs/") == sorted(keys)
        assert [await durable.get(k) for k in keys] == [k.encode() for k in keys]
        with redis.Redis.from_url(redis_url) as client:
            ttls = [client.ttl(hot._k("o", k)) for k in keys]
        assert all(0 < t <= 3600 for t in ttls), ttls
        assert hot.flushed == 6
    finally:
        await hot.aclose()


async def test_a_key_the_durable_store_has_is_never_overwritten_through_redis(redis_url, tmp_path):
    durable = FileObjectStore(tmp_path / "durable")
    key = "runs/r1/branches/main/steps/00000000.json"
    await durable.put_if_absent(key, b"first")  # there before Redis ever saw the run
    hot = HotTierObjectStore(redis_url, durable)
    try:
        with pytest.raises(CheckpointExistsError):
            await hot.put_if_absent(key, b"other")
        assert await hot.put_if_absent(key, b"first") is False
        assert await hot.get(key) == b"first"
        # Once hot (the read above cached it) and then expired from Redis: still refused.
        with redis.Redis.from_url(redis_url) as client:
            assert client.delete(hot._k("o", key)) == 1
        with pytest.raises(CheckpointExistsError):
            await hot.put_if_absent(key, b"other")
        assert await durable.get(key) == b"first"
    finally:
        await hot.aclose()


async def test_the_durable_store_s_bytes_win_a_conflict_found_at_flush(redis_url, tmp_path):
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(redis_url, durable)
    key = "runs/r1/branches/main/steps/00000001.json"
    try:
        assert await hot.put_if_absent(key, b"through redis") is True
        # Meanwhile another writer reached the durable store directly (one whose Redis was down).
        await durable.put_if_absent(key, b"straight to the durable store")
        assert await hot.flush_once() == 1
        assert hot.conflicts == 1
        assert await durable.get(key) == b"straight to the durable store"
        assert await hot.get(key) == b"straight to the durable store"
        assert (await hot.lag()).pending == 0
    finally:
        await hot.aclose()


async def test_closing_passes_on_what_this_instance_wrote(redis_url, tmp_path):
    """A CLI command (a fork, a rollback) runs no flusher: closing its store moves its own writes."""
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(redis_url, durable)
    keys = [f"runs/cli/branches/b/steps/{i:08d}.json" for i in range(3)]
    for key in keys:
        await hot.put_if_absent(key, b"x")
    await hot.aclose()
    assert await durable.list("runs/cli/") == keys


async def test_closing_forgets_what_another_writer_deleted_meanwhile(redis_url, tmp_path, caplog):
    """A newer pack's writer (another process) deletes a pack this instance wrote and has not
    flushed yet: closing moves the rest and does not wait for the deleted one."""
    durable = FileObjectStore(tmp_path / "durable")
    hot, other = HotTierObjectStore(redis_url, durable), HotTierObjectStore(redis_url, FileObjectStore(tmp_path / "durable"))
    keys = [f"runs/cli/branches/b/packs/{i:08d}-{i + 3:08d}.json.gz" for i in (0, 4, 8)]
    for key in keys:
        await hot.put_if_absent(key, b"x")
    assert await other.delete(keys[0])
    await other.aclose()
    with caplog.at_level("WARNING", logger="rewind.hot_store"):
        await hot.aclose()
    assert await durable.list("runs/cli/") == keys[1:]
    assert not [r for r in caplog.records if "not yet in" in r.getMessage()]


async def test_redis_down_sends_reads_and_writes_to_the_durable_store(private_redis, tmp_path):
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(private_redis.url, durable, timeout_s=1.0)
    try:
        before = "runs/r1/branches/main/steps/00000000.json"
        await hot.put_if_absent(before, b"zero")
        assert await hot.flush_once() == 1
        await asyncio.to_thread(private_redis.kill)
        after = "runs/r1/branches/main/steps/00000001.json"
        assert await hot.put_if_absent(after, b"one") is True
        assert await durable.get(after) == b"one"  # written straight through
        assert await hot.get(before) == b"zero"
        assert await hot.list("runs/r1/") == [before, after]
        await hot.check_access()  # usable: the durable store answers
        with pytest.raises(StoreUnavailableError, match="while its hot tier is unreachable"):
            await hot.delete(after)  # a hot copy could outlive the delete: refused, nothing deleted
        assert await durable.get(after) == b"one"
        await asyncio.to_thread(private_redis.start_again)  # back, and empty
        assert await hot.put_if_absent(after, b"one") is False
        with pytest.raises(CheckpointExistsError):
            await hot.put_if_absent(after, b"not one")
        assert await hot.delete(after) is True
    finally:
        await hot.aclose()


async def test_redis_dead_before_flushing_sends_its_writer_s_objects_to_the_durable_store(private_redis, tmp_path):
    """Found in CI: a worker's step, written to Redis just before Redis died and not yet
    flushed, never reached the durable store (the flusher waited for Redis to answer)."""
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(private_redis.url, durable, timeout_s=1.0)
    keys = [f"runs/r1/branches/main/steps/{i:08d}.json" for i in range(3)]
    try:
        for key in keys:
            assert await hot.put_if_absent(key, key.encode()) is True
        assert await durable.list("runs/r1/") == []  # only in Redis so far
        await asyncio.to_thread(private_redis.kill)  # for good
        hot.start_flusher()

        async def durable_has_all() -> bool:
            return await durable.list("runs/r1/") == keys

        await _until(durable_has_all, "the writer's objects did not reach the durable store")
        assert [await durable.get(k) for k in keys] == [k.encode() for k in keys]
    finally:
        await hot.aclose()


async def test_closing_with_redis_dead_passes_on_what_this_instance_wrote(private_redis, tmp_path):
    """A CLI command's writes (a fork's, a rollback's) that Redis took and then died with."""
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(private_redis.url, durable, timeout_s=1.0)
    keys = [f"runs/cli/branches/b/steps/{i:08d}.json" for i in range(3)]
    for key in keys:
        await hot.put_if_absent(key, b"x")
    await asyncio.to_thread(private_redis.kill)
    await hot.aclose()
    assert await durable.list("runs/cli/") == keys


async def test_redis_lost_before_flushing_is_written_again_by_its_writer(private_redis, tmp_path):
    blocker = tmp_path / "volume"
    blocker.write_text("")  # the durable store's folder cannot be made: every write fails
    durable = FileObjectStore(blocker / "store")
    hot = HotTierObjectStore(private_redis.url, durable, timeout_s=1.0)
    keys = [f"runs/r1/branches/main/steps/{i:08d}.json" for i in range(3)]
    try:
        hot.start_flusher()
        for key in keys:
            assert await hot.put_if_absent(key, key.encode()) is True

        async def tried() -> bool:
            return hot.last_flush_error is not None

        await _until(tried, "the flusher did not try the durable store")
        assert (await hot.lag()).pending == 3
        await asyncio.to_thread(private_redis.restart)  # Redis comes back without them
        blocker.unlink()  # and the durable store is usable again

        async def durable_has_all() -> bool:
            return await durable.list("runs/r1/") == keys

        await _until(durable_has_all, "the writer did not write its lost objects again")  # noqa
        assert [await durable.get(k) for k in keys] == [k.encode() for k in keys]
    finally:
        await hot.aclose()


async def test_redis_lost_while_the_durable_store_is_down_is_written_again_once_it_is_back(private_redis, caplog):
    """PostgreSQL is down when Redis loses the objects its writer had not passed on: writing them
    again fails round after round (each must list the run in PostgreSQL to rebuild its index),
    and succeeds once PostgreSQL is back."""
    pg = await asyncio.to_thread(PostgresServer.start)
    durable = PostgresObjectStore(f"{pg.url}?schema=lost", pool_timeout_s=2)
    hot = HotTierObjectStore(private_redis.url, durable, timeout_s=1.0)
    keys = [f"runs/r1/branches/main/steps/{i:08d}.json" for i in range(3)]
    try:
        assert await hot.put_if_absent("runs/r1/task.json", b"{}") is True  # the run's index is built
        assert await hot.flush_once() == 1
        await asyncio.to_thread(pg.kill)
        hot.start_flusher()
        for key in keys:
            assert await hot.put_if_absent(key, key.encode()) is True  # pending in Redis: PostgreSQL is down
        await asyncio.sleep(1.5)  # the flusher has read the epoch
        await asyncio.to_thread(private_redis.restart)

        async def noticed() -> bool:
            return "lost its data (restarted" in caplog.text

        await _until(noticed, "the flusher did not notice that Redis lost its data")
        await asyncio.sleep(3)  # rounds of writing them again fail: PostgreSQL is still down
        await asyncio.to_thread(pg.start_again)

        async def written_again() -> bool:
            # Written to Redis again (the flusher logs how many once that round ends), then flushed.
            # How many: up to 3, as a flush that read an object from Redis before it lost it and
            # reached PostgreSQL once it was back leaves that one nothing to write again.
            if "this worker had written and" not in caplog.text:
                return False
            try:
                return await durable.list("runs/r1/branches/") == keys
            except StoreUnavailableError:
                return False

        await _until(written_again, "what Redis lost was not written again once PostgreSQL was back", timeout_s=60)
    finally:
        await hot.aclose()
        await asyncio.to_thread(pg.remove)


async def test_a_key_written_around_a_stalled_redis_is_not_new_to_the_next_writer(private_redis, tmp_path):
    """Redis stalls (SIGSTOP) with the run's index in place: a write times out and the next ones
    go straight to the durable store for a few seconds. Once Redis answers again, a second
    writer of the same bytes (another process) is told they were there: the index learnt the
    keys from the writer that went around Redis."""
    durable = FileObjectStore(tmp_path / "durable")
    first = HotTierObjectStore(private_redis.url, durable, timeout_s=0.5)
    second = HotTierObjectStore(private_redis.url, durable, timeout_s=0.5)
    zero, one, two = (f"runs/r1/branches/main/steps/{i:08d}.json" for i in range(3))
    try:
        assert await first.put_if_absent(zero, b"zero") is True  # the run's index is built
        assert private_redis.process is not None
        private_redis.process.send_signal(signal.SIGSTOP)
        try:
            assert await first.put_if_absent(one, b"one") is True  # times out: written around Redis
        finally:
            private_redis.process.send_signal(signal.SIGCONT)
        assert await first.put_if_absent(two, b"two") is True  # goes around Redis without asking it
        assert await durable.get(two) == b"two"
        first._skip_until = 0.0  # the few seconds it goes around Redis after a failure are over
        await first.flush_once()  # any call that reaches Redis adds the keys to the index
        assert await second.put_if_absent(two, b"two") is False
        with pytest.raises(CheckpointExistsError):
            await second.put_if_absent(two, b"not two")
        assert (await second.lag("runs/r1/branches/main/steps/00000002")).matching == 0
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_durable_store_down_while_indexing_does_not_send_writes_around_redis(redis_url, tmp_path):
    """PostgreSQL is down at a run's first write, which must list it: the write fails naming
    PostgreSQL (the caller retries, as without Redis), and the next one, once PostgreSQL is
    back, goes through Redis (a durable store down is no reason to go around a Redis that answers)."""
    pg = await asyncio.to_thread(PostgresServer.start)
    hot = HotTierObjectStore(redis_url, PostgresObjectStore(f"{pg.url}?schema=idx", pool_timeout_s=2))
    key = f"runs/idx-{time.time_ns()}/branches/main/steps/00000000.json"
    try:
        await asyncio.to_thread(pg.kill)
        with pytest.raises(StoreUnavailableError) as failed:
            await hot.put_if_absent(key, b"zero")
        assert "Redis" not in str(failed.value), failed.value  # the durable store is named, not Redis
        await asyncio.to_thread(pg.start_again)
        assert await hot.put_if_absent(key, b"zero") is True
        assert (await hot.lag(key)).matching == 1  # pending in Redis: Redis was not gone around
    finally:
        await hot.aclose()
        await asyncio.to_thread(pg.remove)


async def test_an_erased_run_leaves_nothing_in_either_tier(redis_url, tmp_path):
    durable = FileObjectStore(tmp_path / "durable")
    hot = HotTierObjectStore(redis_url, durable)
    try:
        for i in range(3):
            await hot.put_if_absent(f"runs/gone/branches/main/steps/{i:08d}.json", b"x")
        await hot.flush_once()
        await hot.put_if_absent("runs/gone/branches/main/steps/00000003.json", b"pending")
        await hot.put_if_absent("runs/kept/branches/main/steps/00000000.json", b"y")
        await hot.delete_prefix("runs/gone/")
        assert await hot.list("runs/gone/") == []
        assert await durable.list("runs/gone/") == []
        with redis.Redis.from_url(redis_url) as client:
            left = [k for k in client.scan_iter(match=f"{hot._tag}:*gone*")]
        assert left == [], left
        assert await hot.list("runs/") == ["runs/kept/branches/main/steps/00000000.json"]
        # Written again after the erasure: a new object.
        assert await hot.put_if_absent("runs/gone/branches/main/steps/00000000.json", b"new") is True
    finally:
        await hot.aclose()


def test_the_partition_of_a_key_is_its_run() -> None:
    from checkpoint_bridge.stores.hot import partition

    assert partition("runs/r1/branches/main/steps/00000000.json") == "runs/r1"
    assert partition("probes/x.json") == "probes"
    assert partition("x.json") == ""


@pytest.mark.parametrize("path", [Path("x")])
def test_a_hot_tier_names_its_durable_store_as_its_url(redis_url, path) -> None:  # type: ignore[no-untyped-def]
    hot = HotTierObjectStore(redis_url, FileObjectStore(path))
    assert hot.url == FileObjectStore(path).url
    assert hot.description.startswith(redis_url)
