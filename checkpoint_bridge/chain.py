"""Rebuilding full checkpoint documents from a root snapshot and its deltas.

A v2 delta names, in its `chain`, every object between the run's root
snapshot and its parent. ``ChainReader`` reads the head, then fetches the
whole chain at once (bounded parallel GETs, skipping what it has cached;
finished blocks of steps from their packs, see document/packs.py), checks that every
link names the one before it as its parent, and replays the deltas forward:
a checkpoint at any step loads in two sequential rounds of requests (three
if a pack is missing), however long the run, and with about one request per
``PACK_STEPS`` steps.

Objects of format v1 name only their parent; those chains are walked back to
their snapshot, the steps below fetched in parallel windows (their keys are
predictable: a delta's parent is normally the previous step of the branch).

Writers ask ``head_info`` for what a child of a checkpoint needs (its
message and tool-record counts, and the chain the child extends), which
costs one small GET, or nothing when this process wrote the parent.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from workflows.errors import CheckpointNotFoundError, CorruptCheckpointError
from workflows.ids import checkpoint_id, parse_checkpoint_id
from workflows.tool_calls import with_system_prompt

from checkpoint_bridge.document.envelope import Chain, Envelope, apply_delta, chain_after, decode
from checkpoint_bridge.document.layout import step_key
from checkpoint_bridge.lru import LRU
from checkpoint_bridge.document.migrations import migrate
from checkpoint_bridge.stores import ObjectStore
from checkpoint_bridge.document.packs import Block, block_of, decode_pack
from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION

__all__ = ["ChainReader", "HeadInfo", "decode_as", "read_many", "chain_ids"]


@dataclass(frozen=True)
class HeadInfo:
    """What the writer of a checkpoint's child needs to know about the checkpoint."""

    message_count: int
    tool_count: int
    child_chain: Chain
    """The chain of a child of this checkpoint: everything up to and including it."""


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


