"""Rebuilding full checkpoint documents from a root snapshot and its deltas.

A delta names, in its `chain`, every object between the run's root snapshot
and its parent. ``ChainReader`` reads the head, then fetches the whole chain
at once and replays it forward: a checkpoint at any step loads in two
sequential rounds of requests, however long the run.

A format v3 head (document/packs.py) takes the chain's finished blocks of
steps from packs of merged content (one per level below the top, five levels),
and only the few steps after the last finished block from their objects: a
checkpoint 500 or 2,000 steps deep is its head and 4 packs. The blocks' hashes,
chained, must give the digest the head records. A pack's writer deletes the
packs it holds whole, so a checkpoint older than its branch's newest packs
finds its blocks in a newer pack: a cold read lists its branch's packs as it
reads the head (with, on ``main``, the objects that are there whatever the
listing shows), then reads the packs the listing shows: two rounds, whatever
the checkpoint's age, and nothing asked for that is not there. A caller that
listed the run already (a fork) gives each branch's end instead (``ends``):
one round on ``main``. A pack that is missing or damaged is replaced by
another that holds its blocks (a second listing finds those a writer packed
meanwhile), and blocks no pack holds intact, or that do not add up, are read
from their step objects.

Format v2 heads (chains an older Rewind began) read finished blocks of 32
steps from v1 packs of the step objects' exact bytes, the rest one by one.
Objects of format v1 name only their parent; those chains are walked back to
their snapshot, the steps below fetched in parallel windows (their keys are
predictable: a delta's parent is normally the previous step of the branch).

Writers ask ``head_info`` for what a child of a checkpoint needs (its
message and tool-record counts, the chain it extends and that chain's
digest), which costs one small GET, or nothing when this process wrote the
parent.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from workflows.vocabulary.errors import CheckpointNotFoundError, CorruptCheckpointError
from workflows.vocabulary.ids import checkpoint_id, parse_checkpoint_id

from checkpoint_bridge.document.blocks import BlockCall, Replay, block_calls, content_bytes, merge_block, parse_block
from checkpoint_bridge.document.envelope import Chain, Envelope, apply_delta, chain_after, decode
from checkpoint_bridge.document.layout import pack_key, pack_prefix, step_key
from checkpoint_bridge.checkpoints.lru import LRU
from checkpoint_bridge.document.migrations import migrate
from checkpoint_bridge.stores import ObjectStore
from checkpoint_bridge.document.packs import (
    DIGEST_START,
    Block,
    Piece,
    block_of,
    blocks_in,
    decode_pack,
    decode_pack_v2,
    ends_block,
    extend_digest,
    PACK_LEVELS,
    cover,
    holders,
    listed_packs,
    plan,
    plan_read,
)

__all__ = ["ChainReader", "HeadInfo", "Merged", "decode_as", "read_many", "chain_ids", "first_round", "gc_paused"]

log = logging.getLogger("rewind.store")


@dataclass(frozen=True)
class HeadInfo:
    """What the writer of a checkpoint's child needs to know about the checkpoint."""

    message_count: int
    tool_count: int
    child_chain: Chain
    """The chain of a child of this checkpoint: everything up to and including it."""
    child_digest: str | None = None
    """The digest of the finished blocks in ``child_chain`` (document/packs.py); None for a
    chain an older Rewind began, whose objects have none."""


@dataclass(frozen=True)
class Merged:
    """A finished block of a chain, merged (document/blocks.py)."""

    content: dict[str, Any]
    sha256: str
    data: bytes | memoryview
    """Its canonical bytes (from a pack: a view of the pack's bytes)."""
    from_pack: bool


def decode_as(cid: str, key: str, data: bytes, *, link: bool = False) -> Envelope:
    """Decode ``data`` stored at ``key`` and check that it really is ``cid``
    (``link``: as a middle link of a chain, see ``envelope.decode``)."""
    envelope = decode(data, key, link=link)
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


