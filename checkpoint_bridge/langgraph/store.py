"""The storage engine under ``RewindSaver``: LangGraph threads as immutable objects.

It stores what the saver hands it already serialized (``Typed`` parts: a
whole value, or a list's elements) and knows nothing of LangGraph's types.
Layout: ``langgraph_layout``; formats: ``langgraph_objects``.

Writing a checkpoint stores, in this order, the large elements it is the
first to hold, the value objects of the channels it changed (a list that
starts with its parent's list as a delta holding only the rest) and last its
record, so a record never names anything that is not stored. Unchanged
channels are pointers to the checkpoint that holds their value; small
values sit in the record itself.

Reading rebuilds a list from its chain of deltas: links read one by one at
first, the rest of a long chain at once (one listing, parallel GETs), then
every element the result names, in parallel. Everything read or written is
cached by key (objects are immutable), as bytes: callers decode fresh
values each time, so nothing LangGraph mutates is ever shared.

Erasing (prune, delete_for_runs) removes records first, so the checkpoints
vanish from every read at once, then their writes, then the value objects
and elements that nothing left uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from workflows.vocabulary.errors import CheckpointError, CheckpointExistsError, CheckpointNotFoundError, CorruptCheckpointError

from checkpoint_bridge.checkpoints.chain import read_many
from checkpoint_bridge.langgraph.layout import Layout, RecordKey
from checkpoint_bridge.langgraph.objects import (
    CHECKPOINT_FORMAT,
    ELEMENT_MIN,
    EMPTY_LIST_DIGEST,
    REF,
    VALUE_FORMAT,
    WRITES_FORMAT,
    StoredObject,
    Typed,
    decode_element,
    decode_object,
    element_bytes,
    element_digest,
    encode_object,
    extend_digest,
)
from checkpoint_bridge.checkpoints.lru import LRU
from checkpoint_bridge.stores import ObjectStore

__all__ = ["ThreadStore", "StoredCheckpoint", "Encoded", "StoredWrite", "record_from", "INLINE_MAX"]

T = TypeVar("T")
Encoded = Typed | list[Typed]
"""A serialized value: one part, or (for a Python list) one part per element."""
StoredWrite = tuple[str, str, str, int, Encoded]
"""(task_id, channel, task_path, idx, value) of one pending write."""
# Values up to this size live in the record (trigger channels hold None: 0 bytes; the
# pending Sends of a step are a short list).
INLINE_MAX = 256
# After this many links of a list delta read one by one, the rest of the chain is
# fetched at once: a cold read of a long thread is a few rounds of requests.
_SEQUENTIAL_LINKS = 8
_WRITE_ATTEMPTS = 64


def _corrupt(key: str, problem: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"LangGraph object {key} {problem}; restore it from a backup, or delete the thread "
        "(RewindSaver.delete_thread) and run the graph again"
    )


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint record as stored: what an importer needs to order a thread."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    step: int | None
    source: str | None
    run_id: str | None
    channels: dict[str, tuple[Any, str | None]]
    """channel -> (version, checkpoint whose value it is; None: the channel has no value)."""
    inline: dict[str, Encoded]
    """The channels whose (small) value this record holds itself."""
    checkpoint: Typed
    metadata: Typed
    key: str


@dataclass(frozen=True)
class _Value:
    """A stored list or whole value: its parts (references unresolved) and, for a
    list, its elements' digests and the list's digest."""

    is_list: bool
    parts: list[Typed]
    digests: list[bytes]
    digest: str


def record_from(key: RecordKey, raw_key: str, data: bytes) -> StoredCheckpoint:
    """Decode and check one checkpoint record."""
    obj = decode_object(data, raw_key, CHECKPOINT_FORMAT)
    h = obj.header
    if h.get("checkpoint_id") != key.checkpoint_id:
        raise _corrupt(raw_key, f"holds checkpoint {h.get('checkpoint_id')!r:.80}, not {key.checkpoint_id!r}: "
                                "it was renamed")
    parent, channels, inline = h.get("parent_checkpoint_id"), h.get("channels"), h.get("inline", {})
    if parent is not None and not isinstance(parent, str):
        raise _corrupt(raw_key, "has a malformed parent_checkpoint_id")
    if not isinstance(channels, dict) or not all(
        isinstance(v, list) and len(v) == 2 and (v[1] is None or isinstance(v[1], str)) for v in channels.values()
    ):
        raise _corrupt(raw_key, "has a malformed channels map")
    # inline: channel -> [first part, count] (count -1: one part holding the whole value)
    if not (isinstance(inline, dict) and all(
        ch in channels and isinstance(v, list) and len(v) == 2 and all(isinstance(n, int) for n in v)
        and v[0] >= 2 and v[1] >= -1 and v[0] + (1 if v[1] == -1 else v[1]) <= len(obj.parts)
        for ch, v in inline.items()
    )) or len(obj.parts) < 2:
        raise _corrupt(raw_key, "has parts that do not match its header")
    step = h.get("step")
    return StoredCheckpoint(
        key.thread_id, key.checkpoint_ns, key.checkpoint_id, parent,
        step if isinstance(step, int) and not isinstance(step, bool) else None,
        h.get("source") if isinstance(h.get("source"), str) else None,
        h.get("run_id") if isinstance(h.get("run_id"), str) else None,
        {ch: (v[0], v[1]) for ch, v in channels.items()},
        {ch: obj.parts[i] if n == -1 else obj.parts[i:i + n] for ch, (i, n) in inline.items()},
        obj.parts[0], obj.parts[1], raw_key,
    )


class _Cache(LRU[T]):
    """An LRU whose entries can be dropped (what a deletion erased must not be served)."""

    def drop(self, gone: Callable[[str], bool]) -> None:
        for key in [k for k in self._items if gone(k)]:
            del self._items[key]


class ThreadStore:
    """LangGraph threads in one ``ObjectStore``, under ``layout``'s prefix."""

    def __init__(self, objects: ObjectStore, layout: Layout, *, concurrency: int = 32) -> None:
        self.objects = objects
        self.layout = layout
        self._concurrency = concurrency
        self._records: _Cache[StoredCheckpoint] = _Cache(1024)
        self._values: _Cache[_Value] = _Cache(512)
        self._elements: _Cache[Typed] = _Cache(2048)
        self._stored_elements: _Cache[bool] = _Cache(8192)
        self._storing: dict[str, asyncio.Future[None]] = {}

    # -- small helpers --------------------------------------------------------------

    async def _get(self, key: str) -> bytes | None:
        try:
            return await self.objects.get(key)
        except CheckpointNotFoundError:
            return None

    async def _put(self, key: str, data: bytes, what: str) -> None:
        try:
            await self.objects.put_if_absent(key, data)
        except CheckpointExistsError as exc:
            raise CheckpointExistsError(
                f"{what} is already stored in {self.objects.url} with different content ({key}); stored "
                "checkpoints are immutable: give the new checkpoint a new id, or delete the thread first"
            ) from exc

    def forget(self, gone: Callable[[str], bool]) -> None:
        for cache in (self._records, self._values, self._elements, self._stored_elements):
            cache.drop(gone)

    # -- elements ----------------------------------------------------------------------

    async def _externalize(self, thread_id: str, parts: list[Typed]) -> list[Typed]:
        """`parts` with every large one stored as an element object and replaced by a reference."""
        out, pending = self._references(thread_id, parts)
        await self._store_elements(pending)
        return out

    def _references(self, thread_id: str, parts: list[Typed]) -> tuple[list[Typed], dict[str, bytes]]:
        """`parts` with every large one replaced by a reference, and the element objects to store."""
        out, pending = [], {}
        for part in parts:
            if part[0] == REF or len(part[1]) < ELEMENT_MIN:
                out.append(part)
                continue
            digest = element_digest(part)
            key = self.layout.element(thread_id, digest.hex())
            if self._stored_elements.get(key) is None:
                pending[key] = element_bytes(part)
            out.append((REF, digest))
        return out, pending

    async def _store_elements(self, pending: dict[str, bytes]) -> None:
        gate = asyncio.Semaphore(self._concurrency)

        async def store(key: str, data: bytes) -> None:
            # A task's writes and the checkpoint after it often store the same element at
            # the same moment (LangGraph saves writes in the background): one PUT serves both.
            running = self._storing.get(key)
            if running is None:
                running = self._storing[key] = asyncio.ensure_future(self._put_element(key, data, gate))
                running.add_done_callback(lambda _f: self._storing.pop(key, None))
            await asyncio.shield(running)

        await asyncio.gather(*(store(k, d) for k, d in pending.items()))

    async def _put_element(self, key: str, data: bytes, gate: asyncio.Semaphore) -> None:
        async with gate:
            await self._put(key, data, "an element")
        self._stored_elements.put(key, True)

    async def resolve(self, thread_id: str, parts: list[Typed], named_by: str) -> list[Typed]:
        """`parts` with every reference replaced by the element it names (fetched in parallel)."""
        wanted = {self.layout.element(thread_id, p[1].hex()): p[1] for p in parts if p[0] == REF}
        found: dict[str, Typed] = {}
        for key in wanted:
            cached = self._elements.get(key)
            if cached is not None:
                found[key] = cached
        missing = [k for k in wanted if k not in found]
        fetched = await read_many(self.objects, missing, self._concurrency) if missing else {}
        for key in missing:
            data = fetched[key]
            if data is None:
                raise _corrupt(named_by, f"names the element {key}, which is missing")
            found[key] = decode_element(data, key, wanted[key])
            self._elements.put(key, found[key])
        return [found[self.layout.element(thread_id, p[1].hex())] if p[0] == REF else p for p in parts]

    # -- records ------------------------------------------------------------------------

    async def record(self, thread_id: str, ns: str, checkpoint_id: str) -> StoredCheckpoint | None:
        key = self.layout.record(thread_id, ns, checkpoint_id)
        cached = self._records.get(key)
        if cached is not None:
            return cached
        data = await self._get(key)
        if data is None:
            return None
        record = record_from(RecordKey(thread_id, ns, checkpoint_id), key, data)
        self._records.put(key, record)
        return record

    async def records_at(self, keys: list[tuple[str, RecordKey]]) -> list[StoredCheckpoint]:
        """The records under these keys, in order (skipping any deleted meanwhile)."""
        missing = [k for k, _ in keys if self._records.get(k) is None]
        data = await read_many(self.objects, missing, self._concurrency) if missing else {}
        out = []
        for key, parsed in keys:
            record = self._records.get(key)
            if record is None and data.get(key) is not None:
                record = record_from(parsed, key, data[key])  # type: ignore[arg-type]
                self._records.put(key, record)
            if record is not None:
                out.append(record)
        return out

    async def record_keys(self, prefix: str) -> list[tuple[str, RecordKey]]:
        return [(k, p) for k in await self.objects.list(prefix) if (p := self.layout.parse_record(k)) is not None]

    async def latest_id(self, thread_id: str, ns: str) -> str | None:
        keys = await self.record_keys(self.layout.checkpoints(thread_id, ns))
        return max((p.checkpoint_id for _, p in keys), default=None)

    # -- writing a checkpoint -----------------------------------------------------------

    async def put_checkpoint(
        self, thread_id: str, ns: str, checkpoint_id: str, parent: StoredCheckpoint | None, head: dict[str, Any],
        checkpoint: Typed, metadata: Typed, changed: dict[str, tuple[Any, Encoded | None]], versions: dict[str, Any],
    ) -> StoredCheckpoint:
        """Store one checkpoint. `changed`: the channels it gives a new version (with the
        value, or None for a version without one); `versions`: all its channel versions."""
        channels: dict[str, list[Any]] = {}
        inline: dict[str, Encoded] = {}
        objects: list[tuple[str, str, Encoded]] = []
        for channel, (version, value) in changed.items():
            channels[channel] = [version, None if value is None else checkpoint_id]
            if value is not None and _size(value) <= INLINE_MAX:
                inline[channel] = value
            elif value is not None:
                objects.append((channel, self.layout.value(thread_id, ns, checkpoint_id, channel), value))
        for channel, version in versions.items():
            if channel in channels:
                continue
            found = await self._holder(thread_id, ns, parent, channel, version)
            if found is None:
                continue
            holder, small = found
            if small is not None:
                inline[channel] = small  # small values are copied: a record never depends on another's parts
                holder = checkpoint_id
            channels[channel] = [version, holder]
        encoded = await asyncio.gather(*(
            self._encode_value(thread_id, ns, channel, value, parent) for channel, _key, value in objects
        ))
        # Elements and value objects at once (only a record leads to them), the record after.
        await asyncio.gather(
            self._store_elements({k: v for _d, _s, pending in encoded for k, v in pending.items()}),
            *(self._put(key, data, f"channel {channel!r} of checkpoint {checkpoint_id}")
              for (channel, key, _v), (data, _state, _p) in zip(objects, encoded)),
        )
        for (_c, key, _v), (_data, state, _p) in zip(objects, encoded):
            self._values.put(key, state)
        parts, where = [checkpoint, metadata], {}
        for channel in sorted(inline):
            value = inline[channel]
            where[channel] = [len(parts), -1 if isinstance(value, tuple) else len(value)]
            parts.extend([value] if isinstance(value, tuple) else value)
        header = {k: v for k, v in head.items() if v is not None}
        header.update(checkpoint_id=checkpoint_id, channels=channels)
        if where:
            header["inline"] = where
        data = encode_object(CHECKPOINT_FORMAT, header, parts)
        key = self.layout.record(thread_id, ns, checkpoint_id)
        await self._put(key, data, f"checkpoint {checkpoint_id} of thread {thread_id!r}")
        record = record_from(RecordKey(thread_id, ns, checkpoint_id), key, data)
        self._records.put(key, record)
        return record

    async def _holder(self, thread_id: str, ns: str, record: StoredCheckpoint | None, channel: str,
                      version: Any) -> tuple[str | None, Encoded | None] | None:
        """Where `channel` at `version` is, along `record`'s ancestors (normally `record`
        itself): (holder, None) for a value object, (_, part) for a small value, None if nowhere."""
        seen: set[str] = set()
        while record is not None and record.checkpoint_id not in seen:
            seen.add(record.checkpoint_id)
            entry = record.channels.get(channel)
            if entry is not None and entry[0] == version:
                return (entry[1], record.inline.get(channel))
            parent = record.parent_checkpoint_id
            record = await self.record(thread_id, ns, parent) if parent else None
        return None

    async def _encode_value(self, thread_id: str, ns: str, channel: str, value: Encoded,
                            parent: StoredCheckpoint | None) -> tuple[bytes, _Value, dict[str, bytes]]:
        """The bytes of `channel`'s new value object, what to cache of it, and the element
        objects it names that are not stored yet."""
        if isinstance(value, tuple):
            parts, pending = self._references(thread_id, [value])
            return encode_object(VALUE_FORMAT, {"mode": "whole"}, parts), _Value(False, parts, [], ""), pending
        digests = [element_digest(p) for p in value]
        base = await self._list_base(thread_id, ns, channel, parent, digests)
        if base is not None:
            holder, old = base
            n = len(old.parts)
            new, pending = self._references(thread_id, value[n:])
            header = {"mode": "delta", "base": holder, "base_count": n, "base_digest": old.digest}
            state = _Value(True, old.parts + new, digests, extend_digest(old.digest, digests[n:]))
            return encode_object(VALUE_FORMAT, header, new), state, pending
        parts, pending = self._references(thread_id, value)
        state = _Value(True, parts, digests, extend_digest(EMPTY_LIST_DIGEST, digests))
        return encode_object(VALUE_FORMAT, {"mode": "list"}, parts), state, pending

    async def _list_base(self, thread_id: str, ns: str, channel: str, parent: StoredCheckpoint | None,
                         digests: list[bytes]) -> tuple[str, _Value] | None:
        """The parent's list in `channel` if the new list starts with it (then only the rest is stored)."""
        entry = parent.channels.get(channel) if parent is not None else None
        if entry is None or entry[1] is None or channel in parent.inline:  # type: ignore[union-attr]
            return None
        old = await self._value(thread_id, ns, entry[1], channel, parent.key)  # type: ignore[union-attr]
        n = len(old.parts)
        if not old.is_list or n == 0 or n > len(digests) or old.digests != digests[:n]:
            return None
        return entry[1], old

    # -- reading values -----------------------------------------------------------------

    async def values(self, record: StoredCheckpoint, versions: dict[str, Any]) -> dict[str, Encoded]:
        """The record's channel values at `versions` (the checkpoint's channel_versions), resolved."""
        wanted = []
        for channel, version in versions.items():
            entry = record.channels.get(channel)
            if entry is not None and entry[1] is not None and entry[0] == version:
                wanted.append((channel, entry[1]))
        out: dict[str, Encoded] = {}
        objects = [(c, h) for c, h in wanted if c not in record.inline]
        loaded = await asyncio.gather(*(
            self._value(record.thread_id, record.checkpoint_ns, holder, channel, record.key) for channel, holder in objects
        ))
        everything = [p for v in loaded for p in v.parts]
        resolved = iter(await self.resolve(record.thread_id, everything, record.key))
        for (channel, _h), value in zip(objects, loaded):
            parts = [next(resolved) for _ in value.parts]
            out[channel] = parts if value.is_list else parts[0]
        for channel, _h in wanted:
            if channel in record.inline:
                out[channel] = record.inline[channel]
        return {c: out[c] for c, _h in wanted}

    async def _value(self, thread_id: str, ns: str, holder: str, channel: str, referrer: str) -> _Value:
        """The stored value of `channel` at checkpoint `holder`, its list deltas replayed."""
        key = self.layout.value(thread_id, ns, holder, channel)
        cached = self._values.get(key)
        if cached is not None:
            return cached
        links: list[tuple[str, StoredObject]] = []  # deltas above the base, newest first
        fetched: dict[str, bytes | None] | None = None
        seen = {holder}
        current, current_key, named_by = holder, key, referrer
        while True:
            base = self._values.get(current_key)
            if base is not None:
                break
            if fetched is not None and current_key in fetched:
                data = fetched.pop(current_key)
            else:
                if fetched is None and len(links) >= _SEQUENTIAL_LINKS:
                    fetched = await self._prefetch_chain(thread_id, ns, channel, current)
                    continue
                data = await self._get(current_key)
            if data is None:
                raise _corrupt(named_by, f"builds on the value of channel {channel!r} at checkpoint {current}, "
                                         f"whose object {current_key} is missing")
            obj = decode_object(data, current_key, VALUE_FORMAT)
            if obj.header.get("mode") == "delta":
                parent = obj.header.get("base")
                if not isinstance(parent, str) or parent in seen:
                    raise _corrupt(current_key, f"has a malformed or circular base {parent!r:.80}")
                seen.add(parent)
                links.append((current_key, obj))
                named_by, current = current_key, parent
                current_key = self.layout.value(thread_id, ns, parent, channel)
                continue
            base = self._whole(obj, current_key)
            self._values.put(current_key, base)
            break
        for link_key, obj in reversed(links):
            base = self._extend(base, obj, link_key)
            self._values.put(link_key, base)
        return base

    @staticmethod
    def _whole(obj: StoredObject, key: str) -> _Value:
        mode = obj.header.get("mode")
        if mode == "whole" and len(obj.parts) == 1:
            return _Value(False, obj.parts, [], "")
        if mode == "list":
            digests = [element_digest(p) for p in obj.parts]
            return _Value(True, obj.parts, digests, extend_digest(EMPTY_LIST_DIGEST, digests))
        raise _corrupt(key, f"has mode {mode!r:.40} with {len(obj.parts)} parts")

    @staticmethod
    def _extend(base: _Value, obj: StoredObject, key: str) -> _Value:
        h = obj.header
        if not base.is_list or h.get("base_count") != len(base.parts) or h.get("base_digest") != base.digest:
            raise _corrupt(key, f"extends a list of {h.get('base_count')!r} elements with digest "
                                f"{str(h.get('base_digest'))[:12]}, but its base holds {len(base.parts)} elements "
                                f"with digest {base.digest[:12]}: the base was replaced")
        digests = [element_digest(p) for p in obj.parts]
        return _Value(True, base.parts + obj.parts, base.digests + digests, extend_digest(base.digest, digests))

    async def _prefetch_chain(self, thread_id: str, ns: str, channel: str, below: str) -> dict[str, bytes | None]:
        """Every stored value of `channel` in the namespace from checkpoints up to `below`, at once."""
        keys = [k for k in await self.objects.list(self.layout.channels(thread_id, ns))
                if (owner := Layout.parse_value_owner(k)) is not None and owner[1] == channel and owner[0] <= below
                and self._values.get(k) is None]
        return await read_many(self.objects, keys, self._concurrency)

    # -- pending writes -----------------------------------------------------------------

    async def put_writes(self, thread_id: str, ns: str, checkpoint_id: str, task_id: str, task_path: str,
                         writes: list[tuple[int, str, Encoded]]) -> None:
        """Store one put_writes call (the same call again is a no-op; another call of the
        same task goes after it, and readers keep the first of each regular write)."""
        entries, parts = [], []
        for idx, channel, value in writes:
            flat = [value] if isinstance(value, tuple) else value
            entries.append([idx, channel, -1 if isinstance(value, tuple) else len(flat)])
            parts.extend(flat)
        parts = await self._externalize(thread_id, parts)
        data = encode_object(WRITES_FORMAT, {"task_id": task_id, "task_path": task_path, "writes": entries}, parts)
        seq = 0
        for _attempt in range(_WRITE_ATTEMPTS):
            try:
                await self.objects.put_if_absent(self.layout.write(thread_id, ns, checkpoint_id, task_id, seq), data)
                return
            except CheckpointExistsError:
                pass
            keys = await self.objects.list(self.layout.task_writes(thread_id, ns, checkpoint_id, task_id))
            stored = await read_many(self.objects, keys, self._concurrency)
            if any(v == data for v in stored.values()):
                return
            seq = max((s for k in keys if (s := Layout.parse_write_seq(k)) is not None), default=seq) + 1
        raise CheckpointError(f"put_writes: task {task_id} of checkpoint {checkpoint_id} kept meeting other "
                              f"writers ({_WRITE_ATTEMPTS} attempts); retry")

    async def writes_by_checkpoint(self, thread_id: str, ns: str) -> dict[str, list[str]]:
        """The keys of every write object of a namespace, by checkpoint (one listing)."""
        grouped: dict[str, list[str]] = {}
        for key in await self.objects.list(self.layout.writes(thread_id, ns)):
            owner = Layout.parse_writes_owner(key)
            if owner is not None:
                grouped.setdefault(owner, []).append(key)
        return grouped

    async def pending_writes(self, thread_id: str, ns: str, checkpoint_id: str,
                             keys: list[str] | None = None) -> list[StoredWrite]:
        """The checkpoint's pending writes: per (task, idx), a regular write's first version
        and a special channel's (error, interrupt, resume) last, as LangGraph's savers keep them."""
        if keys is None:
            keys = await self.objects.list(self.layout.writes(thread_id, ns, checkpoint_id))
        data = await read_many(self.objects, keys, self._concurrency) if keys else {}
        chosen: dict[tuple[str, int], tuple[int, str, str, list[Typed], bool, str]] = {}
        for key in keys:
            raw, seq = data.get(key), Layout.parse_write_seq(key)
            if raw is None or seq is None:
                continue
            obj = decode_object(raw, key, WRITES_FORMAT)
            task_id, task_path, entries = obj.header.get("task_id"), obj.header.get("task_path"), obj.header.get("writes")
            if not (isinstance(task_id, str) and isinstance(task_path, str) and isinstance(entries, list)
                    and all(isinstance(e, list) and len(e) == 3 and isinstance(e[0], int) and isinstance(e[1], str)
                            and isinstance(e[2], int) and e[2] >= -1 for e in entries)
                    and sum(1 if e[2] == -1 else e[2] for e in entries) == len(obj.parts)):
                raise _corrupt(key, "has a malformed writes header")
            offset = 0
            for idx, channel, count in entries:
                width = 1 if count == -1 else count
                slot, held = (task_id, idx), chosen.get((task_id, idx))
                if held is None or (idx < 0 and seq > held[0]) or (idx >= 0 and seq < held[0]):
                    chosen[slot] = (seq, task_path, channel, obj.parts[offset:offset + width], count == -1, key)
                offset += width
        ordered = sorted(chosen.items(), key=lambda kv: (kv[1][1], kv[0][0], kv[0][1]))
        out: list[StoredWrite] = []
        for (task, idx), (_seq, path, channel, parts, whole, key) in ordered:
            resolved = await self.resolve(thread_id, parts, key)
            out.append((task, channel, path, idx, resolved[0] if whole else resolved))
        return out

    # -- deleting and copying -----------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> None:
        prefix = self.layout.thread(thread_id)
        await self.objects.delete_prefix(prefix)
        self.forget(lambda key: key.startswith(prefix))

    async def copy_thread(self, source: str, target: str) -> None:
        """Every object of `source`, byte for byte, under `target` (objects name checkpoints
        and digests, never their thread). Elements, values and writes before records."""
        src, dst = self.layout.thread(source), self.layout.thread(target)
        keys = await self.objects.list(src)
        records = [k for k in keys if self.layout.parse_record(k) is not None]
        others = [k for k in keys if self.layout.parse_record(k) is None]
        gate = asyncio.Semaphore(self._concurrency)

        async def copy(key: str) -> None:
            async with gate:
                data = await self._get(key)
                if data is not None:
                    await self._put(dst + key[len(src):], data, f"the copy of {key} in thread {target!r}")

        await asyncio.gather(*(copy(k) for k in others))
        await asyncio.gather(*(copy(k) for k in records))

    async def erase(self, thread_id: str, ns: str, doomed: set[str]) -> None:
        """Erase checkpoints of one namespace, and whatever of theirs nothing left uses."""
        if not doomed:
            return
        everyone = [p.checkpoint_id for _, p in await self.record_keys(self.layout.checkpoints(thread_id, ns))]
        live = await self._live_values(thread_id, ns, [c for c in everyone if c not in doomed])
        value_keys = await self.objects.list(self.layout.channels(thread_id, ns))
        await self._delete([self.layout.record(thread_id, ns, cid) for cid in sorted(doomed)])
        writes = await self.writes_by_checkpoint(thread_id, ns)
        await self._delete([k for cid in sorted(doomed) for k in writes.get(cid, [])])
        await self._delete([k for k in value_keys if (owner := Layout.parse_value_owner(k)) is not None
                            and owner[0] in doomed and k not in live])
        await self._sweep_elements(thread_id)

    async def _delete(self, keys: list[str]) -> None:
        gate = asyncio.Semaphore(self._concurrency)

        async def one(key: str) -> None:
            async with gate:
                await self.objects.delete(key)

        await asyncio.gather(*(one(k) for k in keys))
        gone = set(keys)
        self.forget(gone.__contains__)

    async def _live_values(self, thread_id: str, ns: str, survivors: list[str]) -> set[str]:
        """Keys of the value objects the surviving checkpoints read (with their deltas' bases)."""
        live: set[str] = set()
        records = await self.records_at([(self.layout.record(thread_id, ns, c), RecordKey(thread_id, ns, c))
                                         for c in survivors])
        pending = [(holder, channel) for r in records for channel, (_v, holder) in r.channels.items()
                   if holder and channel not in r.inline]
        while pending:
            holder, channel = pending.pop()
            key = self.layout.value(thread_id, ns, holder, channel)
            if key in live:
                continue
            live.add(key)
            data = await self._get(key)
            if data is None:
                continue
            obj = decode_object(data, key, VALUE_FORMAT)
            base = obj.header.get("base")
            if obj.header.get("mode") == "delta" and isinstance(base, str):
                pending.append((base, channel))
        return live

    async def _sweep_elements(self, thread_id: str) -> None:
        """Delete the thread's elements that no value or write object names any more."""
        keys = await self.objects.list(self.layout.thread(thread_id))
        elements = [k for k in keys if Layout.is_element(k)]
        if not elements:
            return
        holders = [k for k in keys if Layout.parse_value_owner(k) is not None or Layout.parse_writes_owner(k) is not None]
        data = await read_many(self.objects, holders, self._concurrency)
        named: set[str] = set()
        for key, raw in data.items():
            if raw is None:
                continue
            format_ = VALUE_FORMAT if Layout.parse_value_owner(key) is not None else WRITES_FORMAT
            for type_, body in decode_object(raw, key, format_).parts:
                if type_ == REF:
                    named.add(self.layout.element(thread_id, body.hex()))
        await self._delete([k for k in elements if k not in named])


def _size(value: Encoded) -> int:
    return len(value[1]) if isinstance(value, tuple) else sum(len(p[1]) for p in value)
