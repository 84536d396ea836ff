"""``CheckpointStore``: AgentCheckpoints by id, stored in linear space.

    runs/<run>/branches/<branch>/steps/<step:08d>.json           (envelope: snapshot | delta; gzip'd JSON)
    runs/<run>/branches/<branch>/invalidations/<after:08d>.json  (rollback markers)
    runs/<run>/branches/<branch>/packs/<first:08d>-<last:08d>.json.gz (copies of finished blocks)

The first checkpoint of a run is a snapshot; every later one is a delta of
its parent, also across branches (the first step of a fork, of a rolled-back
revision), so each message is stored once and storage stays close to the
content. A delta names the chain of objects before it, so ``load`` fetches a
whole chain in one round of parallel GETs after the head (chain.py), and
``save_step`` writes a step from what the step added (a ``StepRecord``'s
parts) plus one small read of its parent, or none when this process wrote
the parent: a step's cost does not grow with the run.

Step objects are gzip'd JSON (``compression="none"``: plain JSON, what
``REWIND_STORE_COMPRESSION=none`` asks for); both forms are read, whichever
this store writes (document/envelope.py).

Objects are immutable. Saving identical content again is a no-op (the mirror
is idempotent, also over objects stored in the other form); saving different
content under an existing id raises ``CheckpointExistsError``. Rolling back
never rewrites a step: an invalidation marker makes every later step of that
branch read as ``status="invalidated"``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import ValidationError

from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.errors import CheckpointError, CheckpointExistsError, CheckpointNotFoundError, CorruptCheckpointError
from workflows.vocabulary.ids import checkpoint_id, parse_checkpoint_id

from checkpoint_bridge.checkpoints.chain import ChainReader, HeadInfo, decode_as, first_round, gc_paused, read_many
from checkpoint_bridge.document.blocks import BlockCall, content_bytes, merge_block
from checkpoint_bridge.document.envelope import (
    COMPRESSIONS,
    Chain,
    Compression,
    Envelope,
    apply_delta,
    chain_after,
    compacted,
    decode,
    delta_payload,
    encode,
    make_delta,
    seal,
)
from checkpoint_bridge.document.layout import (
    ParsedKey,
    branch_prefix,
    invalidation_key,
    invalidation_prefix,
    parse_key,
    run_prefix,
    step_key,
)
from checkpoint_bridge.checkpoints.lru import LRU
from checkpoint_bridge.document.migrations import migrate, validate_document
from checkpoint_bridge.stores import ObjectStore, open_object_store
from checkpoint_bridge.document.packs import (
    BLOCK_STEPS,
    DIGEST_START,
    MAX_PACK_BYTES,
    MAX_PACK_V2_BYTES,
    PACK_STEPS,
    Piece,
    block_of,
    blocks_in,
    encode_pack,
    encode_pack_v2,
    ends_block,
    extend_digest,
    packs_ending_at,
    plan_range,
    superseded_at,
)
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary, StepParts, checkpoint_to_dict

__all__ = ["CheckpointStore", "StepFacts", "open_checkpoint_store", "DEFAULT_STORE_URL"]

DEFAULT_STORE_URL = "file://.rewind/checkpoints"
log = logging.getLogger("rewind.store")
_SUMMARY_FIELDS = tuple(CheckpointSummary.model_fields)


@dataclass(frozen=True)
class StepFacts:
    """One stored step as ``CheckpointStore.step_facts`` reads it: its own fields (ids,
    model, ledger, created_at, status, ...; no messages), the tool records it added."""

    fields: dict[str, Any]
    tool_records: list[dict[str, Any]]
    invalidated: bool


@dataclass(frozen=True)
class _Encoded:
    """A step's object, as ``CheckpointStore._encoded`` makes it."""

    data: bytes
    own_chain: Chain
    """The chain of the step's child: the step's own, with the step."""
    child_digest: str | None
    """The digest the step's child records (None: a chain an older Rewind began)."""
    blocks_sha256: str | None
    """The digest the step itself records (format v3 deltas)."""


# Larger objects are read back when their block is packed: the cache stays small
# (at most its 4,096 entries times this) with many runs mirrored at once.
_REMEMBERED_OBJECT_MAX = 16 * 1024
# The merged blocks kept for the packs of the levels above them: at most this many bytes
# (a level-5 pack holds 256 blocks); a block no longer kept is read from the packs below.
_MERGED_BUDGET = 32 * 1024 * 1024


