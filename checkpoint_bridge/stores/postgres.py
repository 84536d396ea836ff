"""The PostgreSQL object store: every object a row of one table in a schema of its own.

    postgresql://user[:password]@host[:port]/database[?schema=name&pool_size=N&...]

``schema`` (default ``rewind``) lets several stores share one database (a team's
Rewind beside its other tables, the tests' stores beside each other); the
schema and its tables are created on first use and migrated by version
(``rewind_meta.schema_version``), under an advisory lock so that workers
starting together migrate once. Other query parameters (``sslmode``,
``connect_timeout``, ...) go to libpq as they are.

Conditional create is the primary key (``INSERT ... ON CONFLICT DO NOTHING``:
a second writer of a key waits for the first one's commit, then creates
nothing); a write is one statement, so a lost connection leaves no half
object. Keys are ``TEXT COLLATE "C"``: listings come back in code-point order
whatever the database's own collation.

Connections come from a pool (psycopg_pool, opened on first use in the running
event loop); a server that is down fails each call within the pool's timeout
with ``StoreUnavailableError`` while the pool keeps reconnecting, so the
caller's retries (a Temporal activity's) succeed once it is back.
"""

from __future__ import annotations

import asyncio
import re
import zlib
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
from checkpoint_bridge.stores.keyrange import prefix_upper_bound

# The server answered and said no: a wrong user or password, a database or role that is not
# there, no right to it. Waiting does not fix those (a server that is down or restarting does).
_REFUSALS = re.compile(r"authentication failed|no password supplied|does not exist|permission denied|"
                       r"not permitted to log in|no pg_hba\.conf entry", re.IGNORECASE)

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as exc:  # the optional extra: pip install 'rewind-agents[postgres]'
    raise ConfigError(
        "a postgresql:// store needs the psycopg driver: pip install 'rewind-agents[postgres]' "
        "(psycopg[binary] and psycopg-pool)"
    ) from exc

__all__ = ["PostgresObjectStore", "SCHEMA_VERSION", "DEFAULT_SCHEMA"]

DEFAULT_SCHEMA = "rewind"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OWN_PARAMS = {"schema", "pool_size"}

