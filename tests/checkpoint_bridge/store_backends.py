"""The storage backends of the conformance suite, and ways to inspect them from outside."""

from __future__ import annotations

import socket
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import boto3

from checkpoint_bridge.stores import FileObjectStore, ObjectStore, S3ObjectStore, SqliteObjectStore
from checkpoint_bridge.checkpoints.store import CheckpointStore


def make_bucket(endpoint: str) -> tuple[Any, str]:
    """A new, empty bucket on the moto server, and a boto3 client to inspect it."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    bucket = f"rewind-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


@dataclass
class Backend:
    """One storage backend under test, plus ways to look at it from outside."""

    name: str
    new_objects: Callable[[], ObjectStore]
    """A fresh, empty ObjectStore in its own folder / prefix."""
    all_keys: Callable[[], list[str]]
    """Every file / key in the backend's whole space, not just under the store."""
    reopen: Callable[[ObjectStore], ObjectStore]
    """Another ObjectStore on the same location, as a second process would open it."""
    broken: Callable[[], ObjectStore]
    """An ObjectStore whose backend is unreachable (no server / no usable folder)."""
    tamper: Callable[[ObjectStore, str, bytes], None]
    """Replace an object behind the store's back (as a person or a bug in another tool would)."""
    opened: list[ObjectStore] = field(default_factory=list)

    def objects(self) -> ObjectStore:
        store = self.new_objects()
        self.opened.append(store)
        return store

    def checkpoint_store(self, **options: Any) -> CheckpointStore:
        return CheckpointStore(self.objects(), **options)

    def unavailable(self) -> CheckpointStore:
        """A CheckpointStore on ``broken()``."""
        objects = self.broken()
        self.opened.append(objects)
        return CheckpointStore(objects)

    def twin(self, store: CheckpointStore, **options: Any) -> CheckpointStore:
        """A second CheckpointStore (own cache, own connections) on ``store``'s location."""
        other = self.reopen(store.objects)
        self.opened.append(other)
        return CheckpointStore(other, **options)


def file_backend(tmp_path: Path) -> Backend:
    # The whole per-test tmp dir is the space: anything written outside a
    # store's folder (a path-traversal bug) shows up in all_keys().
    space = tmp_path
    counter = iter(range(1_000_000))

    def all_keys() -> list[str]:
        return sorted(p.relative_to(space).as_posix() for p in space.rglob("*") if p.is_file())

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, FileObjectStore)
        return FileObjectStore(objects.root)

    def broken() -> ObjectStore:
        # A regular file where the store's parent folder should be: like an
        # unmounted or mistyped volume, every write fails at the OS level.
        blocker = space / "not-a-folder"
        blocker.write_text("")
        return FileObjectStore(blocker / "store")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, FileObjectStore)
        (objects.root / key).write_bytes(data)

    return Backend("file", lambda: FileObjectStore(space / f"store-{next(counter)}"), all_keys, reopen, broken, tamper)


def s3_backend(endpoint: str) -> Backend:
    s3, bucket = make_bucket(endpoint)

    def all_keys() -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def new_objects() -> S3ObjectStore:
        return S3ObjectStore(bucket, f"tests/{uuid.uuid4().hex[:8]}", endpoint_url=endpoint)

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, S3ObjectStore)
        return S3ObjectStore(objects.bucket, objects.prefix, endpoint_url=objects.endpoint_url)

    def broken() -> ObjectStore:
        return S3ObjectStore(bucket, "tests/down", endpoint_url=f"http://127.0.0.1:{closed_port()}")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, S3ObjectStore)
        s3.put_object(Bucket=objects.bucket, Key=f"{objects.prefix}/{key}" if objects.prefix else key, Body=data)

    return Backend("s3", new_objects, all_keys, reopen, broken, tamper)


def sqlite_backend(tmp_path: Path) -> Backend:
    # One database file per store, in the per-test tmp dir.
    space = tmp_path / "sqlite"
    counter = iter(range(1_000_000))

    def all_keys() -> list[str]:
        keys: list[str] = []
        for db in sorted(space.glob("*.db")):
            with sqlite3.connect(db) as conn:
                keys += [f"{db.name}/{k}" for (k,) in conn.execute("SELECT key FROM objects ORDER BY key")]
        return keys

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, SqliteObjectStore)
        return SqliteObjectStore(objects.path)

    def broken() -> ObjectStore:
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        return SqliteObjectStore(blocker / "store.db")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, SqliteObjectStore)
        with sqlite3.connect(objects.path, timeout=30) as conn:
            conn.execute("UPDATE objects SET data = ? WHERE key = ?", (data, key))

    return Backend("sqlite", lambda: SqliteObjectStore(space / f"store-{next(counter)}.db"), all_keys, reopen,
                   broken, tamper)


