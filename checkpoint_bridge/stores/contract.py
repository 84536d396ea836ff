"""The object-store contract every backend implements.

An ``ObjectStore`` maps keys (relative ``a/b/c.json`` paths built by
``checkpoint_bridge.document.layout``) to immutable bytes. It knows nothing about
checkpoints; ``CheckpointStore`` builds on it. Two backends share the contract
and one behavioural test suite:

    FileObjectStore(root)                      file://path or a bare path
    S3ObjectStore(bucket, prefix, endpoint)    s3://bucket/prefix

Immutability is enforced by the backend itself (``os.link`` / ``If-None-Match``)
rather than by a read-then-write check, so two writers racing on one key can
never both succeed with different bytes. Objects are never overwritten; the
only way one goes is ``delete`` / ``delete_prefix``, which only erasing a run
(``rewind delete``, checkpoint_bridge/erasure.py), erasing LangGraph threads
(``RewindSaver``'s delete_thread / prune / delete_for_runs, langgraph/store.py)
and the start-up probe use.
"""

from __future__ import annotations

import re
import uuid
from typing import Protocol, runtime_checkable

from workflows.errors import (
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