def child_digest(envelope: Envelope, key: str, cid: str) -> str | None:
    """The digest a child of ``cid`` records: its own chain's, plus its own block if it
    finishes one; None for the objects of a chain an older Rewind began."""
    run_id, branch_id, step = parse_checkpoint_id(cid)
    if envelope.kind == "snapshot":
        if not ends_block(step):
            return DIGEST_START
        # A snapshot that finishes a block is that whole block (it starts its chain).
        return extend_digest(DIGEST_START, content_bytes(merge_block(run_id, branch_id, step, [(key, envelope)]))[1])
    if envelope.blocks_sha256 is None:
        return None
    if not ends_block(step):
        return envelope.blocks_sha256
    if envelope.block_sha256 is None:
        raise CorruptCheckpointError(
            f"checkpoint object {key} finishes a block of steps but does not record its block_sha256; "
            "rebuild the run with `rewind mirror RUN`"
        )
    return extend_digest(envelope.blocks_sha256, envelope.block_sha256)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector paused while a checkpoint's document is built (synchronous
    code, no await inside). Parsing and replaying a long chain makes some hundred thousand
    dicts and lists, all of them acyclic JSON the collector cannot free, and each of its
    passes goes through them again: ~15% of a 2,000-step cold load. Left as it was found
    (an application that disabled it keeps it disabled)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def first_round(run_id: str, pieces: Sequence[Piece]) -> list[str]:
    """What reading a chain's pieces asks for first: the packs of its finished blocks (a block
    of one step: its object) and the objects of the steps after them."""
    return [p.key(run_id) if p.first < p.last else step_key(run_id, p.branch_id, p.first) for p in pieces]


def first_reads(run_id: str, pieces: Sequence[Piece]) -> list[str]:
    """``first_round``, and for a long chain (packs of 64 steps and more) the top-level packs that
    hold its blocks once their branch went past them (``holders``): a checkpoint older than its
    branch's newest packs, whose own packs are gone, then loads in the same round, for one GET
    more that finds nothing when the branch has not got that far. (A short chain's blocks are
    found with a listing instead: one more round, of little data.)"""
    tops = [pack_key(run_id, p.branch_id, *holders(p)[-1]) for p in pieces if p.level >= 3 and p.level < PACK_LEVELS]
    return list(dict.fromkeys(first_round(run_id, pieces) + tops))


def chain_ids(run_id: str, chain: Chain) -> list[str]:
    """The checkpoint ids a chain names, root first."""
    ids: list[str] = []
    for branch, lo, hi in chain:
        # Each range's ends checked once (as checkpoint_id would check every step): a
        # chain names every step from the root, so per-step checks were quadratic in
        # the run's length for a reader walking a whole run.
        steps = range(lo, hi + 1)
        if steps:
            checkpoint_id(run_id, branch, lo)
            checkpoint_id(run_id, branch, hi)
        ids += [f"{run_id}:{branch}:{step}" for step in steps]
    return ids


def _ranges(ids: list[str]) -> Chain:
    chain: Chain = []
    for cid in ids:
        _run, branch, step = parse_checkpoint_id(cid)
        chain = chain_after(chain, branch, step)
    return chain


class _Search:
    """Where one read looks for the packs that hold blocks whose expected pack is gone, a
    branch at a time: a listing of the branch's packs, then a second one (a writer may have
    packed further and deleted what the first one named); after that, nowhere."""

    def __init__(self, objects: ObjectStore, run_id: str) -> None:
        self._objects = objects
        self._run_id = run_id
        self._listings: dict[str, int] = {}
        self._listed: dict[str, list[tuple[int, int]]] = {}

    def shown(self, branch_id: str, fetched: dict[str, bytes | None], failed: set[str]) -> list[tuple[int, int]]:
        """The branch's packs known to exist: read so far, or listed."""
        prefix = pack_prefix(self._run_id, branch_id)
        read = [k for k, v in fetched.items() if v is not None and k.startswith(prefix)]
        return [b for b in dict.fromkeys(listed_packs(read) + self._listed.get(branch_id, []))
                if pack_key(self._run_id, branch_id, *b) not in failed]

    async def relist(self, branch_id: str) -> bool:
        """List the branch's packs (again); False when it was listed twice already."""
        done = self._listings.get(branch_id, 0)
        if done >= 2:
            return False
        self._listings[branch_id] = done + 1
        self._listed[branch_id] = listed_packs(await self._objects.list(pack_prefix(self._run_id, branch_id)))
        return True


