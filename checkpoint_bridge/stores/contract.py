"""The object-store contract every backend implements.

An ``ObjectStore`` maps keys (relative ``a/b/c.json`` paths built by
``checkpoint_bridge.document.layout``) to immutable bytes. It knows nothing about
checkpoints; ``CheckpointStore`` builds on it. Every backend passes the same
behavioural suite, ``checkpoint_bridge.stores.conformance`` (run it against your
own backend with ``await conformance.validate(factory)``):

    FileObjectStore(root)                      file://path or a bare path     folder.py
    S3ObjectStore(bucket, prefix, endpoint)    s3://bucket/prefix              s3.py
    SqliteObjectStore(path)                    sqlite:///path/to/file.db       sqlite.py
    PostgresObjectStore(url)                   postgresql://user@host/db       postgres.py
    DynamoObjectStore(table, prefix, endpoint) dynamodb://table/prefix         dynamodb.py
    RedisObjectStore(url)                      redis://host:port/db            redis.py
    HotTierObjectStore(redis_url, durable)     Redis in front of any of them   hot.py

The guarantees, which everything above the stores relies on:

1. Keys. Only ``seg/seg/...`` of segments of ``A-Z a-z 0-9 . _ -`` (starting
   with a letter or digit, no ``..``) are accepted; any other key raises
   ``InvalidIdError`` before the backend is touched (``check_key``).
2. Immutability by conditional create. ``put_if_absent`` writes a key that is
   not there (True); the same bytes again are a no-op (False); different bytes
   raise ``CheckpointExistsError`` and the stored bytes stay as they were. The
   backend itself enforces this (``os.link``, ``If-None-Match: *``, a primary
   key), never a read-then-write check: of writers racing on one key with
   different bytes exactly one succeeds, the others get ``CheckpointExistsError``.
3. Atomic objects. A reader sees an object whole or not at all; a write that
   was interrupted (a crash, a lost connection) leaves no object.
4. Read-after-write. Once ``put_if_absent`` (or ``delete``) has returned, every
   store opened on the same location, in this process or another, reads and
   lists the new state.
5. Bytes are bytes. Any bytes round-trip exactly: empty, binary (gzip packs),
   several MiB (a backend with a smaller item limit stores large objects by
   reference, invisibly to the caller).
6. Listing. ``list(prefix)`` returns every key that starts with ``prefix`` as
   a string prefix (``runs/a`` also matches ``runs/ab/...``; ``""`` lists the
   whole store), complete (no page limit), sorted by code point (the keys are
   ASCII, so byte order), and only keys of this store (another prefix, schema
   or table on the same server is another store).
7. Errors. A missing key reads as ``CheckpointNotFoundError``; a backend that
   cannot be reached or refuses raises ``StoreUnavailableError`` naming
   ``url`` and what to check (never a library's own exception type), fast
   rather than hanging; ``check_access`` raises it up front.
8. Deleting is the one exception to immutability: ``delete`` says whether the
   key was there (deleting twice is harmless), ``delete_prefix`` refuses the
   empty prefix; a deleted key may be written again. Only erasing a run
   (``rewind delete``, checkpoint_bridge/checkpoints/erasure.py), erasing LangGraph
   threads (``RewindSaver``'s delete_thread / prune / delete_for_runs,
   langgraph/store.py), the start-up probe and a pack's writer (the packs a
   newer pack holds whole: copies, document/packs.py) delete.
9. ``aclose`` releases connections and may be called more than once.
"""

from __future__ import annotations

import re
import uuid
from typing import Protocol, runtime_checkable

from workflows.vocabulary.errors import (
    CheckpointError,
    CheckpointExistsError,
    InvalidIdError,
    UnsafeStoreError,
)

# A key segment: what validated ids and the layout's fixed names are made of.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

__all__ = ["ObjectStore", "check_key", "verify_store"]


@runtime_checkable
class ObjectStore(Protocol):
    """Bytes by key. Every method raises ``StoreUnavailableError`` if the backend fails."""

    url: str
    """Where the store points, for messages: ``file:///abs/root`` or ``s3://bucket/prefix``."""

    async def check_access(self) -> None:
        """Fail now, with the reason, if the store cannot be used (unreachable, no bucket, refused)."""
        ...

    async def get(self, key: str) -> bytes:
        """The object's bytes; ``CheckpointNotFoundError`` if there is none."""
        ...

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write an immutable object.

        True if written; False if identical bytes were already there;
        ``CheckpointExistsError`` if different bytes are there.
        """
        ...

    async def list(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""
        ...

    async def delete_prefix(self, prefix: str) -> None:
        """Delete every key starting with ``prefix`` (which must not be empty)."""
        ...

    async def delete(self, key: str) -> bool:
        """Delete one object: True if it was there, False if there was none (so deleting
        twice is harmless). The one exception to immutability: erasing a run (erasure.py)
        or a LangGraph thread's checkpoints (langgraph/store.py)."""
        ...

    async def aclose(self) -> None:
        """Release connections. The store may not be used afterwards."""
        ...


async def verify_store(objects: ObjectStore, *, probe_writes: bool) -> None:
    """Raise a ``CheckpointError`` now if the store cannot keep Rewind's promises.

    Always: one request that fails as every later one would (unreachable,
    missing bucket, refused credentials). With ``probe_writes`` (a worker
    starting): write one probe object twice. Checkpoint immutability rests on
    the second write of a key being refused (``If-None-Match: *`` on S3);
    some S3-compatible servers silently ignore the header and overwrite.
    """
    await objects.check_access()
    if not probe_writes:
        return
    key = f"probes/{uuid.uuid4().hex}.json"
    await objects.put_if_absent(key, b'{"probe": "first write"}')
    try:
        try:
            replaced = await objects.put_if_absent(key, b'{"probe": "second write"}')
        except CheckpointExistsError:
            return  # refused, as it must be
        raise UnsafeStoreError(
            f"store {objects.url} accepted a second write of {key!r} (replaced={replaced}): it ignores "
            "conditional writes (If-None-Match: *), so checkpoints could be silently overwritten; use AWS S3, "
            "a current MinIO or another server that refuses a conditional PUT of an existing key with 412"
        )
    finally:
        try:
            await objects.delete_prefix(key)
        except CheckpointError:
            pass  # a leftover probe object is harmless


def check_key(key: str, *, prefix: bool = False) -> str:
    """Refuse any key that is not ``seg/seg/...`` of safe segments.

    With ``prefix=True`` a trailing ``/`` and the empty prefix are allowed.
    """
    body = key[:-1] if prefix and key.endswith("/") else key
    if prefix and body == "":
        return key
    segments = body.split("/")
    if not all(_SEGMENT.fullmatch(s) and ".." not in s for s in segments):
        raise InvalidIdError(
            f"storage key {key!r:.200} is unsafe; keys are relative paths of segments of "
            "A-Z a-z 0-9 . _ - (starting with a letter or digit, no '..') built by checkpoint_bridge.document.layout"
        )
    return key
