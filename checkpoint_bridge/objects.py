"""The low-level object store interface, and opening one from a URL.

An ``ObjectStore`` maps keys (relative ``a/b/c.json`` paths built by
``checkpoint_bridge.layout``) to immutable bytes. It knows nothing about
checkpoints; ``CheckpointStore`` builds on it. Two backends share the contract
and one behavioural test suite:

    FileObjectStore(root)                      file://path or a bare path
    S3ObjectStore(bucket, prefix, endpoint)    s3://bucket/prefix

Immutability is enforced by the backend itself (``os.link`` / ``If-None-Match``)
rather than by a read-then-write check, so two writers racing on one key can
never both succeed with different bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from rewind.errors import ConfigError

from .objects_file import FileObjectStore
from .objects_s3 import S3ObjectStore

__all__ = ["ObjectStore", "FileObjectStore", "S3ObjectStore", "open_object_store", "ACCEPTED_URLS"]

ACCEPTED_URLS = "file://relative/path, file:///absolute/path, a bare path, or s3://bucket[/prefix]"


@runtime_checkable
class ObjectStore(Protocol):
    """Bytes by key. Every method raises ``StoreUnavailableError`` if the backend fails."""

    url: str
    """Where the store points, for messages: ``file:///abs/root`` or ``s3://bucket/prefix``."""

    async def get(self, key: str) -> bytes:
        """The object's bytes; ``CheckpointNotFoundError`` if there is none."""
        ...

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Write an immutable object.

        True if written; False if identical bytes were already there;
        ``CheckpointExistsError`` if different bytes are there.
        """
        ...

    async def put_overwrite(self, key: str, data: bytes) -> None:
        """Replace an object atomically. Only for mutable pointers, never for checkpoints."""
        ...

    async def list(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``, sorted."""
        ...

    async def delete_prefix(self, prefix: str) -> None:
        """Delete every key starting with ``prefix`` (which must not be empty)."""
        ...

    async def aclose(self) -> None:
        """Release connections. The store may not be used afterwards."""
        ...


def open_object_store(url: str) -> ObjectStore:
    """Open the store a ``REWIND_STORE``-style URL points at (see ``ACCEPTED_URLS``).

    S3 takes its endpoint from ``AWS_ENDPOINT_URL`` when set (MinIO, a local
    S3 server) and its credentials from the usual AWS environment/config.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"store URL {url!r} is empty; use {ACCEPTED_URLS}")
    if url.startswith("s3://"):
        bucket, _, prefix = url[len("s3://"):].partition("/")
        if not bucket:
            raise ConfigError(f"store URL {url!r} names no bucket; use s3://bucket[/prefix]")
        try:
            return S3ObjectStore(bucket, prefix.strip("/"))
        except ConfigError as exc:
            raise ConfigError(f"store URL {url!r} is not usable: {exc}") from exc
    if url.startswith("file://"):
        path = url[len("file://"):]
        if not path:
            raise ConfigError(f"store URL {url!r} names no folder; use {ACCEPTED_URLS}")
        return FileObjectStore(Path(path))
    if "://" in url:
        raise ConfigError(f"store URL {url!r} has an unsupported scheme; use {ACCEPTED_URLS}")
    return FileObjectStore(Path(url))