def postgres_backend(server_url: str) -> Backend:
    """Stores in schemas of their own (``?schema=``) on the session's PostgreSQL server."""
    import psycopg

    from checkpoint_bridge.stores import PostgresObjectStore

    made: dict[int, str] = {}
    schemas: list[str] = []

    def new_objects() -> ObjectStore:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        schemas.append(schema)
        url = f"{server_url}?schema={schema}"
        store = PostgresObjectStore(url)
        made[id(store)] = url
        return store

    def all_keys() -> list[str]:
        keys: list[str] = []
        with psycopg.connect(server_url, autocommit=True) as conn:
            for schema in schemas:
                exists = conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                                      "AND table_name = 'objects'", (schema,)).fetchone()
                if exists:
                    keys += [f"{schema}/{k}" for (k,) in conn.execute(f'SELECT key FROM "{schema}".objects ORDER BY key')]
        return keys

    def reopen(objects: ObjectStore) -> ObjectStore:
        store = PostgresObjectStore(made[id(objects)])
        made[id(store)] = made[id(objects)]
        return store

    def broken() -> ObjectStore:
        return PostgresObjectStore(f"postgresql://rewind@127.0.0.1:{closed_port()}/rewind?schema=down")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, PostgresObjectStore)
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'UPDATE "{objects.schema}".objects SET data = %s WHERE key = %s', (data, key))

    return Backend("postgres", new_objects, all_keys, reopen, broken, tamper)


def dynamodb_backend(endpoint: str) -> Backend:
    """Stores under prefixes of their own in one table on the moto server (which speaks DynamoDB too);
    the table is created by the first store that uses it, as a user's first worker would."""
    from checkpoint_bridge.stores import DynamoObjectStore

    dynamo = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    table = f"rewind-test-{uuid.uuid4().hex[:12]}"

    def all_keys() -> list[str]:
        try:
            pages = dynamo.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
            # An object's item as PREFIX/KEY; the chunks of large objects are parts of those, not keys.
            return sorted(f"{i['pk']['S'].split('#', 1)[0]}/{i['sk']['S']}" for page in pages
                          for i in page.get("Items", []) if "#" in i["pk"]["S"])
        except dynamo.exceptions.ResourceNotFoundException:
            return []

    def new_objects() -> ObjectStore:
        return DynamoObjectStore(table, f"tests/{uuid.uuid4().hex[:8]}", endpoint_url=endpoint)

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, DynamoObjectStore)
        return DynamoObjectStore(objects.table, objects.prefix, endpoint_url=objects.endpoint_url)

    def broken() -> ObjectStore:
        return DynamoObjectStore(table, "tests/down", endpoint_url=f"http://127.0.0.1:{closed_port()}")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, DynamoObjectStore)
        dynamo.update_item(TableName=objects.table, Key={"pk": {"S": objects._group(key)}, "sk": {"S": key}},
                           UpdateExpression="SET #d = :d", ExpressionAttributeNames={"#d": "data"},
                           ExpressionAttributeValues={":d": {"B": data}})

    return Backend("dynamodb", new_objects, all_keys, reopen, broken, tamper)


def closed_port() -> int:
    """A local TCP port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hot_backend(redis_url: str, tmp_path: Path) -> Backend:
    """Redis (the session's server) as the hot tier in front of a folder: each store its own
    folder and, through it, its own Redis namespace."""
    from checkpoint_bridge.stores import HotTierObjectStore

    durable = file_backend(tmp_path)

    def new_objects() -> ObjectStore:
        return HotTierObjectStore(redis_url, durable.new_objects())

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, HotTierObjectStore)
        return HotTierObjectStore(redis_url, durable.reopen(objects.durable))

    def broken() -> ObjectStore:
        return HotTierObjectStore(f"redis://127.0.0.1:{closed_port()}/0", durable.broken())

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        # Behind the store's back in both tiers, as a person editing the durable copy and the cache would.
        import redis

        assert isinstance(objects, HotTierObjectStore)
        assert isinstance(objects.durable, FileObjectStore)
        if (objects.durable.root / key).exists():  # flushed already (else only Redis has it)
            durable.tamper(objects.durable, key, data)
        with redis.Redis.from_url(redis_url) as client:
            client.set(objects._k("o", key), data, xx=True)

    return Backend("hot", new_objects, durable.all_keys, reopen, broken, tamper)


def redis_backend(redis_url: str) -> Backend:
    """Redis alone (REWIND_STORE=redis:// with REWIND_ALLOW_REDIS_STORE=1), each store a namespace."""
    import redis

    from checkpoint_bridge.stores import RedisObjectStore

    namespaces: list[str] = []

    def new_objects() -> ObjectStore:
        namespaces.append(uuid.uuid4().hex[:10])
        return RedisObjectStore(f"{redis_url}?namespace={namespaces[-1]}")

    def all_keys() -> list[str]:
        with redis.Redis.from_url(redis_url) as client:
            return sorted(f"{ns}/{k.decode().split(':o:', 1)[1]}" for ns in namespaces
                          for k in client.scan_iter(match=f"rw{{{ns}}}:o:*"))

    def reopen(objects: ObjectStore) -> ObjectStore:
        assert isinstance(objects, RedisObjectStore)
        return RedisObjectStore(f"{redis_url}?namespace={objects.namespace}")

    def broken() -> ObjectStore:
        return RedisObjectStore(f"redis://127.0.0.1:{closed_port()}/0")

    def tamper(objects: ObjectStore, key: str, data: bytes) -> None:
        assert isinstance(objects, RedisObjectStore)
        with redis.Redis.from_url(redis_url) as client:
            client.set(objects._object(key), data, xx=True)

    return Backend("redis", new_objects, all_keys, reopen, broken, tamper)
