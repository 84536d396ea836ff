"""The SQLite object store: every object a row of one database file.

    sqlite:///abs/path/rewind.db     sqlite://relative/path/rewind.db   (as file:// URLs)

One table, ``objects(key TEXT PRIMARY KEY, data BLOB)``. Conditional create is
the primary key (``INSERT ... ON CONFLICT DO NOTHING``), so two writers, in
one process or several, can never both create a key; a write is one
transaction, so a writer killed mid-write leaves nothing behind. The file is
in WAL mode (readers never wait for the writer, several processes share the
file) with a busy timeout for writers that meet another's transaction, and
``synchronous=FULL``: a write that returned is on disk, as the folder store's
fsync makes it.

Each thread has its own connection (sqlite3 connections are not for sharing
between threads). Reads run in the event loop's own thread: a row from a local
file takes microseconds, and a checkpoint's chain is read as hundreds of them
at once, which a thread hand-off per read would make several times slower (the
folder store reads the same way); WAL means they never wait for a writer.
Writes, listings and deletes run in a worker thread, since a writer may wait
for another's transaction.

The schema is versioned (``rewind_meta.schema_version``) and created on first
use; a file written by a newer Rewind is refused rather than misread.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from workflows.vocabulary.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    InvalidIdError,
    StoreUnavailableError,
)

from checkpoint_bridge.stores.contract import check_key
from checkpoint_bridge.stores.keyrange import prefix_upper_bound

__all__ = ["SqliteObjectStore", "SCHEMA_VERSION"]

T = TypeVar("T")

# Versioned migrations: MIGRATIONS[i] takes the schema from version i to i + 1.
MIGRATIONS: list[list[str]] = [
    [
        "CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY NOT NULL, data BLOB NOT NULL)",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)


class SqliteObjectStore:
    """Objects as rows of the SQLite file at ``path`` (created, with its folder, on first use)."""

    def __init__(self, path: Path | str, *, busy_timeout_s: float = 30.0, synchronous: str = "FULL") -> None:
        self.path = Path(path).expanduser().resolve()
        self.url = f"sqlite://{self.path}"
        self._busy_timeout_s = busy_timeout_s
        if synchronous.upper() not in {"FULL", "NORMAL", "EXTRA"}:
            raise ValueError(f"synchronous={synchronous!r}: use FULL, NORMAL or EXTRA")
        self._synchronous = synchronous.upper()
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        # Calls running in worker threads, which aclose waits for (see there).
        self._busy = 0
        self._idle = threading.Condition(self._guard)
        self._migrating = threading.Lock()
        self._ready = False
        self._generation = 0

    def __repr__(self) -> str:
        return f"SqliteObjectStore({str(self.path)!r})"

    async def __aenter__(self) -> SqliteObjectStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        # Like the S3 store, a closed store opens new connections if it is used again.
        # A write or listing still running in a worker thread (its awaiting task was
        # cancelled: the thread goes on) is waited for first: closing a connection while
        # another thread executes on it crashes the process (a segfault inside sqlite3).
        def take() -> list[sqlite3.Connection]:
            with self._idle:
                self._idle.wait_for(lambda: self._busy == 0, timeout=120)
                connections, self._connections = self._connections, []
                self._generation += 1
                return connections

        with self._guard:
            busy = self._busy > 0
        connections = await asyncio.to_thread(take) if busy else take()
        for connection in connections:
            try:
                connection.close()
            except sqlite3.Error:
                pass

    # -- public API ---------------------------------------------------------

    async def check_access(self) -> None:
        await self._run("open", "", lambda: None)

    async def get(self, key: str) -> bytes:
        check_key(key)
        try:
            row = self._connection().execute("SELECT data FROM objects WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._unavailable("read", key, exc) from exc
        if row is None:
            raise CheckpointNotFoundError(f"no object {key!r} in {self.url}")
        return bytes(row[0])

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        return await self._run("write", key, self._put_if_absent, key, bytes(data))

    async def list(self, prefix: str) -> list[str]:
        check_key(prefix, prefix=True)
        return await self._run("list", prefix, self._list, prefix)

    async def delete_prefix(self, prefix: str) -> None:
        if not prefix:
            raise InvalidIdError(f"refusing to delete everything in {self.url}: the prefix is empty")
        check_key(prefix, prefix=True)
        await self._run("delete", prefix, self._delete_prefix, prefix)

    async def delete(self, key: str) -> bool:
        check_key(key)
        return await self._run("delete", key, self._delete, key)

    # -- helpers --------------------------------------------------------------

    async def _run(self, op: str, key: str, fn: Callable[..., T], *args: object) -> T:
        def call() -> T:
            with self._guard:
                self._busy += 1
            try:
                self._connection()
                return fn(*args)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

        try:
            return await asyncio.to_thread(call)
        except sqlite3.Error as exc:
            raise self._unavailable(op, key, exc) from exc

    def _unavailable(self, op: str, key: str, exc: BaseException) -> StoreUnavailableError:
        what = f"{op} {key!r}" if key else op
        return StoreUnavailableError(
            f"SQLite store {self.url} could not {what} ({type(exc).__name__}: {exc}); check that the file's "
            "folder exists and is writable, the disk is not full and the file is a Rewind SQLite store",
            # A busy or locked database passes; a file that cannot be opened or is not a store does not.
            refused=not any(word in str(exc).lower() for word in ("locked", "busy")),
        )

    def _connection(self) -> sqlite3.Connection:
        mine = getattr(self._local, "connection", None)
        if mine is not None and mine[0] == self._generation:
            return mine[1]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise sqlite3.OperationalError(f"cannot create the folder {self.path.parent}: {exc.strerror or exc}") from exc
        # isolation_level=None: autocommit; transactions are explicit (BEGIN IMMEDIATE).
        connection = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None,
                                     check_same_thread=False)
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            if not self._ready:
                with self._migrating:  # one thread of this process migrates; BEGIN IMMEDIATE orders processes
                    if not self._ready:
                        self._migrate_when_free(connection)
            connection.execute(f"PRAGMA synchronous = {self._synchronous}")
        except BaseException:
            connection.close()
            raise
        with self._guard:
            self._connections.append(connection)
            self._local.connection = (self._generation, connection)
        return connection

    def _migrate_when_free(self, connection: sqlite3.Connection) -> None:
        """`_migrate`, again while another connection holds the file: switching a new file
        to WAL has to upgrade a read lock to a write lock, and SQLite answers "database is
        locked" at once there (waiting could deadlock), whatever the busy timeout says. Seen
        with several processes opening a new store at the same moment on a loaded machine."""
        deadline = time.monotonic() + self._busy_timeout_s
        pause = 0.01
        while True:
            try:
                return self._migrate(connection)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _migrate(self, connection: sqlite3.Connection) -> None:
        # WAL is a property of the file: set once, kept by every later connection.
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]  # a read: no write lock needed
        if str(mode).lower() != "wal":
            mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"the file cannot use WAL mode (journal_mode is {mode})")
        connection.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then see it done
        try:
            connection.execute("CREATE TABLE IF NOT EXISTS rewind_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            row = connection.execute("SELECT value FROM rewind_meta WHERE name = 'schema_version'").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"the file has schema version {version}, newer than this Rewind's {SCHEMA_VERSION}: "
                    "upgrade Rewind to use it"
                )
            for steps in MIGRATIONS[version:]:
                for statement in steps:
                    connection.execute(statement)
            connection.execute(
                "INSERT INTO rewind_meta (name, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value", (SCHEMA_VERSION,),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        self._ready = True

    def _write(self, statement: str, args: tuple[Any, ...]) -> int:
        """One write statement in its own transaction: the rows it changed.

        BEGIN IMMEDIATE takes the write lock up front, waiting for it with the busy
        timeout; an autocommit statement would start as a reader and, if another
        process wrote meanwhile, fail at once with SQLITE_BUSY instead of waiting.
        """
        connection = self._connection()
        connection.execute("BEGIN IMMEDIATE")
        try:
            changed = connection.execute(statement, args).rowcount
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        return changed

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        for _attempt in range(5):
            if self._write("INSERT INTO objects (key, data) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, data)):
                return True
            row = self._connection().execute("SELECT data FROM objects WHERE key = ?", (key,)).fetchone()
            if row is None:
                continue  # deleted between the refusal and the read; try again
            if bytes(row[0]) == data:
                return False
            raise CheckpointExistsError(
                f"object {key!r} in {self.url} already exists with different content; "
                "stored objects are immutable, write under a new key instead"
            )
        raise StoreUnavailableError(f"SQLite store {self.url}: {key!r} kept being deleted while written; retry")

    def _where(self, prefix: str) -> tuple[str, tuple[Any, ...]]:
        upper = prefix_upper_bound(prefix)
        if upper is None:
            return "", ()
        return " WHERE key >= ? AND key < ?", (prefix, upper)

    def _list(self, prefix: str) -> list[str]:
        where, args = self._where(prefix)
        rows = self._connection().execute(f"SELECT key FROM objects{where} ORDER BY key", args).fetchall()
        return [r[0] for r in rows]

    def _delete_prefix(self, prefix: str) -> None:
        where, args = self._where(prefix)
        self._write(f"DELETE FROM objects{where}", args)

    def _delete(self, key: str) -> bool:
        return self._write("DELETE FROM objects WHERE key = ?", (key,)) == 1