class CheckpointStore:
    """Save, load, list and invalidate checkpoints on any ``ObjectStore``."""

    def __init__(self, objects: ObjectStore, *, cache_size: int = 64, concurrency: int = 32,
                 compression: Compression = "gzip") -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
        self.objects = objects
        # How step objects are written (document/envelope.py); both forms are always read.
        self.compression: Compression = compression
        self._concurrency = concurrency
        self._chain = ChainReader(objects, cache_size=cache_size, concurrency=concurrency)
        # The bytes of objects this store wrote lately: what a block's merged content (or,
        # for chains an older Rewind began, a v1 pack) is made of.
        self._written: LRU[bytes] = LRU(2 * PACK_STEPS * 64)
        # The merged content (and sha256) of blocks this store merged or read lately, by
        # run:branch:first step: what the packs of the levels above them hold.
        self._merged: LRU[tuple[bytes, str]] = LRU(1 << 20, weigh=lambda v: len(v[0]), budget=_MERGED_BUDGET)
        self._warned_drop = False

    @property
    def url(self) -> str:
        return self.objects.url

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r})"

    async def __aenter__(self) -> CheckpointStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.objects.aclose()

    # -- writing --------------------------------------------------------------

    async def save(self, cp: AgentCheckpoint) -> str:
        """Store ``cp`` and return its key; a no-op if the same checkpoint is already stored.

        A whole document: a delta of its parent when it extends it (the parent is
        read for that), a snapshot otherwise. The mirror writes with ``save_step``.
        """
        # AgentCheckpoint's validator has already checked that the id is run:branch:step.
        key = step_key(cp.run_id, cp.branch_id, cp.step_index)
        doc = checkpoint_to_dict(cp)
        kind, payload, parent_info = "snapshot", doc, None
        if cp.parent_id is not None:
            try:
                parent = await self._chain.document(cp.parent_id)
                parent_info = await self._chain.head_info(cp.parent_id)
            except LookupError:  # CheckpointNotFoundError: mirrored out of order
                parent = None
            delta = make_delta(doc, parent) if parent is not None else None
            if delta is not None:
                kind, payload = "delta", delta
        step = await self._encoded(cp.run_id, cp.branch_id, cp.step_index, key, kind, payload, parent_info)
        try:
            await self.objects.put_if_absent(key, step.data)
            self._remember_bytes(key, step.data)
            otherwise = False
        except CheckpointExistsError as exc:
            existing = await self._chain.document(cp.checkpoint_id)
            if canonical_json(existing) != canonical_json(doc):
                raise self._conflict(cp.checkpoint_id) from exc
            otherwise = True  # stored in other bytes (an older format): what a child needs is read from them
        self._chain.remember(cp.checkpoint_id, doc)
        info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), step.own_chain, step.child_digest)
        await self._after_write(cp.checkpoint_id, step, None if otherwise else info, otherwise=otherwise)
        return key

    async def save_step(self, parts: StepParts) -> bool:
        """Store one step from what it added (the live mirror and ``rewind mirror``);
        True if written, False if the same checkpoint was already there.

        Reads nothing but the parent's object (nothing at all when this store wrote
        the parent; at the end of a block of steps, the block's objects it did not
        write); CheckpointNotFoundError if the parent is not stored yet.
        """
        cid = parts.scalars["checkpoint_id"]
        run_id, branch_id, step = parse_checkpoint_id(cid)
        key = step_key(run_id, branch_id, step)
        parent_id = parts.scalars.get("parent_id")
        if parent_id is None:
            doc = {**parts.scalars, "messages": parts.new_messages, "tool_call_cache": parts.new_tool_records,
                   "agent_variables": parts.agent_variables}
            if parts.system_prompt is not None:
                from workflows.vocabulary.tool_calls import with_system_prompt

                doc["messages"] = with_system_prompt(doc["messages"], parts.system_prompt)
            encoded = await self._encoded(run_id, branch_id, step, key, "snapshot", doc, None)
            counts: tuple[int, int] | None = (len(doc["messages"]), len(doc["tool_call_cache"]))
        else:
            parent = await self._chain.head_info(parent_id)
            payload = delta_payload(
                parts.scalars, base_message_count=parent.message_count, new_messages=parts.new_messages,
                base_tool_count=parent.tool_count, new_tool_records=parts.new_tool_records,
                agent_variables=parts.agent_variables, system_prompt=parts.system_prompt,
            )
            encoded = await self._encoded(run_id, branch_id, step, key, "delta", payload, parent)
            # A new system prompt may add a message: then counted from the document when asked.
            counts = None if parts.system_prompt is not None else (
                parent.message_count + len(parts.new_messages), parent.tool_count + len(parts.new_tool_records))
        otherwise = False
        try:
            written = await self.objects.put_if_absent(key, encoded.data)
        except CheckpointExistsError as exc:
            await self._same_as_stored(cid, key, encoded.data, exc)
            written, otherwise = False, True  # stored in other bytes (an older format): read what a child needs from them
        if not otherwise:  # written, or the same bytes were there: what the next block's merge reads
            self._remember_bytes(key, encoded.data)
        info = HeadInfo(*counts, encoded.own_chain, encoded.child_digest) if counts is not None else None
        await self._after_write(cid, encoded, None if otherwise else info, otherwise=otherwise)
        return written

    async def _encoded(
        self, run_id: str, branch_id: str, step: int, key: str, kind: str, payload: dict[str, Any],
        parent: HeadInfo | None,
    ) -> _Encoded:
        """The object of a step: a snapshot, or a delta of ``parent``; at the end of a block of
        steps, with the block's merged content (the block's other objects read if this store
        did not write them)."""
        if kind == "snapshot":
            data = encode("snapshot", payload, compression=self.compression)
            own_chain: Chain = [(branch_id, step, step)]
            if not ends_block(step):
                return _Encoded(data, own_chain, DIGEST_START, None)
            merged = self._merge(run_id, branch_id, step, [(key, decode(data, key, link=True))])
            return _Encoded(data, own_chain, extend_digest(DIGEST_START, merged[1]), None)
        assert parent is not None
        own_chain = chain_after(parent.child_chain, branch_id, step)
        if parent.child_digest is None:
            # A chain an older Rewind began: continued in its format (and its packs).
            return _Encoded(encode("delta", payload, chain=parent.child_chain, compression=self.compression),
                            own_chain, None, None)
        stored = compacted("delta", payload, parent.child_chain)
        if not ends_block(step):
            return _Encoded(seal(stored, parent.child_digest, compression=self.compression), own_chain,
                            parent.child_digest, parent.child_digest)
        draft = seal(stored, parent.child_digest, compression="none")  # read back below, never stored
        # The block's merged content reads the step as a reader will (the digests aside).
        first = max(step - BLOCK_STEPS + 1, own_chain[-1][1])
        links = await self._links(run_id, branch_id, first, step - 1)
        _data, block_sha = self._merge(run_id, branch_id, first, [*links, (key, decode(draft, key, link=True))])
        data = seal(stored, parent.child_digest, block_sha, compression=self.compression)
        return _Encoded(data, own_chain, extend_digest(parent.child_digest, block_sha), parent.child_digest)

    def _merge(self, run_id: str, branch_id: str, first: int, links: list[tuple[str, Envelope]]) -> tuple[bytes, str]:
        """Merge a finished block and keep its content for the packs that hold it."""
        data, sha = content_bytes(merge_block(run_id, branch_id, first, links))
        self._merged.put(f"{run_id}:{branch_id}:{first}", (data, sha))
        return data, sha

    async def _links(self, run_id: str, branch_id: str, first: int, last: int) -> list[tuple[str, Envelope]]:
        """The objects of steps first..last of a branch, decoded as chain links."""
        keys = [step_key(run_id, branch_id, s) for s in range(first, last + 1)]
        known = await self._written_or_read(keys)
        out = []
        for s, k in zip(range(first, last + 1), keys):
            data = known[k]
            if data is None:
                raise CorruptCheckpointError(
                    f"checkpoint object {k} is missing, but a later step of its branch is stored; restore it, "
                    "or rebuild the run with `rewind mirror RUN`"
                )
            out.append((k, decode_as(checkpoint_id(run_id, branch_id, s), k, data, link=True)))
        return out

    async def _written_or_read(self, keys: list[str]) -> dict[str, bytes | None]:
        """The bytes of objects: those this store wrote lately as it wrote them, the others read."""
        known = {k: self._written.get(k) for k in keys}
        missing = [k for k, v in known.items() if v is None]
        if missing:
            known.update(await read_many(self.objects, missing, self._concurrency))
        return known

    def _remember_bytes(self, key: str, data: bytes) -> None:
        if len(data) <= _REMEMBERED_OBJECT_MAX:
            self._written.put(key, data)

    async def _after_write(self, cid: str, step: _Encoded, info: HeadInfo | None, *, otherwise: bool) -> None:
        """Remember what a child of ``cid`` needs, and write the packs that end at it (those of the
        stored object's format when the step was ``otherwise`` stored already)."""
        run_id, branch_id, index = parse_checkpoint_id(cid)
        if info is not None:
            self._chain.remember_head(cid, info)
        digest = (await self._chain.head_info(cid)).child_digest if otherwise else step.child_digest
        if digest is None:
            await self._pack_v1_if_block_done(run_id, branch_id, index, step.own_chain)
        elif digest == step.child_digest and step.blocks_sha256 is not None:
            await self._pack_if_blocks_done(run_id, branch_id, index, step)

    async def _pack_if_blocks_done(self, run_id: str, branch_id: str, step: int, encoded: _Encoded) -> None:
        """After the last step of a level's block: store the level's pack, then delete the packs
        it holds whole (document/packs.py)."""
        lo = encoded.own_chain[-1][1]
        whole = True
        for piece in packs_ending_at(branch_id, step, lo):
            contents = await self._block_contents(run_id, piece, encoded)
            if sum(map(len, contents)) > MAX_PACK_V2_BYTES:
                whole = False  # huge tool outputs: readers take the packs below, which stay
                continue
            try:
                await self.objects.put_if_absent(piece.key(run_id), encode_pack_v2(run_id, piece, contents))
            except CheckpointExistsError:
                pass  # packed already (the same blocks make the same content)
        if whole:
            await self._drop_packs(run_id, superseded_at(branch_id, step, lo))

    async def _drop_packs(self, run_id: str, pieces: list[Piece]) -> None:
        """Delete packs that a newer pack holds whole. They are copies: a store that refuses
        (no delete permission) or fails keeps them, which costs storage and nothing else."""
        if not pieces:
            return
        results = await asyncio.gather(*(self.objects.delete(p.key(run_id)) for p in pieces), return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if isinstance(failed, CheckpointError):
            if not self._warned_drop:
                self._warned_drop = True
                log.warning("could not delete packs that newer packs hold (%s); they stay, as copies that cost "
                            "storage: allow this store's writers to delete objects under runs/*/branches/*/packs/", failed)
        elif failed is not None:
            raise failed

    async def _block_contents(self, run_id: str, piece: Piece, encoded: _Encoded) -> list[bytes]:
        """The merged content of each block of ``piece``: kept from merging them, or read from
        the level below (checked against the digests the chain records) or from their steps."""
        blocks = blocks_in(piece)
        kept = [self._merged.get(f"{run_id}:{piece.branch_id}:{lo}") for lo, _hi in blocks]
        if all(k is not None for k in kept):
            return [k[0] for k in kept]  # type: ignore[index]
        # All but the last block (this step's own, just merged): from the same level's pack of
        # the blocks before it, when the piece has more than one of the level, and the levels below.
        own_first = blocks[-1][0]
        lower = plan_range(piece.branch_id, piece.first, own_first - 1, piece.level)
        first_key = step_key(run_id, piece.branch_id, piece.first)
        cid = checkpoint_id(run_id, piece.branch_id, piece.last)
        got = await read_many(self.objects, [*first_round(run_id, lower), first_key], self._concurrency)
        found = await self._chain.merged_blocks(run_id, lower, chain_of=cid, first=got)
        data = got[first_key]
        if data is None:
            raise self._chain.missing(checkpoint_id(run_id, piece.branch_id, piece.first), first_key, cid)
        start = decode_as(checkpoint_id(run_id, piece.branch_id, piece.first), first_key, data, link=True)
        found = await self._chain.checked_blocks(
            run_id, lower, found, start.blocks_sha256 if start.kind == "delta" else DIGEST_START,
            encoded.blocks_sha256, where=cid)
        own = self._merged.get(f"{run_id}:{piece.branch_id}:{own_first}")
        assert own is not None  # merged when this step was encoded, a moment ago
        contents = [bytes(found[(piece.branch_id, lo)].data) for lo, _hi in blocks[:-1]]
        for (lo, _hi), data in zip(blocks[:-1], contents):
            self._merged.put(f"{run_id}:{piece.branch_id}:{lo}", (data, found[(piece.branch_id, lo)].sha256))
        return [*contents, own[0]]

    async def _pack_v1_if_block_done(self, run_id: str, branch_id: str, step: int, own_chain: Chain) -> None:
        """A chain an older Rewind began: after the last step of a block of 32, store the
        block's objects as one v1 pack (document/packs.py)."""
        block = block_of(run_id, branch_id, step)
        if step != block.last:
            return
        branch_first = own_chain[-1][1]  # the branch's own range ends the chain
        first = max(block.first, branch_first)
        if first == step:
            return  # one object: nothing to gain
        keys = [step_key(run_id, branch_id, s) for s in range(first, step + 1)]
        known = await self._written_or_read(keys)
        objects = [known[k] for k in keys]
        if any(o is None for o in objects) or sum(len(o) for o in objects if o) > MAX_PACK_BYTES:
            return  # a step is missing (mirrored out of order) or the block is huge: read one by one
        data = encode_pack(block, first, objects)  # type: ignore[arg-type]
        try:
            await self.objects.put_if_absent(block.key, data)
        except CheckpointExistsError:
            pass  # packed already (the same objects make the same bytes)

    async def _same_as_stored(self, cid: str, key: str, data: bytes, exc: CheckpointExistsError) -> None:
        """Other bytes under `cid`: fine if they hold the same checkpoint (an older format,
        or written as a whole document); else the conflict."""
        ours = decode_as(cid, key, data)
        existing = decode_as(cid, key, await self.objects.get(key))
        if existing.kind == ours.kind == "delta" and existing.chain is not None and canonical_json(existing.payload) == canonical_json(ours.payload):
            return
        expected = migrate(ours.payload, key) if ours.kind == "snapshot" else apply_delta(
            await self._chain.document(ours.payload["parent_id"]), ours.payload, key)
        if canonical_json(await self._chain.document(cid)) != canonical_json(expected):
            raise self._conflict(cid) from exc

    def _conflict(self, cid: str) -> CheckpointExistsError:
        return CheckpointExistsError(
            f"checkpoint {cid} already exists in {self.url} with different "
            "content; checkpoints are immutable, so write the new state as a fork on a new "
            "branch (or delete the run first to rebuild it)"
        )

    async def invalidate_after(self, run_id: str, branch_id: str, step_index: int, reason: str) -> str:
        """Mark every step after ``step_index`` on this branch invalidated; returns the marker key."""
        key = invalidation_key(run_id, branch_id, step_index)
        marker = {
            "format": "rewind.invalidation/v1",
            "run_id": run_id,
            "branch_id": branch_id,
            "after_step": step_index,
            "reason": reason,
        }
        try:
            await self.objects.put_if_absent(key, canonical_json(marker).encode("utf-8"))
        except CheckpointExistsError:
            pass  # already invalidated after this step; the first reason stands
        return key


    # -- reading --------------------------------------------------------------

    async def load(self, checkpoint_id_: str) -> AgentCheckpoint:
        """The full checkpoint, with ``status="invalidated"`` if a marker covers it."""
        run_id, branch_id, step = parse_checkpoint_id(checkpoint_id_)
        # The chain and the branch's rollback markers (a short listing of their own) at once; a
        # chain that cannot be read stops the listing (left running, the loop would close it later,
        # half done, as it ends: an S3 client's request then fails as it is torn down).
        listing = asyncio.ensure_future(self._keys(invalidation_prefix(run_id, branch_id)))
        try:
            doc = await self._chain.document(checkpoint_id_)
        except BaseException:
            listing.cancel()
            await asyncio.gather(listing, return_exceptions=True)
            raise
        markers = await listing
        # A fresh copy: callers may mutate what they get without touching the cache.
        with gc_paused():
            cp = validate_document(_fresh(doc), checkpoint_id_)
        cutoff = _cutoff(markers, branch_id)
        if cutoff is not None and step > cutoff:
            cp.status = "invalidated"
        return cp

    async def document(self, checkpoint_id_: str, *, branch_ends: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The checkpoint's full document as plain JSON, migrated but not validated and
        without rollback markers applied: shared with the store's cache, never mutate it.

        For readers of a whole run (the viewer): a document shares the message dicts
        of its parent's, so reading a run in step order costs one object and one list
        of references per step, where ``load`` would copy and validate every whole
        conversation again (quadratic in the run's length). Validate what you use
        (``migrations.validate_document``) and take the status from ``list_checkpoints``.

        ``branch_ends``: each branch's newest stored step, from a listing the caller made
        (``stored_steps``): an older checkpoint then reads the packs that hold its blocks now,
        in one round (document/packs.py, ``plan_read``).
        """
        parse_checkpoint_id(checkpoint_id_)
        return await self._chain.document(checkpoint_id_, branch_ends)

    async def load_latest(self, run_id: str, branch_id: str = "main") -> AgentCheckpoint | None:
        """The highest step of the branch that is not invalidated, or None."""
        step = await self._head_step(run_id, branch_id)
        return None if step is None else await self.load(checkpoint_id(run_id, branch_id, step))

    async def list_checkpoints(self, run_id: str, *, ignoring_rollback_to: int | None = None) -> list[CheckpointSummary]:
        """Every checkpoint of the run: branches in creation order, then by step.

        `ignoring_rollback_to`: as if the rollback markers written after that step had not
        been (the run as it was before a rollback to that step, which `rollback` resumes)."""
        parsed = await self._keys(run_prefix(run_id))
        if ignoring_rollback_to is not None:
            parsed = [p for p in parsed if not (p.kind == "invalidation" and p.step_index == ignoring_rollback_to)]
        order = _branch_order(parsed)
        steps = sorted(
            (p for p in parsed if p.kind == "step"),
            key=lambda p: (order.index(p.branch_id), p.step_index),
        )
        cutoffs = {b: _cutoff(parsed, b) for b in order}
        return await self._summaries(steps, cutoffs)

    async def run_ids(self) -> list[str]:
        """Every run with a checkpoint in the store, sorted (one listing of the whole store)."""
        return sorted({p.run_id for p in map(parse_key, await self.objects.list("runs/")) if p is not None})

    async def step_facts(self, run_id: str) -> list[StepFacts]:
        """What each stored step of the run says of itself without its messages (model,
        ledger, tool calls it added, times), every branch, in ``list_checkpoints`` order:
        one read per step object, no chain replayed (statistics over many runs)."""
        parsed = await self._keys(run_prefix(run_id))
        order = _branch_order(parsed)
        steps = sorted((p for p in parsed if p.kind == "step"), key=lambda p: (order.index(p.branch_id), p.step_index))
        cutoffs = {b: _cutoff(parsed, b) for b in order}
        tool_counts: dict[str, int] = {}
        out = []
        for p, fields, invalidated in await self._step_fields(steps, cutoffs):
            cid = checkpoint_id(p.run_id, p.branch_id, p.step_index)
            if "new_tool_records" in fields:  # a delta: the calls of this step
                own = list(fields["new_tool_records"])
                tool_counts[cid] = int(fields.get("base_tool_count", 0)) + len(own)
            else:  # a whole document: the calls after its parent's
                records = list(fields.get("tool_call_cache") or [])
                own = records[tool_counts.get(fields.get("parent_id") or "", 0):]
                tool_counts[cid] = len(records)
            out.append(StepFacts(fields=fields, tool_records=own, invalidated=invalidated))
        return out

    async def branch_steps(self, run_id: str, branch_id: str, after_step: int = -1) -> list[StepParts]:
        """What each stored step of one branch after `after_step` added (its fields, new messages,
        new tool records), in step order, up to a rollback's cutoff: one read per step object, plus
        one of a snapshot's parent to tell its own messages from its line's (a run's event stream,
        checkpoint_bridge/events/replay.py, is derived from these)."""
        parsed = await self._keys(branch_prefix(run_id, branch_id))
        cutoff = _cutoff(parsed, branch_id)
        steps = sorted(p.step_index for p in parsed if p.kind == "step" and p.branch_id == branch_id
                       and p.step_index > after_step and (cutoff is None or p.step_index <= cutoff))
        keys = [step_key(run_id, branch_id, step) for step in steps]
        found = await read_many(self.objects, keys, self._concurrency)
        out: list[StepParts] = []
        counts: tuple[int, int] | None = None  # the messages and tool records of the line so far
        for step, key in zip(steps, keys, strict=True):
            data = found[key]
            if data is None:
                break  # deleted between listing and reading (erased): what came before is whole
            cid = checkpoint_id(run_id, branch_id, step)
            envelope = decode_as(cid, key, data)
            payload = envelope.payload
            fields = migrate({k: v for k, v in payload.items()
                              if k not in ("messages", "new_messages", "tool_call_cache", "new_tool_records")}, key)
            if envelope.kind == "delta":
                messages, records = list(payload.get("new_messages") or []), list(payload.get("new_tool_records") or [])
                counts = (int(payload.get("base_message_count", 0)) + len(messages),
                          int(payload.get("base_tool_count", 0)) + len(records))
            else:
                whole, tools = list(payload.get("messages") or []), list(payload.get("tool_call_cache") or [])
                if counts is None and fields.get("parent_id"):
                    counts = await self._line_counts(str(fields["parent_id"]))
                before = counts or (0, 0)
                messages, records = whole[before[0]:], tools[before[1]:]
                counts = (len(whole), len(tools))
            variables = fields.pop("agent_variables", {}) or {}
            out.append(StepParts(fields, messages, records, variables))
        return out

    async def _line_counts(self, checkpoint_id_: str) -> tuple[int, int]:
        """How many messages and tool records the line holds at a checkpoint (from its object)."""
        end = (await self.step_ends([checkpoint_id_]))[0]
        fields = end.fields
        if end.own:
            return int(fields.get("base_message_count", 0)) + end.messages, int(fields.get("base_tool_count", 0)) + end.tool_records
        return end.messages, end.tool_records

    async def step_ends(self, checkpoint_ids: list[str]) -> list[StepEnd]:
        """What each step object says of its own step, in the order given: its fields but its
        lists, the last message and the last tool record it holds (a step's own for a delta;
        for a snapshot, the last of the whole line, which is its step's too when the step
        added any). One read per step, no chain replayed: a pipeline's record (the calls a
        fork answers again) is read from the steps of its lineage this way."""
        points = [parse_checkpoint_id(cid) for cid in checkpoint_ids]
        keys = [step_key(run, branch, step) for run, branch, step in points]
        found = await read_many(self.objects, keys, self._concurrency)
        out = []
        for cid, key in zip(checkpoint_ids, keys, strict=True):
            data = found[key]
            if data is None:
                raise CheckpointNotFoundError(f"checkpoint {cid} ({key}) is not in {self.url}; rebuild the run "
                                              "with `rewind mirror RUN`")
            envelope = decode_as(cid, key, data)
            payload = envelope.payload
            messages = payload.get("new_messages" if envelope.kind == "delta" else "messages") or []
            records = payload.get("new_tool_records" if envelope.kind == "delta" else "tool_call_cache") or []
            fields = migrate({k: v for k, v in payload.items()
                              if k not in ("messages", "new_messages", "tool_call_cache", "new_tool_records")}, key)
            out.append(StepEnd(fields, messages[-1] if messages else None, records[-1] if records else None,
                               len(messages), len(records), envelope.kind == "delta", tuple(records)))
        return out

    async def recorded_calls(self, checkpoint_id: str) -> list[BlockCall]:
        """The pipeline calls of ``checkpoint_id``'s lineage (itself included), in order, with
        the last message and the tool records of each: what a fork of a pipeline answers again
        from the record. Read as a load of the checkpoint reads its chain (a few packs and the
        steps after the last finished block), or, for a chain an older Rewind began, one read
        per step of the lineage."""
        calls = await self._chain.recorded_calls(checkpoint_id)
        if calls is None:
            calls = [BlockCall(step=int(end.fields["step_index"]), call=end.fields["pipeline"],
                               last_message=end.last_message, last_tool_record=end.last_tool_record,
                               records=end.records)
                     for end in await self._lineage_ends(checkpoint_id) if isinstance(end.fields.get("pipeline"), dict)]
        return calls

    async def _lineage_ends(self, cid: str) -> list[StepEnd]:
        """The step objects of ``cid``'s lineage, step 0 first. The common case, a branch that
        holds every step from 0 to ``cid`` itself, is one listing and one read per step; a lineage
        through other branches (a fork of a fork, a rollback's revision) walks parent links over
        the run's listed checkpoints."""
        run_id, branch_id, step = parse_checkpoint_id(cid)
        stored = await self.stored_steps(run_id)
        own, cutoff = stored.get(branch_id, (set(), None))
        if set(range(step + 1)) <= own and (cutoff is None or step <= cutoff):
            ends = await self.step_ends([checkpoint_id(run_id, branch_id, s) for s in range(step + 1)])
            if all(e.fields.get("parent_id") == (checkpoint_id(run_id, branch_id, i - 1) if i else None)
                   for i, e in enumerate(ends)):
                return ends
        summaries = {s.checkpoint_id: s for s in await self.list_checkpoints(run_id)}
        line = []
        at: str | None = cid
        while at is not None:
            summary = summaries.get(at)
            if summary is None:
                raise CheckpointNotFoundError(f"checkpoint {at} of run {run_id!r}'s lineage is not in {self.url}; "
                                              f"rebuild it with `rewind mirror {run_id}`")
            line.append(summary.checkpoint_id)
            at = summary.parent_id
        return await self.step_ends(list(reversed(line)))

    async def stored_steps(self, run_id: str) -> dict[str, tuple[set[int], int | None]]:
        """Each branch's stored step indices and its invalidation cutoff (the lowest
        ``after_step`` of its markers, or None), branches in creation order: one listing,
        no reads."""
        parsed = await self._keys(run_prefix(run_id))
        return {b: ({p.step_index for p in parsed if p.kind == "step" and p.branch_id == b}, _cutoff(parsed, b))
                for b in _branch_order(parsed)}

    async def stored_runs(self) -> dict[str, dict[str, tuple[set[int], int | None]]]:
        """``stored_steps`` of every run in the store, from one listing of the whole store
        (a list of many runs reads no run's objects to find their heads)."""
        by_run: dict[str, list[ParsedKey]] = {}
        for p in await self._keys("runs/"):
            by_run.setdefault(p.run_id, []).append(p)
        return {run_id: {b: ({p.step_index for p in parsed if p.kind == "step" and p.branch_id == b}, _cutoff(parsed, b))
                         for b in _branch_order(parsed)}
                for run_id, parsed in sorted(by_run.items())}

    async def summary_of(self, run_id: str, branch_id: str, step: int, cutoff: int | None) -> CheckpointSummary | None:
        """The summary of one stored step (one read; `cutoff` as ``stored_steps`` gives it),
        or None if it is not stored."""
        found = await self._summaries([ParsedKey("step", run_id, branch_id, step)], {branch_id: cutoff})
        return found[0] if found else None

    async def branches(self, run_id: str) -> list[str]:
        """Branch ids of the run, in creation order (by first step; "main" first on ties)."""
        return _branch_order(await self._keys(run_prefix(run_id)))

    async def existing_steps(self, run_id: str, branch_id: str) -> set[int]:
        """Step indices stored on the branch, invalidated or not."""
        parsed = await self._keys(branch_prefix(run_id, branch_id))
        return {p.step_index for p in parsed if p.kind == "step"}

    async def export(self, checkpoint_id_: str) -> bytes:
        """A standalone, pretty-printed JSON document of the full checkpoint."""
        cp = await self.load(checkpoint_id_)
        text = json.dumps(checkpoint_to_dict(cp), indent=2, sort_keys=True, ensure_ascii=False)
        return (text + "\n").encode("utf-8")

    async def raw_objects(self, run_id: str) -> dict[str, bytes]:
        """Every stored object of the run, by key, exactly as stored."""
        keys = await self.objects.list(run_prefix(run_id))
        found = await read_many(self.objects, keys, self._concurrency)
        return {k: v for k, v in found.items() if v is not None}


    # -- helpers --------------------------------------------------------------

    async def _keys(self, prefix: str) -> list[ParsedKey]:
        # Keys that do not follow the layout (foreign files) are ignored, not fatal.
        return [p for p in map(parse_key, await self.objects.list(prefix)) if p is not None]

    async def _head_step(self, run_id: str, branch_id: str) -> int | None:
        parsed = await self._keys(branch_prefix(run_id, branch_id))
        cutoff = _cutoff(parsed, branch_id)
        valid = [
            p.step_index for p in parsed
            if p.kind == "step" and (cutoff is None or p.step_index <= cutoff)
        ]
        return max(valid, default=None)

    async def _step_fields(
        self, steps: list[ParsedKey], cutoffs: dict[str, int | None]
    ) -> list[tuple[ParsedKey, dict[str, Any], bool]]:
        """(key, the step object's own fields but its messages, invalidated) of each step, in order."""
        keys = [step_key(p.run_id, p.branch_id, p.step_index) for p in steps]
        found = await read_many(self.objects, keys, self._concurrency)
        out = []
        for p, key in zip(steps, keys, strict=True):
            data = found[key]
            if data is None:
                continue  # deleted between listing and reading
            cid = checkpoint_id(p.run_id, p.branch_id, p.step_index)
            payload = decode_as(cid, key, data).payload
            fields = migrate({k: v for k, v in payload.items() if k not in ("messages", "new_messages")}, key)
            cutoff = cutoffs.get(p.branch_id)
            out.append((p, fields, cutoff is not None and p.step_index > cutoff))
        return out

    async def _summaries(
        self, steps: list[ParsedKey], cutoffs: dict[str, int | None]
    ) -> list[CheckpointSummary]:
        out = []
        for p, fields, invalidated in await self._step_fields(steps, cutoffs):
            try:
                summary = CheckpointSummary.model_validate({f: fields.get(f) for f in _SUMMARY_FIELDS})
            except ValidationError as exc:
                raise CorruptCheckpointError(
                    f"checkpoint object {step_key(p.run_id, p.branch_id, p.step_index)} has invalid summary "
                    f"fields ({exc.errors()[0]['msg']}); rebuild the run with `rewind mirror RUN`"
                ) from exc
            out.append(summary.model_copy(update={"status": "invalidated"}) if invalidated else summary)
        return out


@dataclass(frozen=True)
class StepEnd:
    """One step object's own fields and the last message and tool record it holds
    (``CheckpointStore.step_ends``); ``own`` is true for a delta, whose lists are the step's."""

    fields: dict[str, Any]
    last_message: dict[str, Any] | None
    last_tool_record: dict[str, Any] | None
    messages: int
    tool_records: int
    own: bool
    # The tool records the object holds (a delta: the step's own; a snapshot: the line's, the
    # step's last): a graph's super-step answers every call it made from them.
    records: tuple[dict[str, Any], ...] = ()


def _fresh(value: Any) -> Any:
    """A copy of a JSON tree: new dicts and lists, the same (immutable) strings and numbers.

    Leaves are not passed through a call of their own (most of a conversation's values
    are strings): a 2,000-step document copies in a third of the time."""
    kind = type(value)
    if kind is dict:
        out = {}
        for key, item in value.items():
            inner = type(item)
            out[key] = _fresh(item) if inner is dict or inner is list else item
        return out
    if kind is list:
        return [_fresh(item) if type(item) is dict or type(item) is list else item for item in value]
    return value


def _cutoff(parsed: list[ParsedKey], branch_id: str) -> int | None:
    """The lowest ``after_step`` of the branch's invalidation markers, if any."""
    marks = [p.step_index for p in parsed if p.kind == "invalidation" and p.branch_id == branch_id]
    return min(marks, default=None)


def _branch_order(parsed: list[ParsedKey]) -> list[str]:
    # A fork's first step is one past its fork point, so the first step of a
    # branch orders branches by when they were created, without any reads.
    first: dict[str, int] = {}
    for p in parsed:
        if p.kind == "step":
            first[p.branch_id] = min(first.get(p.branch_id, p.step_index), p.step_index)
    return sorted(first, key=lambda b: (first[b], b != "main", b))


def open_checkpoint_store(
    url: str = DEFAULT_STORE_URL, *, endpoint_url: str | None = None, region_name: str | None = None, **options: Any,
) -> CheckpointStore:
    """A ``CheckpointStore`` on ``url`` (a local folder or ``s3://bucket/prefix``; S3
    through ``endpoint_url`` when it is not AWS itself).

    Use as ``async with open_checkpoint_store(url) as store: ...`` to close connections.
    """
    return CheckpointStore(open_object_store(url, endpoint_url=endpoint_url, region_name=region_name), **options)

