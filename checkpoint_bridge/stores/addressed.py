"""Content-addressed objects: named by the sha256 of their bytes.

The payload store keeps several kinds (transcript segments, tool schemas,
tool outputs, Temporal payloads above the threshold). Writing one twice is a
no-op; reading one checks the bytes against the name, so a changed or
swapped object is never taken for the one asked for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from workflows.vocabulary.errors import CheckpointNotFoundError, RewindError, TranscriptError

from checkpoint_bridge.stores.contract import ObjectStore

__all__ = ["put_addressed", "get_addressed"]


async def put_addressed(objects: ObjectStore, key_of: Callable[[str], str], data: bytes) -> str:
    """Store `data` under `key_of(its sha256)`; returns the digest."""
    digest = hashlib.sha256(data).hexdigest()
    await objects.put_if_absent(key_of(digest), data)
    return digest


async def get_addressed(
    objects: ObjectStore, key: str, digest: str, what: str, *,
    plural: bool = False, error: type[RewindError] = TranscriptError,
) -> bytes:
    """The bytes stored under `key`, checked against `digest`; `error` (naming `what`)
    when `digest` is not one, or the bytes are missing or were changed."""
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise error(f"{what} reference {digest!r:.80} is not a sha256 digest")
    try:
        data = await objects.get(key)
    except CheckpointNotFoundError as exc:
        raise error(
            f"{what} {digest} {'are' if plural else 'is'} missing from {objects.url}; every worker and client "
            "(and `rewind mirror`) must use the same REWIND_PAYLOADS store"
        ) from exc
    if hashlib.sha256(data).hexdigest() != digest:
        raise error(f"{what} {digest} in {objects.url} {'do not match their' if plural else 'does not match its'} "
                    "hash; it was changed after it was written")
    return data
