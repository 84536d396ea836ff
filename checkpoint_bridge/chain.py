"""Rebuilding full checkpoint documents from snapshot + delta chains.

``ChainReader`` walks ``parent_id`` links from the requested step back to the
nearest snapshot or cached document, then replays the deltas forward. It keeps
recently rebuilt documents in a small LRU, so reading step n right after step
n-1 (the mirror's and ``rewind tree``'s pattern) costs one small GET.

On a cold read of a long chain the steps below are fetched in parallel windows
(their keys are predictable: a delta's parent is normally the previous step of
the same branch) instead of one round trip per step.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from workflows.errors import CheckpointNotFoundError, CorruptCheckpointError
from workflows.ids import parse_checkpoint_id

from .envelope import Envelope, apply_delta, decode
from .lru import LRU
from .layout import step_key
from .migrations import migrate
from .objects import ObjectStore

__all__ = ["SnapshotPolicy", "ChainReader", "decode_as", "read_many"]

Spacing = Literal["geometric", "fixed"]


class SnapshotPolicy:
    """Which steps are stored as full snapshots even when a delta would do.

    ``fixed``: every ``every``-th step. Snapshots then hold ever-longer message
    lists, so storage still grows with n²/(2K): a 200-step run with K=25
    stores about 4x its content in snapshots alone.

    ``geometric`` (default): steps K, 4K, 16K, 64K, ... and every
    ``max_chain``-th step. Snapshot bytes then add up to about a third more
    than the final content (linear), while no delta chain gets longer than
    ``max_chain``. (Doubling costs twice the final content, which with the
    deltas breaks the 3x-of-content storage budget on a 200-step run.)
    Step 0 and the first step of a branch are always snapshots.
    """

    FACTOR = 4

    def __init__(self, every: int = 25, spacing: Spacing = "geometric", max_chain: int = 1000) -> None:
        if every < 1 or max_chain < 1:
            raise ValueError(f"snapshot spacing must be >= 1 (got every={every}, max_chain={max_chain})")
        if spacing not in ("geometric", "fixed"):
            raise ValueError(f"snapshot spacing {spacing!r} is not 'geometric' or 'fixed'")
        self.every, self.spacing, self.max_chain = every, spacing, max_chain

    def is_snapshot_step(self, step: int) -> bool:
        if self.spacing == "fixed":
            return step % self.every == 0
        if step % self.max_chain == 0:
            return True
        multiple, rest = divmod(step, self.every)
        if rest or multiple == 0:
            return step == 0
        while multiple % self.FACTOR == 0:
            multiple //= self.FACTOR
        return multiple == 1

    def snapshot_at_or_below(self, step: int) -> int:
        """The highest snapshot step <= ``step`` (a hint for prefetching)."""
        best = step - step % self.every if self.spacing == "fixed" else step - step % self.max_chain
        if self.spacing == "geometric":
            multiple = 1
            while multiple * self.every <= step:
                best = max(best, multiple * self.every)
                multiple *= self.FACTOR
        return best


def decode_as(cid: str, key: str, data: bytes) -> Envelope:
    """Decode ``data`` stored at ``key`` and check that it really is ``cid``."""
    envelope = decode(data, key)
    # Compare the upgraded id: older schema versions spelled ids differently.
    found = migrate(envelope.payload, key).get("checkpoint_id")
    if found != cid:
        raise CorruptCheckpointError(
            f"checkpoint object {key} holds checkpoint {found!r:.80}, not {cid!r}; it was "
            "copied or renamed. Restore the right object or rebuild the run with `rewind mirror RUN`"
        )
    return envelope


async def read_many(
    objects: ObjectStore, keys: list[str], concurrency: int
) -> dict[str, bytes | None]:
    """GET many keys in parallel (bounded); ``None`` for keys that do not exist."""
    gate = asyncio.Semaphore(concurrency)

    async def one(key: str) -> bytes | None:
        async with gate:
            try:
                return await objects.get(key)
            except CheckpointNotFoundError:
                return None

    values = await asyncio.gather(*(one(k) for k in keys))
    return dict(zip(keys, values, strict=True))


class ChainReader:
    """Full, current-version checkpoint documents (plain dicts) by checkpoint id."""

    def __init__(
        self,
        objects: ObjectStore,
        policy: SnapshotPolicy,
        *,
        cache_size: int = 64,
        window: int = 64,
        concurrency: int = 16,
    ) -> None:
        self._objects = objects
        self._policy = policy
        self._cache: LRU[dict[str, Any]] = LRU(cache_size)
        self._window = window
        self._concurrency = concurrency

    # -- cache ----------------------------------------------------------------

    def remember(self, cid: str, doc: dict[str, Any]) -> None:
        """Cache a document. Callers must not mutate it afterwards (it is shared)."""
        self._cache.put(cid, doc)

    def cached(self, cid: str) -> dict[str, Any] | None:
        return self._cache.get(cid)

    async def document(self, cid: str) -> dict[str, Any]:
        """The full document of ``cid``; CheckpointNotFoundError if it was never stored."""
        cached = self.cached(cid)
        if cached is not None:
            return cached
        chain, base = await self._walk(cid)
        doc = base
        for link_id, key, envelope in reversed(chain):
            if envelope.kind == "snapshot":
                doc = migrate(envelope.payload, key)
            else:
                assert doc is not None  # _walk ends at a snapshot or a cached parent
                doc = apply_delta(doc, envelope.payload, key)
            self.remember(link_id, doc)
        assert doc is not None
        return doc

    async def _walk(
        self, cid: str
    ) -> tuple[list[tuple[str, str, Envelope]], dict[str, Any] | None]:
        chain: list[tuple[str, str, Envelope]] = []
        fetched: dict[str, bytes | None] = {}
        current = cid
        while True:
            run_id, branch_id, step = parse_checkpoint_id(current)
            key = step_key(run_id, branch_id, step)
            if key not in fetched and chain:
                fetched.update(await self._prefetch(run_id, branch_id, step))
            data = fetched.pop(key) if key in fetched else await self._get(key)
            if data is None:
                raise self._missing(current, key, chain)
            envelope = decode_as(current, key, data)
            chain.append((current, key, envelope))
            if envelope.kind == "snapshot":
                return chain, None
            parent = envelope.payload["parent_id"]
            if not isinstance(parent, str) or any(parent == link[0] for link in chain):
                raise CorruptCheckpointError(
                    f"checkpoint object {key} is a delta with parent {parent!r:.80}, which does "
                    "not lead back to a snapshot; rebuild the run with `rewind mirror RUN`"
                )
            base = self.cached(parent)
            if base is not None:
                return chain, base
            current = parent

    async def _get(self, key: str) -> bytes | None:
        try:
            return await self._objects.get(key)
        except CheckpointNotFoundError:
            return None

    async def _prefetch(self, run_id: str, branch_id: str, step: int) -> dict[str, bytes | None]:
        low = max(step - self._window + 1, self._policy.snapshot_at_or_below(step), 0)
        keys = [step_key(run_id, branch_id, s) for s in range(low, step + 1)]
        return await read_many(self._objects, keys, self._concurrency)

    def _missing(
        self, cid: str, key: str, chain: list[tuple[str, str, Envelope]]
    ) -> CorruptCheckpointError | CheckpointNotFoundError:
        if not chain:
            return CheckpointNotFoundError(
                f"checkpoint {cid} not found in {self._objects.url} (no object {key}); "
                "list the run's checkpoints with `rewind tree RUN`"
            )
        child_id, child_key, _ = chain[-1]
        return CorruptCheckpointError(
            f"checkpoint object {child_key} ({child_id}) is stored as a delta of {cid}, whose "
            f"object {key} is missing; restore it, or rebuild the run with `rewind mirror RUN`"
        )
