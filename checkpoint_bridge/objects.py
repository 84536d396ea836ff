"""The low-level object store interface, and opening one from a URL.

An ``ObjectStore`` maps keys (relative ``a/b/c.json`` paths built by
``checkpoint_bridge.layout``) to immutable bytes. It knows nothing about
checkpoints; ``CheckpointStore`` builds on it. Two backends share the contract
and one behavioural test suite:

    FileObjectStore(root)                      file://path or a bare path
    S3ObjectStore(bucket, prefix, endpoint)    s3://bucket/prefix

Immutability is enforced by the backend itself (``os.link`` / ``If-None-Match``)
rather than by a read-then-write check, so two writers racing on one key can
never both succeed with different bytes. Objects are never overwritten; the
only way one goes is ``delete`` / ``delete_prefix``, which only erasing a run
(``rewind delete``, checkpoint_bridge/erasure.py), erasing LangGraph threads
(``RewindSaver``'s delete_thread / prune / delete_for_runs, langgraph_store.py)
and the start-up probe use.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from workflows.errors import (
    CheckpointError,
    CheckpointExistsError,
    ConfigError,
    UnsafeStoreError,
)

from .objects_file import FileObjectStore
from .objects_s3 import S3ObjectStore

__all__ = [
    "ObjectStore", "FileObjectStore", "S3ObjectStore", "open_object_store", "ACCEPTED_URLS",
    "StoreLocation", "parse_store_url", "verify_store",
]

ACCEPTED_URLS = "file://relative/path, file:///absolute/path, a bare path, or s3://bucket[/prefix]"


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
        or a LangGraph thread's checkpoints (langgraph_store.py)."""
        ...

    async def aclose(self) -> None:
        """Release connections. The store may not be used afterwards."""
        ...


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store URL: an S3 bucket and prefix, or a local folder."""

    kind: str  # "s3" | "file"
    bucket: str = ""
    prefix: str = ""
    path: str = ""


def parse_store_url(url: str) -> StoreLocation:
    """The one parser of ``REWIND_STORE`` / ``REWIND_PAYLOADS`` URLs (see ``ACCEPTED_URLS``)."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"store URL {url!r} is empty; use {ACCEPTED_URLS}")
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://"):].partition("/")
        if not bucket:
            raise ConfigError(f"store URL {url!r} names no bucket; use s3://bucket[/prefix]")
        return StoreLocation("s3", bucket=bucket, prefix=prefix.strip("/"))
    if url.startswith("file://"):
        path = url[len("file://"):]
        if not path:
            raise ConfigError(f"store URL {url!r} names no folder; use {ACCEPTED_URLS}")
        return StoreLocation("file", path=path)
    if "://" in url or re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url):
        # Also `s3:/bucket` or `s3//bucket`-like typos that would otherwise be a local folder named "s3:".
        raise ConfigError(f"store URL {url!r} has an unsupported scheme (or a typo in one); use {ACCEPTED_URLS}")
    if url.startswith(("s3/", "s3:")) or url.split("/", 1)[0] in {"s3", "file"}:
        raise ConfigError(f"store URL {url!r} looks like a mistyped s3:// or file:// URL; use {ACCEPTED_URLS}")
    return StoreLocation("file", path=url)


def open_object_store(url: str, *, endpoint_url: str | None = None, region_name: str | None = None) -> ObjectStore:
    """Open the store a ``REWIND_STORE``-style URL points at (see ``ACCEPTED_URLS``).

    S3 talks to ``endpoint_url`` (MinIO, a local S3 server; None: AWS) and
    takes its credentials from botocore's usual chain.
    """
    where = parse_store_url(url)
    if where.kind == "s3":
        try:
            return S3ObjectStore(where.bucket, where.prefix, endpoint_url=endpoint_url, region_name=region_name)
        except ConfigError as exc:
            raise ConfigError(f"store URL {url!r} is not usable: {exc}") from exc
    return FileObjectStore(Path(where.path))


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
