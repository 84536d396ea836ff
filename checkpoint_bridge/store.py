"""``CheckpointStore``: AgentCheckpoints by id, stored in linear space.

    runs/<run>/branches/<branch>/steps/<step:08d>.json           (envelope: snapshot | delta)
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

Objects are immutable. Saving identical content again is a no-op (the mirror
is idempotent); saving different content under an existing id raises
``CheckpointExistsError``. Rolling back never rewrites a step: an
invalidation marker makes every later step of that branch read as
``status="invalidated"``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from workflows.canonical import canonical_json
from workflows.errors import CheckpointExistsError, CorruptCheckpointError
from workflows.ids import checkpoint_id, parse_checkpoint_id

from checkpoint_bridge.chain import ChainReader, HeadInfo, decode_as, read_many
from checkpoint_bridge.document.envelope import Chain, apply_delta, chain_after, delta_payload, encode, make_delta
from checkpoint_bridge.document.layout import (
    ParsedKey,
    branch_prefix,
    invalidation_key,
    invalidation_prefix,
    parse_key,
    run_prefix,
    step_key,
)
from checkpoint_bridge.lru import LRU
from checkpoint_bridge.document.migrations import migrate, validate_document
from checkpoint_bridge.stores import ObjectStore, open_object_store
from checkpoint_bridge.document.packs import MAX_PACK_BYTES, PACK_STEPS, block_of, encode_pack
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary, StepParts, checkpoint_to_dict

__all__ = ["CheckpointStore", "StepFacts", "open_checkpoint_store", "DEFAULT_STORE_URL"]

DEFAULT_STORE_URL = "file://.rewind/checkpoints"
_SUMMARY_FIELDS = tuple(CheckpointSummary.model_fields)


@dataclass(frozen=True)
class StepFacts:
    """One stored step as ``CheckpointStore.step_facts`` reads it: its own fields (ids,
    model, ledger, created_at, status, ...; no messages), the tool records it added."""

    fields: dict[str, Any]
    tool_records: list[dict[str, Any]]
    invalidated: bool
# Larger objects are read back when their block is packed: the cache stays small
# (at most its 4,096 entries times this) with many runs mirrored at once.
_REMEMBERED_OBJECT_MAX = 16 * 1024


class CheckpointStore:
    """Save, load, list and invalidate checkpoints on any ``ObjectStore``."""

    def __init__(self, objects: ObjectStore, *, cache_size: int = 64, concurrency: int = 32) -> None:
        self.objects = objects
        self._concurrency = concurrency
        self._chain = ChainReader(objects, cache_size=cache_size, concurrency=concurrency)
        # The bytes of objects this store wrote lately: what a block's pack copies.
        self._written: LRU[bytes] = LRU(2 * PACK_STEPS * 64)

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
        data, info = await self._encoded(cp, doc)
        try:
            await self.objects.put_if_absent(key, data)
            self._remember_bytes(key, data)
        except CheckpointExistsError as exc:
            existing = await self._chain.document(cp.checkpoint_id)
            if canonical_json(existing) != canonical_json(doc):
                raise self._conflict(cp.checkpoint_id) from exc
        self._chain.remember(cp.checkpoint_id, doc)
        self._chain.remember_head(cp.checkpoint_id, info)
        await self._pack_if_block_done(cp.run_id, cp.branch_id, cp.step_index, info.child_chain)
        return key

    async def _encoded(self, cp: AgentCheckpoint, doc: dict[str, Any]) -> tuple[bytes, HeadInfo]:
        own = (cp.branch_id, cp.step_index, cp.step_index)
        if cp.parent_id is not None:
            try:
                parent = await self._chain.document(cp.parent_id)
                parent_info = await self._chain.head_info(cp.parent_id)
            except LookupError:  # CheckpointNotFoundError: mirrored out of order
                parent = None
            if parent is not None:
                payload = make_delta(doc, parent)
                if payload is not None:
                    chain = parent_info.child_chain
                    info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]),
                                    chain_after(chain, cp.branch_id, cp.step_index))
                    return encode("delta", payload, chain=chain), info
        return encode("snapshot", doc), HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), [own])

    async def save_step(self, parts: StepParts) -> bool:
        """Store one step from what it added (the live mirror and ``rewind mirror``);
        True if written, False if the same checkpoint was already there.

        Reads nothing but the parent's object (nothing at all when this store wrote
        the parent); CheckpointNotFoundError if the parent is not stored yet.
        """
        cid = parts.scalars["checkpoint_id"]
        run_id, branch_id, step = parse_checkpoint_id(cid)
        key = step_key(run_id, branch_id, step)
        parent_id = parts.scalars.get("parent_id")
        if parent_id is None:
            doc = {**parts.scalars, "messages": parts.new_messages, "tool_call_cache": parts.new_tool_records,
                   "agent_variables": parts.agent_variables}
            if parts.system_prompt is not None:
                from workflows.tool_calls import with_system_prompt

                doc["messages"] = with_system_prompt(doc["messages"], parts.system_prompt)
            data = encode("snapshot", doc)
            own_chain: Chain = [(branch_id, step, step)]
            info = HeadInfo(len(doc["messages"]), len(doc["tool_call_cache"]), own_chain)
        else:
            parent = await self._chain.head_info(parent_id)
            payload = delta_payload(
                parts.scalars, base_message_count=parent.message_count, new_messages=parts.new_messages,
                base_tool_count=parent.tool_count, new_tool_records=parts.new_tool_records,
                agent_variables=parts.agent_variables, system_prompt=parts.system_prompt,
            )
            data = encode("delta", payload, chain=parent.child_chain)
            own_chain = chain_after(parent.child_chain, branch_id, step)
            info = HeadInfo(parent.message_count + len(parts.new_messages), parent.tool_count + len(parts.new_tool_records),
                            own_chain)
            if parts.system_prompt is not None:
                info = None  # type: ignore[assignment]  # a prompt may add a message: counted from the document
        try:
            written = await self.objects.put_if_absent(key, data)
        except CheckpointExistsError as exc:
            await self._same_as_stored(cid, key, data, exc)
            written = False
        if written:
            self._remember_bytes(key, data)
        if info is not None:
            self._chain.remember_head(cid, info)
        await self._pack_if_block_done(run_id, branch_id, step, own_chain)
        return written

    def _remember_bytes(self, key: str, data: bytes) -> None:
        if len(data) <= _REMEMBERED_OBJECT_MAX:
            self._written.put(key, data)

    async def _pack_if_block_done(self, run_id: str, branch_id: str, step: int, own_chain: Chain) -> None:
        """After the last step of a block: store the block's objects as one pack (document/packs.py)."""
        block = block_of(run_id, branch_id, step)
        if step != block.last:
            return
        branch_first = own_chain[-1][1]  # the branch's own range ends the chain
        first = max(block.first, branch_first)
        if first == step:
            return  # one object: nothing to gain
        keys = [step_key(run_id, branch_id, s) for s in range(first, step + 1)]
        known = {k: self._written.get(k) for k in keys}
        missing = [k for k, v in known.items() if v is None]
        if missing:
            known.update(await read_many(self.objects, missing, self._concurrency))
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
        # The chain and the branch's rollback markers (a short listing of their own) at once.
        doc, markers = await asyncio.gather(
            self._chain.document(checkpoint_id_), self._keys(invalidation_prefix(run_id, branch_id)),
        )
        # A fresh copy: callers may mutate what they get without touching the cache.
        cp = validate_document(_fresh(doc), checkpoint_id_)
        cutoff = _cutoff(markers, branch_id)
        if cutoff is not None and step > cutoff:
            cp.status = "invalidated"
        return cp

    async def document(self, checkpoint_id_: str) -> dict[str, Any]:
        """The checkpoint's full document as plain JSON, migrated but not validated and
        without rollback markers applied: shared with the store's cache, never mutate it.

        For readers of a whole run (the viewer): a document shares the message dicts
        of its parent's, so reading a run in step order costs one object and one list
        of references per step, where ``load`` would copy and validate every whole
        conversation again (quadratic in the run's length). Validate what you use
        (``migrations.validate_document``) and take the status from ``list_checkpoints``.
        """
        parse_checkpoint_id(checkpoint_id_)
        return await self._chain.document(checkpoint_id_)

    async def load_latest(self, run_id: str, branch_id: str = "main") -> AgentCheckpoint | None:
        """The highest step of the branch that is not invalidated, or None."""
        step = await self._head_step(run_id, branch_id)
        return None if step is None else await self.load(checkpoint_id(run_id, branch_id, step))

    async def list_checkpoints(self, run_id: str) -> list[CheckpointSummary]:
        """Every checkpoint of the run: branches in creation order, then by step."""
        parsed = await self._keys(run_prefix(run_id))
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

    async def stored_steps(self, run_id: str) -> dict[str, tuple[set[int], int | None]]:
        """Each branch's stored step indices and its invalidation cutoff (the lowest
        ``after_step`` of its markers, or None), branches in creation order: one listing,
        no reads."""
        parsed = await self._keys(run_prefix(run_id))
        return {b: ({p.step_index for p in parsed if p.kind == "step" and p.branch_id == b}, _cutoff(parsed, b))
                for b in _branch_order(parsed)}

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


def _fresh(value: Any) -> Any:
    """A copy of a JSON tree: new dicts and lists, the same (immutable) strings and numbers."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
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

