"""Redis as a hot tier in front of a durable store (``REWIND_HOT_STORE=redis://...``).

A write goes to Redis at once and reaches the durable store (``REWIND_STORE``:
S3, PostgreSQL, a folder, ...) from a background flusher; a read tries Redis
and falls back to the durable store (keeping what it read hot for the TTL).
The store as a whole keeps the object-store contract (contract.py):

- Immutability. A key is new only if neither tier has it. Redis cannot answer
  that for entries that expired or were never hot, so the first write under a
  partition (the key's first two segments: one run) lists that partition of the
  durable store once into a Redis set; after that the conditional create is one
  Lua script on Redis. A flusher that finds other bytes in the durable store
  keeps the durable bytes (they were there first), counts a conflict and logs it.
- Never silently late. Written objects stay in a pending set, timestamped, until
  the durable store has them; ``lag()`` says how many and how old (``rewind
  status`` shows it, the worker exports it as metrics and logs when it grows
  past a minute). A pending object has no TTL: only flushed entries expire.
- Redis lost loses nothing that counts. Redis down: reads and writes go to the
  durable store directly, and so do the objects this process wrote to Redis that
  the flusher had not moved yet (a Redis that stays down would keep them from the
  store for good: found in CI, a worker's step written just before Redis died).
  Redis flushed or restarted without persistence: what
  had not reached the durable store is gone from the store, and the live mirror
  rebuilds it from Temporal history (activities/record/mirror.py) as ``rewind mirror``
  would; a changed epoch key tells the flusher this happened, and it says so.

Only the checkpoint store gets a hot tier: the payload store holds the records
that keep side effects once, which must be durable before the effect runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from workflows.vocabulary import metrics
from workflows.vocabulary.errors import CheckpointExistsError, CheckpointNotFoundError, InvalidIdError, StoreUnavailableError

from checkpoint_bridge.stores.contract import ObjectStore, check_key
from checkpoint_bridge.stores.redis import EXISTING, RedisConnection, lex_range

__all__ = ["HotTierObjectStore", "HotLag", "DEFAULT_TTL_S"]

log = logging.getLogger("rewind.hot_store")

DEFAULT_TTL_S = 24 * 3600  # the article's table: hot entries for a day
LAG_WARN_S = 60.0
MINE_MAX_BYTES = 256 * 1024 * 1024
SKIP_AFTER_FAILURE_S = 5.0
BYPASSED_MAX_KEYS = 100_000
_BATCH = 64
_PARALLEL = 16

# 1 written (pending), 0 the same bytes are hot, 2 other bytes are hot,
# 3 the durable store has the key (compare there), 4 the partition is not indexed yet.
_PUT = EXISTING + """
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 3 end
if redis.call('SISMEMBER', KEYS[2], '') == 0 then return 4 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[4], 0, ARGV[1])
return 1
"""

# Claim up to ARGV[2] pending keys for ARGV[1] ms (the oldest, or the ARGV[5..] given):
# a flusher that dies holding a claim only delays those keys by the lease.
_CLAIM = """
local out = {}
local cands
if #ARGV > 4 then
  cands = {}
  for i = 5, #ARGV do
    if redis.call('ZSCORE', KEYS[1], ARGV[i]) then table.insert(cands, ARGV[i]) end
  end
else
  cands = redis.call('ZRANGE', KEYS[1], 0, 255)
end
for _, k in ipairs(cands) do
  if redis.call('SET', ARGV[4] .. k, ARGV[3], 'NX', 'PX', ARGV[1]) then
    table.insert(out, k)
    if #out >= tonumber(ARGV[2]) then break end
  end