class ChainReader:
    """Full, current-version checkpoint documents (plain dicts) by checkpoint id."""

    def __init__(
        self,
        objects: ObjectStore,
        *,
        cache_size: int = 64,
        window: int = 64,
        concurrency: int = 32,
    ) -> None:
        self._objects = objects
        self._cache: LRU[dict[str, Any]] = LRU(cache_size)
        self._heads: LRU[HeadInfo] = LRU(4096)
        self._window = window
        self._concurrency = concurrency

    # -- caches ---------------------------------------------------------------

    def remember(self, cid: str, doc: dict[str, Any]) -> None:
        """Cache a document. Callers must not mutate it afterwards (it is shared)."""
        self._cache.put(cid, doc)

    def cached(self, cid: str) -> dict[str, Any] | None:
        return self._cache.get(cid)

    def remember_head(self, cid: str, info: HeadInfo) -> None:
        self._heads.put(cid, info)

    # -- reading --------------------------------------------------------------

    async def document(self, cid: str, ends: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The full document of ``cid`` (cached, shared: never mutate it);
        CheckpointNotFoundError if it was never stored. ``ends``: the newest stored step of
        branches of its chain, when the caller listed the run (``packs.plan_read``)."""
        cached = self.cached(cid)
        if cached is not None:
            return cached
        run_id, branch_id, step = parse_checkpoint_id(cid)
        # A read that cannot start from a cached parent lists its branch's packs as it reads the
        # head: a writer deletes the packs that newer ones hold whole, so the packs an older
        # checkpoint had are mostly gone, and the listing says which hold its blocks now (those
        # of the newest checkpoint too): the packs are then one round, with nothing asked for
        # that is not there. (The caller's ``ends`` say the same.)
        cold = step > 0 and self.cached(checkpoint_id(run_id, branch_id, step - 1)) is None
        listing = asyncio.ensure_future(self._listed(run_id, branch_id)) if cold and not ends else None
        # Step N of "main" (a run's own line) is, but for a rare snapshot in the middle, a delta
        # whose chain is main's steps 0..N-1: what of it is read whatever the listing shows (all
        # of it when the caller's ``ends`` told the rest) is asked for with the head, and used if
        # the head's chain is that. (On other branches the chain's start is unknown until the
        # head is read.)
        guess: Chain | None = [("main", 0, step - 1)] if branch_id == "main" and cold else None
        early = None
        if guess is not None:
            early = asyncio.ensure_future(self._first_round(run_id, guess, branch_id, step, ends, listing is not None))
        try:
            key, envelope = await self._head(cid)
            if envelope.kind == "snapshot":
                doc = migrate(envelope.payload, key)
            elif envelope.chain is not None:
                parent = self._checked_parent(cid, key, envelope)
                doc = self.cached(parent)
                if doc is not None:
                    doc = apply_delta(doc, envelope.payload, key)
                elif envelope.blocks_sha256 is not None:
                    first = await early if early is not None and envelope.chain == guess else None
                    listed = await listing if listing is not None else None
                    doc = await self._replay_blocks(cid, key, envelope, first, ends, listed)
                else:
                    doc = await self._replay(cid, key, envelope)
            else:
                doc, _ = await self._walk_v1(cid, key, envelope)
        finally:
            for pending in (early, listing):
                if pending is not None:
                    pending.cancel()  # a wrong guess, a cached parent: what is not read yet is not needed
                    await asyncio.gather(pending, return_exceptions=True)
        self.remember(cid, doc)
        return doc

    async def _listed(self, run_id: str, branch_id: str) -> dict[str, list[tuple[int, int]]]:
        """The key bounds of a branch's packs, as ``plan_read``'s ``listed``."""
        return {branch_id: listed_packs(await self._objects.list(pack_prefix(run_id, branch_id)))}

    async def _first_round(
        self, run_id: str, chain: Chain, branch_id: str, step: int, ends: Mapping[str, int] | None, listing: bool,
    ) -> dict[str, bytes | None]:
        """What reading ``chain`` (of step ``step`` of ``branch_id``) asks for first. With the
        branch's packs being listed, only the objects that are there whatever the listing shows
        (the top level's packs, which no pack replaces, and the step objects after the last
        finished block): the rest is planned from the listing."""
        if listing:  # the plain plan's: a block end's own packs (``plan_read``) may be gone already
            keys = first_round(run_id, [p for p in plan(chain) if p.level in (0, PACK_LEVELS)])
        else:
            keys = first_reads(run_id, plan_read(chain, branch_id, step, ends))
        return await read_many(self._objects, keys, max(self._concurrency - 1, 1))  # one left for the head

    async def head_info(self, cid: str) -> HeadInfo:
        """Counts, chain and digest of `cid` for writing its child: cached, one GET, or (for a
        format-v1 object, or a fork's first step that changed the system prompt) the document."""
        info = self._heads.get(cid)
        if info is not None:
            return info
        key, envelope = await self._head(cid)
        _run, branch, step = parse_checkpoint_id(cid)
        payload = envelope.payload
        digest = child_digest(envelope, key, cid)
        if envelope.kind == "snapshot":
            info = HeadInfo(len(payload["messages"]), len(payload["tool_call_cache"]), [(branch, step, step)], digest)
        elif envelope.chain is not None and payload.get("system_prompt") is None:
            info = HeadInfo(
                payload["base_message_count"] + len(payload["new_messages"]),
                payload["base_tool_count"] + len(payload["new_tool_records"]),
                chain_after(envelope.chain, branch, step), digest,
            )
        elif envelope.chain is not None:
            doc = await self.document(cid)
            info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]),
                            chain_after(envelope.chain, branch, step), digest)
        else:
            # Format v1: the whole walk (not from a cached document) tells the chain.
            doc, ids = await self._walk_v1(cid, key, envelope, use_cache=False)
            self.remember(cid, doc)
            info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), _ranges(ids))
        self.remember_head(cid, info)
        return info

    async def recorded_calls(self, cid: str) -> list[BlockCall] | None:
        """The pipeline calls of ``cid``'s chain and of ``cid`` itself, in order: what a fork of a
        pipeline answers again from the record. A v3 chain reads them as a load of ``cid`` reads
        its document, from the packs of its finished blocks (whose merged content lists the
        calls in them) and the objects of the steps after them: a few reads, not one per call.
        A block packed by a Rewind that did not list calls is read from its step objects (one
        more round). None for a chain an older Rewind began: the caller reads its steps."""
        run_id, branch, step = parse_checkpoint_id(cid)
        listing = asyncio.ensure_future(self._listed(run_id, branch))  # as a cold load of ``cid`` lists
        try:
            key, head = await self._head(cid)
            if head.kind == "snapshot":
                return _object_calls(head, step)
            if head.chain is None or head.blocks_sha256 is None:
                return None
            self._checked_parent(cid, key, head)
            listed = await listing
        finally:
            listing.cancel()
            await asyncio.gather(listing, return_exceptions=True)
        pieces, first, blocks = await self._chain_blocks(cid, head, listed=listed)
        unlisted = [(p.branch_id, lo, hi) for p in pieces if p.level for lo, hi in blocks_in(p)
                    if blocks[(p.branch_id, lo)].from_pack and "calls" not in blocks[(p.branch_id, lo)].content]
        wanted = [step_key(run_id, b, s) for b, lo, hi in unlisted for s in range(lo, hi + 1)]
        got = {**first, **(await read_many(self._objects, wanted, self._concurrency) if wanted else {})}
        calls: list[BlockCall] = []
        for piece in pieces:
            parts = [(piece.branch_id, lo, hi) for lo, hi in blocks_in(piece)] if piece.level else [
                (piece.branch_id, piece.first, piece.first)]
            for branch_id, lo, hi in parts:
                merged = blocks.get((branch_id, lo)) if piece.level else None
                if merged is not None and (not merged.from_pack or "calls" in merged.content):
                    calls += block_calls(merged.content, pack_key(run_id, branch_id, lo, hi))
                    continue
                for s in range(lo, hi + 1):
                    link, link_key = checkpoint_id(run_id, branch_id, s), step_key(run_id, branch_id, s)
                    data = got.get(link_key)
                    if data is None:
                        raise self.missing(link, link_key, cid)
                    calls += _object_calls(decode_as(link, link_key, data, link=True), s)
        return calls + _object_calls(head, step)

    @staticmethod
    def _checked_parent(cid: str, key: str, head: Envelope) -> str:
        """The parent a delta names, which must be where its chain ends."""
        assert head.chain is not None
        last = head.chain[-1] if head.chain else None
        parent = head.payload.get("parent_id")
        expected = f"{parse_checkpoint_id(cid)[0]}:{last[0]}:{last[2]}" if last else None
        if expected is None or parent != expected:
            raise CorruptCheckpointError(
                f"checkpoint object {key} is a delta of {parent!r:.80}, but its chain "
                f"ends at {expected or 'nothing'!r}; rebuild the run with `rewind mirror RUN`"
            )
        return parent

    async def _chain_blocks(
        self, cid: str, head: Envelope, first: dict[str, bytes | None] | None = None,
        ends: Mapping[str, int] | None = None, listed: Mapping[str, list[tuple[int, int]]] | None = None,
    ) -> tuple[list[Piece], dict[str, bytes | None], dict[tuple[str, int], Merged]]:
        """A v3 delta's chain as pieces, its first round's objects (``first``: what of it was read
        with the head already; the rest is read here) and its finished blocks, checked against
        the head's digest."""
        run_id, branch, step = parse_checkpoint_id(cid)
        assert head.chain is not None and head.blocks_sha256 is not None
        pieces = plan_read(head.chain, branch, step, ends, listed)
        first = dict(first or {})
        # With a listing, a pack it did not show is not looked for further up (``first_reads``'
        # top-level packs): it would have shown those too.
        rest = [k for k in (first_round if listed else first_reads)(run_id, pieces) if k not in first]
        if rest:
            first.update(await read_many(self._objects, rest, self._concurrency))
        blocks = await self.merged_blocks(run_id, [p for p in pieces if p.level], chain_of=cid, first=first)
        blocks = await self.checked_blocks(run_id, pieces, blocks, DIGEST_START, head.blocks_sha256, where=cid)
        return pieces, first, blocks

    async def _replay_blocks(
        self, cid: str, key: str, head: Envelope, first: dict[str, bytes | None] | None = None,
        ends: Mapping[str, int] | None = None, listed: Mapping[str, list[tuple[int, int]]] | None = None,
    ) -> dict[str, Any]:
        """A v3 delta: its chain's finished blocks (from packs) and the steps after them, read
        at once (``first``: what of that round was read with the head), checked against the
        head's digest, replayed."""
        run_id = parse_checkpoint_id(cid)[0]
        pieces, first, blocks = await self._chain_blocks(cid, head, first, ends, listed)
        got = {k: first[k] for k in (step_key(run_id, p.branch_id, p.first) for p in pieces if not p.level)}
        replay = Replay()
        with gc_paused():
            for piece in pieces:
                if piece.level:
                    for lo, _hi in blocks_in(piece):
                        replay.add_block(blocks[(piece.branch_id, lo)].content, step_key(run_id, piece.branch_id, lo))
                    continue
                link = checkpoint_id(run_id, piece.branch_id, piece.first)
                link_key = step_key(run_id, piece.branch_id, piece.first)
                data = got[link_key]
                if data is None:
                    raise self.missing(link, link_key, cid)
                replay.add_step(decode_as(link, link_key, data, link=True), link_key, link, cid)
            return apply_delta(replay.document(), head.payload, key)

    async def checked_blocks(
        self, run_id: str, pieces: Sequence[Piece], blocks: dict[tuple[str, int], Merged], start: str,
        end: str | None, *, where: str,
    ) -> dict[tuple[str, int], Merged]:
        """``blocks`` (of ``pieces``, from ``merged_blocks``) if their hashes, chained from the
        digest ``start`` in order, give the digest ``end`` the chain records; else with the blocks
        taken from packs read again from their step objects (a pack that is well-formed and holds
        what it says, but not what the chain holds: another run's, an older one's)."""
        if _digest(pieces, blocks, start) == end:
            return blocks
        again = [(p.branch_id, lo, hi) for p in pieces if p.level for lo, hi in blocks_in(p)
                 if blocks[(p.branch_id, lo)].from_pack]
        if again:
            blocks = {**blocks, **await self.merged_blocks(run_id, [], blocks=again, chain_of=where)}
        if _digest(pieces, blocks, start) != end and _digest(pieces, blocks, start, unlisted=True) != end:
            log.warning("the chain of %s records a blocks_sha256 that its step objects do not give; "
                        "read from the step objects", where)
        return blocks

    async def merged_blocks(
        self, run_id: str, pieces: Sequence[Piece], *, blocks: Sequence[tuple[str, int, int]] = (),
        chain_of: str, first: dict[str, bytes | None] | None = None,
    ) -> dict[tuple[str, int], Merged]:
        """The finished blocks of ``pieces`` (levels >= 1) and ``blocks`` ((branch, first, last),
        read from their step objects), by (branch, first step); ``first``: objects read already
        (``first_reads``: the pieces' packs, the steps, and the top-level packs that may hold
        the pieces' blocks now).

        A block comes from its piece's pack. A pack that is gone (a newer pack of its branch
        holds its blocks, and its writer deleted it), damaged or not the piece's is replaced by
        another pack read so far that holds its blocks; failing that, by those a listing of the
        branch shows (one more round; a second listing for a writer that packed further
        meanwhile), then by the step objects. Blocks taken from packs are not checked against
        the chain here: the caller compares their hashes with the digest the chain records
        (``checked_blocks``). Blocks merged from step objects are checked as a chain's links are."""
        out: dict[tuple[str, int], Merged] = {}
        fetched: dict[str, bytes | None] = dict(first or {})
        failed: set[str] = set()  # packs read and found gone, damaged or not what they should hold
        packs = [p for p in pieces if p.first < p.last]
        from_steps = [(p.branch_id, p.first, p.last) for p in pieces if p.first == p.last] + list(blocks)
        search = _Search(self._objects, run_id)
        pending: list[Piece] = []  # ranges no pack read so far holds, a listing later
        while packs or from_steps or pending:
            step_keys = [step_key(run_id, b, s) for b, lo, hi in from_steps for s in range(lo, hi + 1)]
            wanted = [k for k in dict.fromkeys([p.key(run_id) for p in packs] + step_keys) if k not in fetched]
            if wanted:
                fetched.update(await read_many(self._objects, wanted, self._concurrency))
            with gc_paused():
                lost, from_steps = self._decoded(run_id, packs, from_steps, fetched, out, chain_of)
            failed.update(p.key(run_id) for p in lost)
            looking, packs, pending = _joined(lost + pending), [], []
            uncovered: dict[str, list[tuple[int, int]]] = {}
            for piece in looking:
                found, missed = cover(piece.branch_id, piece.first, piece.last, search.shown(piece.branch_id, fetched, failed))
                packs += found
                uncovered.setdefault(piece.branch_id, []).extend(missed)
            for branch_id, missed in uncovered.items():
                if missed and await search.relist(branch_id):
                    pending += _joined([Piece(branch_id, lo, hi, 1) for lo, hi in missed])
                else:  # nowhere else to look: the steps
                    from_steps += [(branch_id, lo, hi) for lo, hi in missed]
        return out

    def _decoded(
        self, run_id: str, packs: list[Piece], from_steps: list[tuple[str, int, int]], got: dict[str, bytes | None],
        out: dict[tuple[str, int], Merged], chain_of: str,
    ) -> tuple[list[Piece], list[tuple[str, int, int]]]:
        """One round of ``merged_blocks``: the blocks its objects hold, into ``out``; returns the
        pieces whose pack was missing, damaged or not theirs, and the blocks the next round reads
        from their steps (those a pack did not hold intact)."""
        lost: list[Piece] = []
        next_steps: list[tuple[str, int, int]] = []
        for piece in packs:
            data = got[piece.key(run_id)]
            parts = decode_pack_v2(run_id, piece, data) if data is not None else None
            if parts is None:
                lost.append(piece)
                continue
            for (lo, hi), part in zip(blocks_in(piece), parts):
                content = parse_block(part[0], run_id, piece.branch_id, lo, hi) if part is not None else None
                if content is None or part is None:
                    next_steps.append((piece.branch_id, lo, hi))
                else:
                    out[(piece.branch_id, lo)] = Merged(content, part[1], part[0], True)
        for branch_id, lo, hi in from_steps:
            links = []
            for step in range(lo, hi + 1):
                link, link_key = checkpoint_id(run_id, branch_id, step), step_key(run_id, branch_id, step)
                data = got[link_key]
                if data is None:
                    raise self.missing(link, link_key, checkpoint_id(run_id, branch_id, step + 1) if step < hi else chain_of)
                links.append((link_key, decode_as(link, link_key, data, link=True)))
            content = merge_block(run_id, branch_id, lo, links)
            data, sha = content_bytes(content)
            out[(branch_id, lo)] = Merged(content, sha, data, False)
        return lost, next_steps

    async def _replay(self, cid: str, key: str, head: Envelope) -> dict[str, Any]:
        """A v2 delta (a chain an older Rewind began): its whole chain fetched at once,
        checked link by link, replayed."""
        run_id = parse_checkpoint_id(cid)[0]
        assert head.chain is not None
        ids = chain_ids(run_id, head.chain)
        start = next((i for i in range(len(ids) - 1, -1, -1) if self.cached(ids[i]) is not None), -1)
        wanted = ids[start + 1:]
        keys = [self._key(link) for link in wanted]
        fetched, from_packs = await self._fetch_links(run_id, wanted, keys)
        # The links' messages and tool records are gathered in growing lists; only
        # the head's document is built whole (a document per link would copy the
        # conversation once per step: quadratic in the chain's length).
        replay = Replay(self.cached(ids[start]), ids[start]) if start >= 0 else Replay()
        for position, (link, link_key) in enumerate(zip(wanted, keys)):
            data = fetched[link_key]
            if data is None:
                child = wanted[position + 1] if position + 1 < len(wanted) else cid
                raise self.missing(link, link_key, child)
            try:
                envelope = decode_as(link, link_key, data, link=True)
            except CorruptCheckpointError:
                if link_key not in from_packs:
                    raise
                # The pack's copy is damaged: the object itself is the record.
                data = await self._get(link_key)
                if data is None:
                    raise self.missing(link, link_key, wanted[position + 1] if position + 1 < len(wanted) else cid) from None
                envelope = decode_as(link, link_key, data, link=True)
            replay.add_step(envelope, link_key, link, cid)
        return apply_delta(replay.document(), head.payload, key)

    async def _fetch_links(
        self, run_id: str, wanted: list[str], keys: list[str],
    ) -> tuple[dict[str, bytes | None], set[str]]:
        """The bytes of every link (None where missing), reading finished blocks from
        their packs: one round of parallel GETs, plus one for blocks whose pack is
        missing or damaged. Also returns the keys whose bytes came from a pack."""
        parsed = [parse_checkpoint_id(link) for link in wanted]
        last_of: dict[str, int] = {}
        for _run, branch, step in parsed:
            last_of[branch] = max(last_of.get(branch, -1), step)
        by_block: dict[Block, list[int]] = {}
        singles: list[int] = []
        for position, (_run, branch, step) in enumerate(parsed):
            block = block_of(run_id, branch, step)
            # A block is packed once its last step is stored: below the chain's end on that branch.
            if block.last <= last_of[branch]:
                by_block.setdefault(block, []).append(position)
            else:
                singles.append(position)
        for block in [b for b, positions in by_block.items() if len(positions) < 2]:
            singles += by_block.pop(block)
        got = await read_many(self._objects, [keys[p] for p in singles] + [b.key for b in by_block], self._concurrency)
        out: dict[str, bytes | None] = {keys[p]: got[keys[p]] for p in singles}
        from_packs: set[str] = set()
        fallback: list[str] = []
        for block, positions in by_block.items():
            data = got[block.key]
            objects = decode_pack(block, data) if data is not None else None
            for position in positions:
                step = parsed[position][2]
                if objects is not None and step in objects:
                    out[keys[position]] = objects[step]
                    from_packs.add(keys[position])
                else:
                    fallback.append(keys[position])
        if fallback:
            out.update(await read_many(self._objects, fallback, self._concurrency))
        return out, from_packs

    async def _walk_v1(
        self, cid: str, key: str, head: Envelope, *, use_cache: bool = True,
    ) -> tuple[dict[str, Any], list[str]]:
        """A format-v1 delta: walk parent links back to a snapshot (or, with `use_cache`,
        a cached document), then replay forward. Returns the document and the ids walked."""
        chain: list[tuple[str, str, Envelope]] = [(cid, key, head)]
        fetched: dict[str, bytes | None] = {}
        base: dict[str, Any] | None = None
        base_id: str | None = None
        while chain[-1][2].kind != "snapshot":
            link_id, link_key, envelope = chain[-1]
            parent = envelope.payload["parent_id"]
            if not isinstance(parent, str) or any(parent == link[0] for link in chain):
                raise CorruptCheckpointError(
                    f"checkpoint object {link_key} is a delta with parent {parent!r:.80}, which does "
                    "not lead back to a snapshot; rebuild the run with `rewind mirror RUN`"
                )
            base = self.cached(parent) if use_cache else None
            if base is not None:
                base_id = parent
                break
            run_id, branch_id, step = parse_checkpoint_id(parent)
            parent_key = step_key(run_id, branch_id, step)
            if parent_key not in fetched:
                fetched.update(await self._prefetch(run_id, branch_id, step))
            data = fetched.pop(parent_key, None)
            if data is None:
                raise self.missing(parent, parent_key, link_id)
            chain.append((parent, parent_key, decode_as(parent, parent_key, data)))
        doc = base
        for link_id, link_key, envelope in reversed(chain):
            if envelope.kind == "snapshot":
                doc = migrate(envelope.payload, link_key)
            else:
                assert doc is not None
                doc = apply_delta(doc, envelope.payload, link_key)
        assert doc is not None
        ids = [link[0] for link in reversed(chain)]
        return doc, ([base_id] if base_id is not None else []) + ids

    # -- helpers --------------------------------------------------------------

    async def _head(self, cid: str) -> tuple[str, Envelope]:
        """The object of `cid`, read and checked; CheckpointNotFoundError if there is none."""
        key = self._key(cid)
        data = await self._get(key)
        if data is None:
            raise self.missing(cid, key, None)
        return key, decode_as(cid, key, data)

    @staticmethod
    def _key(cid: str) -> str:
        run_id, branch_id, step = parse_checkpoint_id(cid)
        return step_key(run_id, branch_id, step)

    async def _get(self, key: str) -> bytes | None:
        try:
            return await self._objects.get(key)
        except CheckpointNotFoundError:
            return None

    async def _prefetch(self, run_id: str, branch_id: str, step: int) -> dict[str, bytes | None]:
        low = max(step - self._window + 1, 0)
        keys = [step_key(run_id, branch_id, s) for s in range(low, step + 1)]
        return await read_many(self._objects, keys, self._concurrency)

    def missing(self, cid: str, key: str, child_id: str | None) -> CorruptCheckpointError | CheckpointNotFoundError:
        if child_id is None:
            return CheckpointNotFoundError(
                f"checkpoint {cid} not found in {self._objects.url} (no object {key}); "
                "list the run's checkpoints with `rewind tree RUN`"
            )
        child_key = self._key(child_id)
        return CorruptCheckpointError(
            f"checkpoint object {child_key} ({child_id}) is stored as a delta of {cid}, whose "
            f"object {key} is missing; restore it, or rebuild the run with `rewind mirror RUN`"
        )


