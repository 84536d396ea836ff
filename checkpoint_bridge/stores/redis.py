"""Redis: the connection both Redis stores share, and ``RedisObjectStore``, a whole store on Redis.

    redis://[user:password@]host[:port][/db][?namespace=NAME]     (rediss:// for TLS)

Redis keeps its data in memory; unless the server writes an append-only file
with ``appendfsync always``, an acknowledged write can be lost by a restart.
So Redis is meant as the hot tier in front of a durable store
(``REWIND_HOT_STORE``, hot.py), and ``REWIND_STORE=redis://`` alone is
refused unless ``REWIND_ALLOW_REDIS_STORE=1`` says the operator knows
(rewind/stores.py).

Every key of one store shares one hash tag (``rw{NAMESPACE}:...``), so each
multi-key script touches one slot and also runs on a Redis Cluster. An object
is one string key ``rw{NS}:o:KEY``; a sorted set ``rw{NS}:k`` of every key at
score 0 answers prefix listings in code-point order (``ZRANGEBYLEX``).
Conditional create is one Lua script (atomic on the server): of writers racing
on a key with different bytes exactly one succeeds.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from workflows.vocabulary.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    InvalidIdError,
    StoreUnavailableError,
)

from checkpoint_bridge.stores.contract import check_key

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import AuthenticationError, AuthorizationError
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as exc:  # the optional extra: pip install 'rewind-agents[redis]'
    raise ConfigError("a redis:// store needs the redis client: pip install 'rewind-agents[redis]'") from exc

__all__ = ["RedisConnection", "RedisObjectStore", "redacted", "lex_range", "EXISTING"]

_OWN_PARAMS = {"namespace"}


def redacted(url: str) -> str:
    """The URL without its password (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}{port}", parts.path, parts.query, parts.fragment))


def lex_range(prefix: str) -> tuple[bytes, bytes]:
    """``ZRANGEBYLEX`` bounds of every member starting with ``prefix`` (keys are ASCII)."""
    if not prefix:
        return b"-", b"+"
    return b"[" + prefix.encode(), b"(" + prefix.encode() + b"\xff"


class RedisConnection:
    """One ``redis.asyncio`` client (its own pool) for a ``redis://`` URL, with every
    library error turned into ``StoreUnavailableError`` naming the URL."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ConfigError(f"{redacted(url)!r} is not a redis:// or rediss:// URL")
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.namespace = params.get("namespace", "")
        if self.namespace and not all(c.isalnum() or c in "._-" for c in self.namespace):
            raise ConfigError(f"namespace={self.namespace!r} in the Redis URL is not a plain name; use A-Z a-z 0-9 . _ -")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ConfigError(f"Redis URL {redacted(url)!r}: the path is the database number (redis://host:6379/0), not {db!r}")
        rest = urlencode({k: v for k, v in params.items() if k not in _OWN_PARAMS})
        self.url = redacted(url)
        self._client_url = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
        self._timeout_s = timeout_s
        self._client: Any = None
        self._scripts: dict[str, Any] = {}

    @property
    def client(self) -> Any:
        if self._client is None:
            # Short timeouts: a Redis that does not answer must fail the call (the
            # caller falls back or retries), never hang it. One retry on a new
            # connection: after a server restart every pooled connection is dead,
            # and each would otherwise fail one call.
            self._client = aioredis.from_url(
                self._client_url, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s,
                health_check_interval=30, retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
                retry_on_error=[RedisConnectionError, RedisTimeoutError],
            )
        return self._client

    def script(self, name: str, source: str) -> Any:
        """A Lua script, sent by hash (re-sent by the client when the server lost its script cache)."""
        if name not in self._scripts:
            self._scripts[name] = self.client.register_script(source)
        return self._scripts[name]

    async def call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except (RedisError, OSError, asyncio.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"Redis at {self.url} failed to {what}: {type(exc).__name__}: {exc}; check that the server runs "
                "and the URL (host, port, database, password) is right",
                refused=isinstance(exc, (AuthenticationError, AuthorizationError)),
            ) from exc

    async def ping(self) -> None:
        await self.call("answer PING", self.client.ping())

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._scripts.clear()
        if client is not None:
            try:
                await client.aclose()
            except (RedisError, OSError):
                pass  # closing a connection to a server that is gone


# The start of every conditional create (KEYS[1] the object, ARGV[2] its bytes): 0 when
# the same bytes are there, 2 when other bytes are.
EXISTING = """
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur == ARGV[2] then return 0 end
  return 2
end
"""

# Conditional create: 1 written, 0 the same bytes were there, 2 other bytes are there.
_PUT = EXISTING + """
redis.call('SET', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
"""

_DELETE = """
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return n
"""


class RedisObjectStore:
    """Objects as Redis strings (see the module's docstring); no durability beyond the server's own."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        self.redis = RedisConnection(url, timeout_s=timeout_s)
        self.namespace = self.redis.namespace or "rewind"
        self.url = self.redis.url
        self._tag = f"rw{{{self.namespace}}}"

    def _object(self, key: str) -> str:
        return f"{self._tag}:o:{key}"

    @property
    def _keys(self) -> str:
        return f"{self._tag}:k"

    async def check_access(self) -> None:
        await self.redis.ping()

    async def get(self, key: str) -> bytes:
        check_key(key)
        data = await self.redis.call(f"read {key}", self.redis.client.get(self._object(key)))
        if data is None:
            raise CheckpointNotFoundError(f"no object {key!r} in {self.url}")
        return bytes(data)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        outcome = await self.redis.call(f"write {key}", self.redis.script("put", _PUT)(
            keys=[self._object(key), self._keys], args=[key, bytes(data)]))
        if outcome == 2:
            raise CheckpointExistsError(f"object {key!r} already exists in {self.url} with different content")
        return outcome == 1

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        low, high = lex_range(prefix)
        found = await self.redis.call(f"list {prefix!r}", self.redis.client.zrangebylex(self._keys, low, high))
        return [k.decode() for k in found]

    async def delete(self, key: str) -> bool:
        check_key(key)
        gone = await self.redis.call(f"delete {key}", self.redis.script("delete", _DELETE)(
            keys=[self._object(key), self._keys], args=[key]))
        return bool(gone)

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        for key in await self.list(prefix):
            await self.delete(key)

    async def aclose(self) -> None:
        await self.redis.aclose()