end
return out
"""

# The durable store has the key: it leaves the pending sets, its hot copy starts its TTL.
_DONE = """
if redis.call('GET', KEYS[4]) == ARGV[2] then redis.call('DEL', KEYS[4]) end
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return removed
"""

# A flush that failed: try that key again after ARGV[2] ms.
_BACKOFF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

_FORGET = """
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
return n
"""


class _DurableDown(Exception):
    """The durable store failed while Redis answered: not a reason to go around Redis."""

    def __init__(self, error: StoreUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class HotLag:
    """How far the durable store is behind Redis."""

    pending: int  # objects written to Redis, not yet in the durable store (all runs)
    oldest_s: float | None  # age of the oldest of them
    matching: int  # those of them under the prefix asked about (one run)


def partition(key: str) -> str:
    """The part of the key space indexed as one: ``runs/RUN`` (a run), ``langgraph/threads``..."""
    return "/".join(key.split("/")[:2]) if key.count("/") >= 2 else key.rpartition("/")[0]


class HotTierObjectStore:
    """Redis (``redis_url``) in front of ``durable``; see the module's docstring."""

    def __init__(self, redis_url: str, durable: ObjectStore, *, ttl_s: int = DEFAULT_TTL_S, timeout_s: float = 2.0,
                 lease_s: float = 10.0, meter: Any = None) -> None:
        self.redis = RedisConnection(redis_url, timeout_s=timeout_s)
        self.durable = durable
        self.ttl_s = int(ttl_s)
        self.lease_ms = int(lease_s * 1000)
        # The store is the durable one (REWIND_STORE); Redis only makes it faster.
        self.url = durable.url
        self.description = f"{self.redis.url} in front of {durable.url}"
        # One space per durable store: two deployments may share a Redis server.
        ns = self.redis.namespace or hashlib.sha256(durable.url.encode()).hexdigest()[:12]
        self._tag = f"rw{{{ns}}}"
        self._meter = meter
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        # Written by this instance and not yet known to be durable, with their bytes: if Redis
        # loses its data meanwhile, this process writes them again (its mirror skips reading
        # the parents it wrote, so nothing else would notice they are gone). Bounded: past
        # the bound the oldest are forgotten, and a missing parent is rebuilt from history.
        self._mine: dict[str, bytes] = {}
        self._mine_bytes = 0
        self._epoch: bytes | None = None
        self._said: dict[str, float] = {}
        # After a Redis call fails, calls skip Redis for a few seconds (a Redis that times out
        # would otherwise cost every call its timeout); the flusher keeps trying meanwhile.
        self._skip_until = 0.0
        # Keys written straight to the durable store while Redis failed, in order, until
        # they are in their partitions' indexes (_put_around).
        self._bypassed: dict[str, None] = {}
        # What Redis lost of this instance's writes, still to write again (_write_lost_again).
        self._lost: dict[str, None] | None = None
        self._written_again = 0
        self.last_flush_error: str | None = None
        self.flushed = 0
        self.conflicts = 0

    # -- keys -------------------------------------------------------------------------
    def _k(self, kind: str, rest: str = "") -> str:
        return f"{self._tag}:{kind}:{rest}" if rest or kind in ("o", "i", "c") else f"{self._tag}:{kind}"

    def _put_keys(self, key: str) -> list[str]:
        return [self._k("o", key), self._k("i", partition(key)), self._k("p"), self._k("pl")]

    # -- the contract -----------------------------------------------------------------
    async def check_access(self) -> None:
        """The durable store must answer; a Redis that is down is served around (and said)."""
        await self.durable.check_access()
        try:
            await self.redis.ping()
        except StoreUnavailableError as exc:
            self._fell_back("call", exc)

    async def get(self, key: str) -> bytes:
        check_key(key)
        if self._skipping():
            return await self.durable.get(key)
        try:
            data = await self.redis.call(f"read {key}", self.redis.client.get(self._k("o", key)))
        except StoreUnavailableError as exc:
            self._fell_back("read", exc)
            return await self.durable.get(key)
        if data is not None:
            return bytes(data)
        data = await self.durable.get(key)
        try:  # keep it hot: a fork or a viewer reads the same checkpoints again
            await self.redis.client.set(self._k("o", key), data, nx=True, ex=self.ttl_s)
        except Exception:  # noqa: BLE001 - a cache fill that fails costs nothing
            pass
        return data

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        data = bytes(data)
        if self._skipping():
            return await self._put_around(key, data)
        try:
            await self._index_bypassed()
            outcome = await self._put(key, data)
            if outcome == 4:
                await self._index(partition(key))
                outcome = await self._put(key, data)
        except _DurableDown as down:
            raise down.error from None  # Redis answers: the write waits for the durable store, as without Redis
        except StoreUnavailableError as exc:
            self._fell_back("write", exc)
            return await self._put_around(key, data)
        if outcome in (3, 4):  # the durable store has it (or the index expired again): it decides
            return await self._compare_durable(key, data)
        if outcome == 2:
            raise CheckpointExistsError(f"object {key!r} already exists in {self.url} with different content")
        if outcome == 1:
            self._remember(key, data)
            self._wake.set()
        return outcome == 1

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        low, high = lex_range(prefix)
        try:  # pending first: one flushed meanwhile is then in the durable listing
            if self._skipping():
                raise StoreUnavailableError(f"Redis at {self.redis.url} failed moments ago")
            pending = [k.decode() for k in await self.redis.call(
                f"list {prefix!r}", self.redis.client.zrangebylex(self._k("pl"), low, high))]
        except StoreUnavailableError as exc:
            self._fell_back("list", exc)
            pending = []
        return sorted(set(pending) | set(await self.durable.list(prefix)))

    async def delete(self, key: str) -> bool:
        check_key(key)
        try:
            return await self._delete(key)
        except StoreUnavailableError as exc:
            if self.durable.url in str(exc):
                raise
            raise StoreUnavailableError(f"cannot delete {key} from {self.url} while its hot tier is unreachable "
                                        f"(the hot copy would outlive it): {exc}") from None

    async def _delete(self, key: str) -> bool:
        token = await self._lock(key)
        try:
            hot = await self.redis.call(f"delete {key}", self.redis.script("forget", _FORGET)(
                keys=self._put_keys(key), args=[key]))
            self._forget(key)
            durable = await self.durable.delete(key)
        finally:
            await self.redis.call(f"unlock {key}", self.redis.script("backoff", _BACKOFF)(
                keys=[self._k("c", key)], args=[token, 1]))
        return bool(hot) or durable

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        check_key(prefix, prefix=True)
        try:
            await self._delete_hot_prefix(prefix)
        except StoreUnavailableError as exc:
            if self.durable.url in str(exc):
                raise
            raise StoreUnavailableError(f"cannot delete {prefix} from {self.url} while its hot tier is unreachable "
                                        f"(the hot copies would outlive it): {exc}") from None
        await self.durable.delete_prefix(prefix)

    async def _delete_hot_prefix(self, prefix: str) -> None:
        low, high = lex_range(prefix)
        client = self.redis.client
        for raw in await self.redis.call(f"list {prefix!r}", client.zrangebylex(self._k("pl"), low, high)):
            await self._delete(raw.decode())
        # Flushed entries still hot, and the partitions' indexes (an index dropped is rebuilt on the next write).
        async def scan(match: str) -> list[bytes]:
            return [k async for k in client.scan_iter(match=match, count=500)]

        doomed = await self.redis.call(f"list {prefix!r}", scan(f"{self._k('o', prefix)}*"))
        doomed += [k for k in await self.redis.call("list indexes", scan(f"{self._k('i', '')}*"))
                   if (p := k.decode().split(":i:", 1)[1]).startswith(prefix) or prefix.startswith(p)]
        for start in range(0, len(doomed), 500):
            await self.redis.call(f"delete {prefix!r}", client.delete(*doomed[start:start + 500]))

    async def aclose(self) -> None:
        """Stop the flusher; first try briefly to bring what this instance wrote to the durable store
        (a CLI command's fork or rollback), leaving the rest to the workers' flushers."""
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            self._flusher.cancel()
            try:
                await self._flusher
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._flusher = None
        deadline = time.monotonic() + 5.0
        while self._mine and time.monotonic() < deadline:
            try:
                if not await self.flush_once(sorted(self._mine)) and not await self._forget_settled():
                    await asyncio.sleep(0.1)
            except StoreUnavailableError:
                await self._write_mine_around()  # Redis does not answer: no flusher would take them over
                break
        if self._mine:
            log.warning("%d object(s) written to %s are not yet in %s; a worker's flusher takes them over",
                        len(self._mine), self.redis.url, self.durable.url)
        await self.redis.aclose()
        await self.durable.aclose()

    # -- lag --------------------------------------------------------------------------
    async def lag(self, prefix: str = "") -> HotLag:
        client = self.redis.client
        low, high = lex_range(prefix)
        async with client.pipeline(transaction=False) as pipe:
            pipe.zcard(self._k("p")).zrange(self._k("p"), 0, 0, withscores=True).zlexcount(self._k("pl"), low, high)
            total, oldest, matching = await self.redis.call("read the flush backlog", pipe.execute())
        age = max(0.0, time.time() - oldest[0][1] / 1000) if oldest else None
        return HotLag(pending=int(total), oldest_s=age, matching=int(matching))

    # -- flushing ---------------------------------------------------------------------
    def start_flusher(self) -> None:
        """Flush in the background of this process until ``aclose`` (a worker runs one)."""
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_forever(), name="rewind-hot-flusher")

    async def _forget_settled(self) -> int:
        """Forget the objects this instance wrote that are no longer pending: another flusher moved
        them, or another writer deleted them (a newer pack's writer deletes the packs it holds
        whole). How many."""
        keys = list(self._mine)
        scores = await self.redis.call("check pending objects", self.redis.client.zmscore(self._k("p"), keys))
        settled = [k for k, score in zip(keys, scores) if score is None]
        for key in settled:
            self._forget(key)
        return len(settled)

    async def flush_once(self, keys: list[str] | None = None) -> int:
        """Move one batch of pending objects (the oldest, or ``keys``) to the durable store; how many moved."""
        await self._index_bypassed()
        token = uuid.uuid4().hex
        claimed = await self.redis.call("claim pending objects", self.redis.script("claim", _CLAIM)(
            keys=[self._k("p")], args=[self.lease_ms, _BATCH, token, self._k("c", ""), *(keys or [])[:_BATCH * 4]]))
        if not claimed:
            return 0
        limit = asyncio.Semaphore(_PARALLEL)

        async def one(raw: bytes) -> int:
            async with limit:
                return await self._flush_key(raw.decode(), token)

        # Every claimed key gets its try (a failure leaves its claim to expire: a retry
        # after the lease); then the first failure is the caller's.
        results = await asyncio.gather(*(one(k) for k in claimed), return_exceptions=True)
        for failure in results:
            if isinstance(failure, BaseException):
                raise failure
        return sum(results)  # type: ignore[arg-type]

    async def _flush_key(self, key: str, token: str) -> int:
        data = await self.redis.call(f"read {key}", self.redis.client.get(self._k("o", key)))
        try:
            if data is not None:
                await self.durable.put_if_absent(key, bytes(data))
        except CheckpointExistsError:
            # The durable store had other bytes first (a write that bypassed Redis while it was
            # down): those stay, and the hot copy is replaced by them.
            self._conflict(key, "Redis had")
            await self.redis.call(f"drop {key}", self.redis.client.delete(self._k("o", key)))
        except StoreUnavailableError as exc:
            self.last_flush_error = str(exc)
            await self.redis.call(f"back off {key}", self.redis.script("backoff", _BACKOFF)(
                keys=[self._k("c", key)], args=[token, 2000]))
            return 0
        await self.redis.call(f"finish {key}", self.redis.script("done", _DONE)(
            keys=[self._k("o", key), self._k("p"), self._k("pl"), self._k("c", key)], args=[key, token, self.ttl_s]))
        self._forget(key)
        self.flushed += 1
        self._count(metrics.HOT_FLUSHED)
        return 1

    async def _flush_forever(self) -> None:
        checked = 0.0
        while not self._closing:
            moved = 0
            try:
                if time.monotonic() - checked > 1.0:
                    checked = time.monotonic()
                    await self._check_epoch()
                    await self._report_lag()
                moved = await self.flush_once()
                self._skip_until = 0.0  # Redis answers again
                # What went around Redis joins its index now, not at this instance's next write (another
                # process, `rewind mirror` say, would be told it created what the durable store has).
                await self._index_bypassed()
            except StoreUnavailableError as exc:
                self._say("redis-down", f"hot tier: {exc}; writes go straight to {self.durable.url} meanwhile")
                await self._write_mine_around()
                await asyncio.sleep(1.0)
                continue
            except Exception:  # noqa: BLE001 - the flusher must outlive any one bad object
                log.exception("hot tier flusher")
                await asyncio.sleep(1.0)
                continue
            if not moved:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=0.5)
                except asyncio.TimeoutError:
                    pass

    async def _report_lag(self) -> None:
        lag = await self.lag()
        if self._meter is not None:
            metrics.gauge(self._meter, metrics.HOT_PENDING, lag.pending)
            metrics.gauge(self._meter, metrics.HOT_LAG_MS, int((lag.oldest_s or 0) * 1000), "ms")
        if lag.oldest_s is not None and lag.oldest_s > LAG_WARN_S:
            self._say("lag", f"hot tier: {lag.pending} object(s) in {self.redis.url} are not yet in {self.durable.url}, "
                             f"the oldest for {lag.oldest_s:.0f} s" + (f"; last error: {self.last_flush_error}"
                                                                       if self.last_flush_error else ""))

    async def _check_epoch(self) -> None:
        key = self._k("epoch")
        current = await self.redis.call("read the epoch", self.redis.client.get(key))
        if current is None:
            await self.redis.call("set the epoch", self.redis.client.set(key, uuid.uuid4().hex, nx=True))
            current = await self.redis.call("read the epoch", self.redis.client.get(key))
        if self._epoch is not None and current != self._epoch:
            self._count(metrics.HOT_LOST)
            log.error("Redis at %s lost its data (restarted without persistence or flushed): checkpoints written to "
                      "it that had not reached %s are gone from the store; running runs' mirrors rebuild them from "
                      "Temporal history, and `rewind mirror RUN` rebuilds any other run", self.redis.url, self.durable.url)
            self._lost = dict.fromkeys(self._mine)
            self._written_again = 0
        self._epoch = current
        await self._write_lost_again()

    async def _write_lost_again(self) -> None:
        """Write again what this instance had written and Redis lost: a durable store that is
        down meanwhile stops this round, and the next round goes on from where it stopped."""
        if self._lost is None:
            return
        for key in list(self._lost):
            data = self._mine.get(key)
            if data is not None:
                try:
                    self._written_again += bool(await self.put_if_absent(key, data))
                except CheckpointExistsError:
                    self._forget(key)  # the durable store has it (with other bytes): it stays
                except StoreUnavailableError as exc:  # the durable store (Redis failing is gone around)
                    self.last_flush_error = str(exc)
                    return
            del self._lost[key]
        self._lost = None
        log.error("Redis at %s lost its data: %d object(s) this worker had written and %s did not have yet "
                  "were written again", self.redis.url, self._written_again, self.durable.url)

    async def _write_mine_around(self) -> None:
        """Redis does not answer: write what this instance wrote to it and has not seen reach the
        durable store straight to the durable store (the same bytes: where a flusher got there
        first, nothing changes). A durable store that fails too stops this round; the flusher's
        next round goes on."""
        limit = asyncio.Semaphore(_PARALLEL)

        async def one(key: str, data: bytes) -> None:
            async with limit:
                try:
                    await self.durable.put_if_absent(key, data)
                except CheckpointExistsError:
                    # Other bytes were there first (written around Redis by someone else): they stay.
                    self._conflict(key, "this process wrote to Redis")
                else:
                    self._note_bypassed(key)  # Redis's index may have been built without it
                self._forget(key)

        results = await asyncio.gather(*(one(k, d) for k, d in list(self._mine.items())), return_exceptions=True)
        for failure in results:
            if isinstance(failure, StoreUnavailableError):
                self.last_flush_error = str(failure)
            elif isinstance(failure, BaseException):
                raise failure

    # -- helpers ----------------------------------------------------------------------
    def _conflict(self, key: str, whose: str) -> None:
        """The durable store had other bytes for ``key`` than ``whose``: its bytes stay; count and say it."""
        self.conflicts += 1
        self._count(metrics.HOT_CONFLICTS)
        log.error("object %s reached %s with other bytes than %s; the durable store's stay", key, self.durable.url, whose)

    def _remember(self, key: str, data: bytes) -> None:
        self._forget(key)
        self._mine[key] = data
        self._mine_bytes += len(data)
        while self._mine_bytes > MINE_MAX_BYTES and len(self._mine) > 1:
            self._forget(next(iter(self._mine)))

    def _forget(self, key: str) -> None:
        data = self._mine.pop(key, None)
        if data is not None:
            self._mine_bytes -= len(data)

    async def _put(self, key: str, data: bytes) -> int:
        return int(await self.redis.call(f"write {key}", self.redis.script("put", _PUT)(
            keys=self._put_keys(key), args=[key, data, int(time.time() * 1000), self.ttl_s])))

    async def _put_around(self, key: str, data: bytes) -> bool:
        """Write straight to the durable store while Redis does not answer, and note the key for
        its partition's index: an index built from a listing taken before this write would
        otherwise call the key new to Redis, and a later writer of the same bytes would be told
        it created them."""
        written = await self.durable.put_if_absent(key, data)
        self._note_bypassed(key)
        return written

    def _note_bypassed(self, key: str) -> None:
        """`key` reached the durable store around Redis: for its partition's index, once Redis answers."""
        self._bypassed.pop(key, None)
        self._bypassed[key] = None
        while len(self._bypassed) > BYPASSED_MAX_KEYS:
            # Forgotten, a key costs at most a wrong "written" from a later writer of the same
            # bytes (the flusher finds them in the durable store): never a second version.
            del self._bypassed[next(iter(self._bypassed))]

    async def _index_bypassed(self) -> None:
        """Add what this instance wrote around Redis to the partitions' indexes (once Redis answers)."""
        if not self._bypassed:
            return
        keys = list(self._bypassed)
        by_part: dict[str, list[str]] = {}
        for key in keys:
            by_part.setdefault(partition(key), []).append(key)
        async with self.redis.client.pipeline(transaction=False) as pipe:
            for part, members in by_part.items():
                pipe.sadd(self._k("i", part), *members).expire(self._k("i", part), self.ttl_s)
            await self.redis.call("index the objects written around Redis", pipe.execute())
        for key in keys:
            self._bypassed.pop(key, None)

    async def _index(self, part: str) -> None:
        """Note in Redis which keys of ``part`` the durable store has (then the sentinel '': indexed)."""
        try:
            known = await self.durable.list(f"{part}/" if part else "")
        except StoreUnavailableError as exc:
            raise _DurableDown(exc) from exc
        index = self._k("i", part)
        client = self.redis.client
        for start in range(0, len(known), 1000):
            await self.redis.call(f"index {part}", client.sadd(index, *known[start:start + 1000]))
        async with client.pipeline(transaction=True) as pipe:
            pipe.sadd(index, "").expire(index, self.ttl_s)
            await self.redis.call(f"index {part}", pipe.execute())

    async def _compare_durable(self, key: str, data: bytes) -> bool:
        try:
            stored = await self.durable.get(key)
        except CheckpointNotFoundError:
            # Indexed once, removed since by something other than this store: write it through.
            return await self.durable.put_if_absent(key, data)
        if stored != data:
            raise CheckpointExistsError(f"object {key!r} already exists in {self.durable.url} with different content")
        return False

    async def _lock(self, key: str) -> str:
        """Hold ``key``'s claim (a flusher writing it finishes first) while it is deleted."""
        token = f"delete-{uuid.uuid4().hex}"
        deadline = time.monotonic() + self.lease_ms / 1000 + 5
        while True:
            got = await self.redis.call(f"lock {key}", self.redis.client.set(
                self._k("c", key), token, nx=True, px=self.lease_ms))
            if got:
                return token
            if time.monotonic() > deadline:
                raise StoreUnavailableError(f"{key} stays claimed by a flusher in {self.redis.url}; try again")
            await asyncio.sleep(0.05)

    def _skipping(self) -> bool:
        if time.monotonic() < self._skip_until:
            self._count(metrics.HOT_FALLBACKS, op="skip")
            return True
        return False

    def _fell_back(self, op: str, exc: Exception) -> None:
        self._skip_until = time.monotonic() + SKIP_AFTER_FAILURE_S
        self._count(metrics.HOT_FALLBACKS, op=op)
        self._say(f"fallback-{op}", f"hot tier: {exc}; {op}s go to {self.durable.url} directly")

    def _say(self, what: str, message: str) -> None:
        """Log ``message`` at most every 30 s per kind (a Redis that is down fails every call)."""
        now = time.monotonic()
        if now - self._said.get(what, -1e9) >= 30:
            self._said[what] = now
            log.warning("%s", message)

    def _count(self, name: str, **attributes: str) -> None:
        if self._meter is not None:
            metrics.count(self._meter, name, **attributes)