class _Growing:
    """A document being replayed along a chain: its lists grow in place."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._reset(doc)

    def _reset(self, doc: dict[str, Any]) -> None:
        self._doc = doc
        self._messages = list(doc["messages"])
        self._tools = list(doc["tool_call_cache"])
        self._variables = doc["agent_variables"]

    def add(self, envelope: Envelope, key: str) -> None:
        payload = envelope.payload
        new_messages, new_tools = payload["new_messages"], payload.get("new_tool_records")
        variables, prompt = payload.get("agent_variables", {}), payload.get("system_prompt")
        if not (envelope.format_version == 2 and payload.get("schema_version") == CURRENT_SCHEMA_VERSION
                and payload["base_message_count"] == len(self._messages)
                and payload["base_tool_count"] == len(self._tools)
                and isinstance(new_messages, list) and isinstance(new_tools, list)
                and isinstance(variables, dict) and (prompt is None or isinstance(prompt, str))):
            # An older object, or one that does not fit: the general replay migrates
            # it, or names what is wrong with it.
            self._reset(apply_delta(self.document(), payload, key))
            return
        self._messages.extend(new_messages)
        if prompt is not None:
            self._messages = with_system_prompt(self._messages, prompt)
        self._tools.extend(new_tools)
        self._variables = variables

    def document(self) -> dict[str, Any]:
        return {**self._doc, "messages": list(self._messages), "tool_call_cache": list(self._tools),
                "agent_variables": self._variables}


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

    async def document(self, cid: str) -> dict[str, Any]:
        """The full document of ``cid`` (cached, shared: never mutate it);
        CheckpointNotFoundError if it was never stored."""
        cached = self.cached(cid)
        if cached is not None:
            return cached
        key, envelope = await self._head(cid)
        if envelope.kind == "snapshot":
            doc = migrate(envelope.payload, key)
        elif envelope.chain is not None:
            doc = await self._replay(cid, key, envelope)
        else:
            doc, _ = await self._walk_v1(cid, key, envelope)
        self.remember(cid, doc)
        return doc

    async def head_info(self, cid: str) -> HeadInfo:
        """Counts and chain of `cid` for writing its child: cached, one GET, or (for a
        format-v1 object, or a fork's first step that changed the system prompt) the document."""
        info = self._heads.get(cid)
        if info is not None:
            return info
        key, envelope = await self._head(cid)
        _run, branch, step = parse_checkpoint_id(cid)
        payload = envelope.payload
        if envelope.kind == "snapshot":
            info = HeadInfo(len(payload["messages"]), len(payload["tool_call_cache"]), [(branch, step, step)])
        elif envelope.chain is not None and payload.get("system_prompt") is None:
            info = HeadInfo(
                payload["base_message_count"] + len(payload["new_messages"]),
                payload["base_tool_count"] + len(payload["new_tool_records"]),
                chain_after(envelope.chain, branch, step),
            )
        elif envelope.chain is not None:
            doc = await self.document(cid)
            info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), chain_after(envelope.chain, branch, step))
        else:
            # Format v1: the whole walk (not from a cached document) tells the chain.
            doc, ids = await self._walk_v1(cid, key, envelope, use_cache=False)
            self.remember(cid, doc)
            info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), _ranges(ids))
        self.remember_head(cid, info)
        return info

    async def _replay(self, cid: str, key: str, head: Envelope) -> dict[str, Any]:
        """A v2 delta: its whole chain fetched at once, checked link by link, replayed."""
        run_id = parse_checkpoint_id(cid)[0]
        assert head.chain is not None
        ids = chain_ids(run_id, head.chain)
        if not ids or head.payload.get("parent_id") != ids[-1]:
            raise CorruptCheckpointError(
                f"checkpoint object {key} is a delta of {head.payload.get('parent_id')!r:.80}, but its chain "
                f"ends at {ids[-1] if ids else 'nothing'!r}; rebuild the run with `rewind mirror RUN`"
            )
        start = next((i for i in range(len(ids) - 1, -1, -1) if self.cached(ids[i]) is not None), -1)
        doc = self.cached(ids[start]) if start >= 0 else None
        wanted = ids[start + 1:]
        keys = [self._key(link) for link in wanted]
        fetched, from_packs = await self._fetch_links(run_id, wanted, keys)
        previous = ids[start] if start >= 0 else None
        # The links' messages and tool records are gathered in growing lists; only
        # the head's document is built whole (a document per link would copy the
        # conversation once per step: quadratic in the chain's length).
        grown: _Growing | None = _Growing(doc) if doc is not None else None
        for position, (link, link_key) in enumerate(zip(wanted, keys)):
            data = fetched[link_key]
            if data is None:
                child = wanted[position + 1] if position + 1 < len(wanted) else cid
                raise self._missing(link, link_key, child)
            try:
                envelope = decode_as(link, link_key, data, link=True)
            except CorruptCheckpointError:
                if link_key not in from_packs:
                    raise
                # The pack's copy is damaged: the object itself is the record.
                data = await self._get(link_key)
                if data is None:
                    raise self._missing(link, link_key, wanted[position + 1] if position + 1 < len(wanted) else cid) from None
                envelope = decode_as(link, link_key, data, link=True)
            if grown is None:
                if envelope.kind != "snapshot":
                    raise CorruptCheckpointError(
                        f"checkpoint object {link_key} starts the chain of {cid} but is not a snapshot; "
                        "rebuild the run with `rewind mirror RUN`"
                    )
                grown = _Growing(migrate(envelope.payload, link_key))
            else:
                if envelope.kind == "snapshot" or envelope.payload.get("parent_id") != previous:
                    raise CorruptCheckpointError(
                        f"checkpoint object {link_key} is not the child of {previous} that the chain of {cid} "
                        "names; rebuild the run with `rewind mirror RUN`"
                    )
                grown.add(envelope, link_key)
            previous = link
        assert grown is not None
        return apply_delta(grown.document(), head.payload, key)

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
                raise self._missing(parent, parent_key, link_id)
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
            raise self._missing(cid, key, None)
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

    def _missing(self, cid: str, key: str, child_id: str | None) -> CorruptCheckpointError | CheckpointNotFoundError:
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
