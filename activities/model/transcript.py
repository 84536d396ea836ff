"""The conversation, passed to model calls by reference.

Sending the whole message list to every model-call activity makes Temporal
history grow with the square of the run's length (a known way runs die at the
50 MB history limit). Instead the conversation is a chain of content-addressed
segments in the payload store: each model call stores the messages that are
new since the previous call as one segment that points at its parent, and the
workflow passes only (head, length, new messages). History then holds each
message about once, and the store holds each message once.

Segments are immutable and named by the sha256 of their bytes, so a retried
or repeated write is a no-op and a forked run shares its parent's prefix.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from checkpoint_bridge.stores.addressed import get_addressed, put_addressed
from checkpoint_bridge.checkpoints.lru import LRU
from checkpoint_bridge.stores import ObjectStore
from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.errors import TranscriptError

SEGMENT_FORMAT = "rewind.transcript-segment/v1"
TOOLS_FORMAT = "rewind.tool-schemas/v1"



def segment_bytes(head: str | None, head_len: int, messages: list[dict[str, Any]]) -> bytes:
    """The stored form of the segment that `append(head, head_len, messages)` writes
    (its sha256 is the new head; erasing a run recomputes it for calls that never returned)."""
    doc = {"format": SEGMENT_FORMAT, "parent": head, "length": head_len + len(messages), "messages": messages}
    return canonical_json(doc).encode()


def segment_key(digest: str) -> str:
    return f"segments/{digest[:2]}/{digest}.json"


def tools_key(digest: str) -> str:
    return f"tools/{digest[:2]}/{digest}.json"


class TranscriptStore:
    def __init__(self, objects: ObjectStore, cache_size: int = 128) -> None:
        self._objects = objects
        self._cache: LRU[list[dict[str, Any]]] = LRU(cache_size)
        self._tools: LRU[list[dict[str, Any]]] = LRU(cache_size)

    async def append(self, head: str | None, head_len: int, messages: list[dict[str, Any]]) -> str:
        """Store `messages` after the prefix `head`; returns the new head."""
        digest = await put_addressed(self._objects, segment_key, segment_bytes(head, head_len, messages))
        prefix = self._cache.get(head) if head is not None else []
        if prefix is not None:
            self._cache.put(digest, [*prefix, *messages])
        return digest

    # The tool schemas of a run change rarely (a fork may change them), and they
    # would otherwise ride in every model call's input: stored once, by digest.

    async def put_tools(self, tools: list[dict[str, Any]]) -> str:
        data = canonical_json({"format": TOOLS_FORMAT, "tools": tools}).encode()
        digest = hashlib.sha256(data).hexdigest()
        if self._tools.get(digest) is None:  # the common case: this worker stored them already
            await put_addressed(self._objects, tools_key, data)
            self._tools.put(digest, tools)
        return digest

    async def tools(self, digest: str) -> list[dict[str, Any]]:
        cached = self._tools.get(digest)
        if cached is not None:
            return cached
        doc = json.loads(await get_addressed(self._objects, tools_key(digest), digest, "tool schemas", plural=True))
        if doc.get("format") != TOOLS_FORMAT or not isinstance(doc.get("tools"), list):
            raise TranscriptError(f"tool schemas {digest} have unknown format {doc.get('format')!r}")
        self._tools.put(digest, doc["tools"])
        return doc["tools"]

    async def _segment(self, digest: str) -> dict[str, Any]:
        doc = json.loads(await get_addressed(self._objects, segment_key(digest), digest, "transcript segment"))
        if doc.get("format") != SEGMENT_FORMAT:
            raise TranscriptError(f"transcript segment {digest} has unknown format {doc.get('format')!r}")
        return doc

    async def load(self, head: str | None, expected_len: int) -> list[dict[str, Any]]:
        """The full message list ending at `head` (cached; walks parents on a miss)."""
        if head is None:
            messages: list[dict[str, Any]] = []
        elif (cached := self._cache.get(head)) is not None:
            messages = cached
        else:
            chain: list[tuple[str, dict[str, Any]]] = []
            cursor: str | None = head
            while cursor is not None and cursor not in self._cache:
                doc = await self._segment(cursor)
                chain.append((cursor, doc))
                cursor = doc.get("parent")
            messages = (self._cache.get(cursor) or []) if cursor is not None else []
            for digest, doc in reversed(chain):
                messages = [*messages, *doc["messages"]]
                self._cache.put(digest, messages)
        if len(messages) != expected_len:
            raise TranscriptError(
                f"transcript {head} holds {len(messages)} messages, the workflow expects {expected_len}"
            )
        return list(messages)