# Versioned migrations: MIGRATIONS[i] takes the schema from version i to i + 1 ({s}: the schema).
MIGRATIONS: list[list[str]] = [
    [
        'CREATE TABLE IF NOT EXISTS {s}.objects (key TEXT COLLATE "C" PRIMARY KEY, data BYTEA NOT NULL)',
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


class PostgresObjectStore:
    """Objects as rows of ``<schema>.objects`` in the database a ``postgresql://`` URL names."""

    def __init__(self, url: str, *, pool_timeout_s: float = 10.0, connect_timeout_s: int = 5) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"{url!r} is not a postgresql:// URL")
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.schema = params.get("schema", DEFAULT_SCHEMA)
        if not _SCHEMA_NAME.fullmatch(self.schema):
            raise ConfigError(f"schema={self.schema!r} in the PostgreSQL store URL is not a plain name; "
                              "use lower-case letters, digits and _ (up to 63, not starting with a digit)")
        try:
            self._pool_size = int(params.get("pool_size", "10"))
            if self._pool_size < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(f"pool_size={params['pool_size']!r} in the PostgreSQL store URL is not a "
                              "whole number of at least 1") from None
        libpq = {k: v for k, v in params.items() if k not in _OWN_PARAMS}
        libpq.setdefault("connect_timeout", str(connect_timeout_s))
        self._conninfo = urlunsplit(parts._replace(scheme="postgresql", query=urlencode(libpq)))
        # For messages: never the password.
        netloc = parts.netloc.rpartition("@")
        user = netloc[0].partition(":")[0]
        shown = f"{user}@{netloc[2]}" if netloc[1] else netloc[2]
        self.url = f"postgresql://{shown}{parts.path}?schema={self.schema}"
        self._pool_timeout_s = pool_timeout_s
        self._pool: AsyncConnectionPool | None = None
        self._lock = asyncio.Lock()
        self._ready = False
        s = sql.Identifier(self.schema)
        self._sql = {
            "get": sql.SQL("SELECT data FROM {s}.objects WHERE key = %s").format(s=s),
            "put": sql.SQL("INSERT INTO {s}.objects (key, data) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING").format(s=s),
            "list_all": sql.SQL("SELECT key FROM {s}.objects ORDER BY key").format(s=s),
            "list": sql.SQL("SELECT key FROM {s}.objects WHERE key >= %s AND key < %s ORDER BY key").format(s=s),
            "delete": sql.SQL("DELETE FROM {s}.objects WHERE key = %s").format(s=s),
            "delete_prefix": sql.SQL("DELETE FROM {s}.objects WHERE key >= %s AND key < %s").format(s=s),
        }

    def __repr__(self) -> str:
        return f"PostgresObjectStore({self.url!r})"

    async def __aenter__(self) -> PostgresObjectStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        # Like the S3 store, a closed store opens a new pool if it is used again.
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- public API ---------------------------------------------------------

    async def check_access(self) -> None:
        await self._fetch("reach", "", sql.SQL("SELECT 1"), ())

    async def get(self, key: str) -> bytes:
        check_key(key)
        rows = await self._fetch("read", key, self._sql["get"], (key,))
        if not rows:
            raise CheckpointNotFoundError(f"no object {key!r} in {self.url}")
        return bytes(rows[0][0])

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        data = bytes(data)
        for _attempt in range(5):
            if await self._change("write", key, self._sql["put"], (key, data)):
                return True
            rows = await self._fetch("write", key, self._sql["get"], (key,))
            if not rows:
                continue  # deleted between the refusal and the read; try again
            if bytes(rows[0][0]) == data:
                return False
            raise CheckpointExistsError(
                f"object {key!r} in {self.url} already exists with different content; "
                "stored objects are immutable, write under a new key instead"
            )
        raise StoreUnavailableError(f"PostgreSQL store {self.url}: {key!r} kept being deleted while written; retry")

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        upper = prefix_upper_bound(prefix)
        if upper is None:
            rows = await self._fetch("list", prefix, self._sql["list_all"], ())
        else:
            rows = await self._fetch("list", prefix, self._sql["list"], (prefix, upper))
        return [r[0] for r in rows]

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        check_key(prefix, prefix=True)
        await self._change("delete", prefix, self._sql["delete_prefix"], (prefix, prefix_upper_bound(prefix)))

    async def delete(self, key: str) -> bool:
        check_key(key)
        return await self._change("delete", key, self._sql["delete"], (key,)) == 1

    # -- helpers --------------------------------------------------------------

    async def _fetch(self, op: str, key: str, query: Any, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        pool = await self._open(op, key)
        try:
            async with pool.connection() as conn:
                cursor = await conn.execute(query, args)
                return await cursor.fetchall()
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise self._unavailable(op, key, exc) from exc

    async def _change(self, op: str, key: str, query: Any, args: tuple[Any, ...]) -> int:
        pool = await self._open(op, key)
        try:
            async with pool.connection() as conn:
                cursor = await conn.execute(query, args)
                return cursor.rowcount
        except (psycopg.Error, PoolTimeout, OSError) as exc:
            raise self._unavailable(op, key, exc) from exc

    async def _open(self, op: str, key: str) -> AsyncConnectionPool:
        async with self._lock:
            if self._pool is None:
                try:
                    # One connection first: a server that is down, a wrong password or a missing
                    # database fails at once with libpq's reason, where the pool would retry
                    # quietly until its timeout.
                    probe = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
                    await probe.close()
                except (psycopg.Error, OSError) as exc:
                    raise self._unavailable(op, key, exc, first=True) from exc
                pool = AsyncConnectionPool(
                    self._conninfo, min_size=1, max_size=self._pool_size, open=False,
                    timeout=self._pool_timeout_s, kwargs={"autocommit": True},
                    # A connection the server dropped (a restart) is found before it is handed out.
                    check=AsyncConnectionPool.check_connection,
                )
                try:
                    await pool.open(wait=True, timeout=self._pool_timeout_s)
                except (psycopg.Error, PoolTimeout, OSError) as exc:
                    await pool.close()
                    raise self._unavailable(op, key, exc, first=True) from exc
                self._pool = pool
            if not self._ready:
                try:
                    await self._migrate(self._pool)
                except (psycopg.Error, PoolTimeout, OSError) as exc:
                    raise self._unavailable("create the schema of", "", exc) from exc
                self._ready = True
            return self._pool

    async def _migrate(self, pool: AsyncConnectionPool) -> None:
        s = sql.Identifier(self.schema)
        lock_id = zlib.crc32(f"rewind-store:{self.schema}".encode())
        async with pool.connection() as conn:
            async with conn.transaction():
                # Workers starting together: one migrates, the others wait and find it done.
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_id,))
                await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {s}").format(s=s))
                await conn.execute(sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {s}.rewind_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)"
                ).format(s=s))
                cursor = await conn.execute(
                    sql.SQL("SELECT value FROM {s}.rewind_meta WHERE name = 'schema_version'").format(s=s))
                row = await cursor.fetchone()
                version = 0 if row is None else int(row[0])
                if version > SCHEMA_VERSION:
                    raise StoreUnavailableError(
                        f"PostgreSQL store {self.url} has schema version {version}, newer than this Rewind's "
                        f"{SCHEMA_VERSION}: upgrade Rewind to use it", refused=True
                    )
                for steps in MIGRATIONS[version:]:
                    for statement in steps:
                        await conn.execute(sql.SQL(statement).format(s=s))  # type: ignore[arg-type]
                await conn.execute(sql.SQL(
                    "INSERT INTO {s}.rewind_meta (name, value) VALUES ('schema_version', %s) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value").format(s=s), (SCHEMA_VERSION,))

    def _unavailable(self, op: str, key: str, exc: BaseException, *, first: bool = False) -> StoreUnavailableError:
        what = f"{op} {key!r}" if key else op
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, PoolTimeout) or first:
            return StoreUnavailableError(
                f"cannot reach PostgreSQL store {self.url} to {what} ({type(exc).__name__}: {reason}); check that "
                "the server is running and that the URL's host, port, user, password and database are right",
                refused=bool(_REFUSALS.search(str(exc))),
            )
        return StoreUnavailableError(
            f"PostgreSQL store {self.url} failed to {what} ({type(exc).__name__}: {reason}); check the server and retry"
        )