def _object_calls(envelope: Envelope, step: int) -> list[BlockCall]:
    """A step object's pipeline call, if it is one, as ``block_calls`` gives a block's: its own
    messages and records (a snapshot's: its line's)."""
    payload = envelope.payload
    call = payload.get("pipeline")
    if not (isinstance(call, dict) and call):
        return []
    delta = envelope.kind == "delta"
    messages = payload.get("new_messages" if delta else "messages") or []
    records = payload.get("new_tool_records" if delta else "tool_call_cache") or []
    return [BlockCall(step=step, call=call, last_message=messages[-1] if messages else None,
                      last_tool_record=records[-1] if records else None, records=tuple(records))]


def _joined(pieces: list[Piece]) -> list[Piece]:
    """The ranges of ``pieces``, adjacent ones of a branch joined (as pieces of no particular
    pack): one pack that holds several of them is then read and opened once."""
    out: list[Piece] = []
    for p in sorted(pieces, key=lambda p: (p.branch_id, p.first)):
        if out and out[-1].branch_id == p.branch_id and out[-1].last + 1 == p.first:
            out[-1] = Piece(p.branch_id, out[-1].first, p.last, 1)
        else:
            out.append(Piece(p.branch_id, p.first, p.last, 1))
    return out


def _digest(pieces: Sequence[Piece], blocks: dict[tuple[str, int], Merged], digest: str, *,
            unlisted: bool = False) -> str:
    """The digest ``digest`` after the finished blocks of ``pieces``, in order; ``unlisted``:
    with the blocks merged here from step objects hashed without the pipeline calls they list,
    as a Rewind that did not list them wrote them (its chain's digest says so)."""
    for piece in pieces:
        for lo, _hi in blocks_in(piece) if piece.level else ():
            block = blocks[(piece.branch_id, lo)]
            sha = block.sha256
            if unlisted and not block.from_pack and "calls" in block.content:
                sha = content_bytes({k: v for k, v in block.content.items() if k != "calls"})[1]
            digest = extend_digest(digest, sha)
    return digest
