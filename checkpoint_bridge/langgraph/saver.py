"""``RewindSaver`` / ``AsyncRewindSaver``: LangGraph checkpointers on Rewind's checkpoint store.

    from checkpoint_bridge.langgraph.saver import RewindSaver

    with RewindSaver.from_url("s3://bucket/prefix", endpoint_url=...) as saver:   # or a local folder
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

A ``BaseCheckpointSaver`` (``langgraph-checkpoint``; install the ``langgraph``
extra) that keeps checkpoints and pending writes as immutable objects in any
``ObjectStore`` (``langgraph_layout`` says where, ``langgraph_objects`` how,
``langgraph_store`` does the storing): written with ``put_if_absent``,
hashed, checked on every read. A checkpoint stores only the channels it
changed; the others point at the checkpoint that holds their value. A list
channel that grew by appending (a conversation's ``messages``) stores only
the appended elements, as a delta of the list its parent held, and a large
element that a task wrote and the next checkpoint appended is stored once;
so a run's storage grows with its content, not with the square of its
length as with a store that rewrites the whole state every step.

This module is the LangGraph side: configs, serialization, CheckpointTuples.

Values go through LangGraph's own serde protocol (``JsonPlusSerializer`` by
default) with pickle off: a value the serializer cannot store as data is an
``UnstorableStateError`` naming the channel, never a pickle.

Deletion (``delete_thread``, ``prune``, ``delete_for_runs``) is the one place
objects go away, and it erases them for real (``ObjectStore.delete``). A
value object or element that a surviving checkpoint still builds on (the
base of its list delta, the unchanged channel it points at) stays: it is
that checkpoint's state too. Everything only deleted checkpoints used goes.

``AsyncRewindSaver`` runs in the caller's event loop (``graph.ainvoke``).
``RewindSaver`` serves LangGraph's synchronous calls (``graph.invoke``) from a
private event loop on its own thread, and its async methods too.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Awaitable, TypeVar

try:
    import ormsgpack
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as exc:  # the core never needs LangGraph: only this module does
    raise ImportError(
        f"RewindSaver needs LangGraph's checkpoint library ({exc}); install it with "
        "`pip install 'rewind-agents[langgraph]'`"
    ) from exc

from workflows.vocabulary.errors import ConfigError, CorruptCheckpointError, UnstorableStateError, UsageError

from checkpoint_bridge.checkpoints.chain import read_many
from checkpoint_bridge.langgraph.graph_runs import graph_run_tuples
from checkpoint_bridge.langgraph.layout import DEFAULT_PREFIX, Layout
from checkpoint_bridge.langgraph.objects import REF, Typed
from checkpoint_bridge.langgraph.store import Encoded, StoredCheckpoint, ThreadStore, record_from
from checkpoint_bridge.stores import ObjectStore, open_object_store

__all__ = ["AsyncRewindSaver", "RewindSaver", "StoredCheckpoint", "list_thread"]

T = TypeVar("T")


async def list_thread(
    objects: ObjectStore, thread_id: str, checkpoint_ns: str = "", *, prefix: str = DEFAULT_PREFIX,
) -> list[StoredCheckpoint]:
    """A thread's checkpoints in one namespace as stored, oldest first, with their
    parent links (for importers: reads the records only, decodes no state)."""
    layout = Layout(prefix)
    keys = [(k, p) for k in await objects.list(layout.checkpoints(thread_id, checkpoint_ns))
            if (p := layout.parse_record(k)) is not None]
    data = await read_many(objects, [k for k, _ in keys], 32)
    out = [record_from(p, k, data[k]) for k, p in keys if data[k] is not None]  # type: ignore[arg-type]
    return sorted(out, key=lambda r: r.checkpoint_id)


def _refuse_pickle(serde: SerializerProtocol | None) -> None:
    inner = getattr(serde, "serde", None)  # EncryptedSerializer wraps another serializer
    if getattr(serde, "pickle_fallback", False) or getattr(inner, "pickle_fallback", False):
        raise ConfigError(
            "RewindSaver stores state as data only: pass a serializer without pickle fallback "
            "(JsonPlusSerializer(), the default) and keep values to what it can encode"
        )


def _configurable(config: RunnableConfig | None, what: str) -> dict[str, Any]:
    conf = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(conf, dict):
        raise UsageError(f"RewindSaver.{what} needs a config with a 'configurable' mapping, got {config!r:.120}")
    return conf


def _thread_of(conf: dict[str, Any], what: str) -> str:
    thread_id = conf.get("thread_id")
    if thread_id is None or thread_id == "":
        raise UsageError(
            f"RewindSaver.{what}: the config names no thread; pass "
            "{'configurable': {'thread_id': ...}} when invoking the graph"
        )
    return str(thread_id)


def _ns_of(conf: dict[str, Any]) -> str:
    ns = conf.get("checkpoint_ns", "")
    return "" if ns is None else ns


def _config(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


class AsyncRewindSaver(BaseCheckpointSaver[int]):
    """LangGraph checkpoints in a Rewind object store, for async graphs (``ainvoke``)."""

    def __init__(
        self,
        objects: ObjectStore,
        *,
        serde: SerializerProtocol | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int = 32,
    ) -> None:
        _refuse_pickle(serde)
        super().__init__(serde=serde or JsonPlusSerializer())
        self.objects = objects
        self.layout = Layout(prefix)
        self.store = ThreadStore(objects, self.layout, concurrency=concurrency)
        self._concurrency = concurrency

    @classmethod
    def from_url(
        cls, url: str, *, endpoint_url: str | None = None, region_name: str | None = None, **options: Any,
    ) -> AsyncRewindSaver:
        """A saver on a ``REWIND_STORE``-style URL (a local folder or ``s3://bucket/prefix``).
        Use as ``async with AsyncRewindSaver.from_url(url) as saver:`` to close its connections."""
        return cls(open_object_store(url, endpoint_url=endpoint_url, region_name=region_name), **options)

    async def __aenter__(self) -> AsyncRewindSaver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.objects.aclose()

    def with_allowlist(self, extra_allowlist: Any) -> AsyncRewindSaver:
        _refuse_pickle(self.serde)
        return super().with_allowlist(extra_allowlist)  # type: ignore[return-value]

    # -- serialization ------------------------------------------------------------

    def _dumps(self, value: Any, what: str) -> Typed:
        try:
            type_, data = self.serde.dumps_typed(value)
        except (TypeError, ValueError, OverflowError, ormsgpack.MsgpackEncodeError) as exc:
            raise UnstorableStateError(
                f"{what} holds a {type(value).__name__} that LangGraph's serializer cannot store as data ({exc}); "
                "RewindSaver keeps pickle off: put plain data in the state (str, numbers, lists, dicts, "
                "dataclasses, pydantic models, LangChain messages) or convert the value first"
            ) from exc
        if "pickle" in type_ or type_ == REF:
            raise UnstorableStateError(
                f"{what} holds a {type(value).__name__} that the serializer could only store as a pickle "
                f"(type {type_!r}); RewindSaver stores data, not pickles: convert the value to plain data first"
            )
        return type_, bytes(data)

    def _encode(self, value: Any, what: str) -> Encoded:
        """A Python list element by element (so a list that grows is stored as a delta), else whole."""
        if type(value) is list:
            return [self._dumps(e, f"element {i} of {what}") for i, e in enumerate(value)]
        return self._dumps(value, what)

    def _loads(self, typed: Typed, key: str) -> Any:
        try:
            return self.serde.loads_typed(typed)
        except Exception as exc:  # noqa: BLE001 - any library failure names the object
            raise CorruptCheckpointError(
                f"LangGraph object {key} holds a value of type {typed[0]!r:.40} that this saver cannot "
                f"deserialize ({type(exc).__name__}: {exc}); pickled values are never read"
            ) from exc

    def _decode(self, value: Encoded, key: str) -> Any:
        return [self._loads(p, key) for p in value] if isinstance(value, list) else self._loads(value, key)

    async def _tuple(self, record: StoredCheckpoint, write_keys: list[str] | None = None) -> CheckpointTuple:
        checkpoint = self._loads(record.checkpoint, record.key)
        metadata = self._loads(record.metadata, record.key)
        if not isinstance(checkpoint, dict) or not isinstance(metadata, dict):
            raise CorruptCheckpointError(f"LangGraph checkpoint record {record.key} does not hold a checkpoint "
                                         "and its metadata; delete the thread and run the graph again")
        values, writes = await asyncio.gather(
            self.store.values(record, checkpoint.get("channel_versions") or {}),
            self.store.pending_writes(record.thread_id, record.checkpoint_ns, record.checkpoint_id, write_keys),
        )
        parent = record.parent_checkpoint_id
        return CheckpointTuple(
            config=_config(record.thread_id, record.checkpoint_ns, record.checkpoint_id),
            checkpoint={**checkpoint, "channel_values": {c: self._decode(v, record.key) for c, v in values.items()}},
            metadata=metadata,  # type: ignore[arg-type]
            parent_config=_config(record.thread_id, record.checkpoint_ns, parent) if parent else None,
            pending_writes=[(task, channel, self._decode(v, record.key)) for task, channel, _p, _i, v in writes],
        )

    # -- BaseCheckpointSaver: reading ------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _configurable(config, "get_tuple")
        thread_id, ns = _thread_of(conf, "get_tuple"), _ns_of(conf)
        own = await self.store.latest_id(thread_id, ns)
        if own is None and ns == "":
            # No LangGraph checkpoint of its own: a Rewind graph run's steps, if the thread is one.
            run = await graph_run_tuples(self.objects, thread_id)
            if run:
                wanted = get_checkpoint_id(config)
                return next((t for t in run if t.checkpoint["id"] == wanted), None) if wanted else run[-1]
        checkpoint_id = get_checkpoint_id(config) or own
        if checkpoint_id is None:
            return None
        record = await self.store.record(thread_id, ns, checkpoint_id)
        return None if record is None else await self._tuple(record)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is None:
            prefix, ns, wanted_id = self.layout.all_threads(), None, None
        else:
            conf = _configurable(config, "list")
            thread_id = _thread_of(conf, "list")
            ns = conf.get("checkpoint_ns")
            prefix = self.layout.thread(thread_id) if ns is None else self.layout.checkpoints(thread_id, ns)
            wanted_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        keys = [(k, p) for k, p in await self.store.record_keys(prefix)
                if (ns is None or p.checkpoint_ns == ns)
                and (wanted_id is None or p.checkpoint_id == wanted_id)
                and (before_id is None or p.checkpoint_id < before_id)]
        keys.sort(key=lambda kp: kp[1].checkpoint_id, reverse=True)
        if not keys and config is not None and not ns:
            # A thread with no LangGraph checkpoints of its own may be a Rewind graph run.
            run = [t for t in reversed(await graph_run_tuples(self.objects, thread_id))
                   if (wanted_id is None or t.checkpoint["id"] == wanted_id)
                   and (before_id is None or t.checkpoint["id"] < before_id)
                   and (not filter or all(t.metadata.get(k) == v for k, v in filter.items()))]
            for found in run[:limit] if limit is not None else run:
                yield found
            return
        remaining = limit
        writes: dict[tuple[str, str], dict[str, list[str]]] = {}
        for start in range(0, len(keys), self._concurrency):
            for record in await self.store.records_at(keys[start:start + self._concurrency]):
                if remaining is not None and remaining <= 0:
                    return
                if filter:
                    metadata = self._loads(record.metadata, record.key)
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                where = (record.thread_id, record.checkpoint_ns)
                if where not in writes:  # one listing serves every checkpoint of the namespace
                    writes[where] = await self.store.writes_by_checkpoint(*where)
                if remaining is not None:
                    remaining -= 1
                yield await self._tuple(record, writes[where].get(record.checkpoint_id, []))

    # -- BaseCheckpointSaver: writing ------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _configurable(config, "put")
        thread_id, ns = _thread_of(conf, "put"), _ns_of(conf)
        checkpoint_id = checkpoint.get("id") if isinstance(checkpoint, dict) else None
        if not isinstance(checkpoint_id, str) or not checkpoint_id:
            raise UsageError(f"RewindSaver.put: the checkpoint has no id ({checkpoint!r:.120})")
        self.layout.record(thread_id, ns, checkpoint_id)  # refuses names that cannot be keys, before any work
        parent_id = conf.get("checkpoint_id") or None
        values = checkpoint.get("channel_values") or {}
        what = f"of checkpoint {checkpoint_id} (thread {thread_id!r})"
        # Everything is serialized before anything is written: a value that cannot be
        # stored leaves no trace of the checkpoint.
        changed = {ch: (version, self._encode(values[ch], f"channel {ch!r} {what}") if ch in values else None)
                   for ch, version in new_versions.items()}
        meta = get_checkpoint_metadata(config, metadata)
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        parts = (self._dumps(bare, f"checkpoint {checkpoint_id}"), self._dumps(meta, f"metadata {what}"))
        step, run_id, source = meta.get("step"), meta.get("run_id"), meta.get("source")
        head = {  # what a reader of the thread wants without decoding the checkpoint (None: left out)
            "parent_checkpoint_id": parent_id,
            "step": step if isinstance(step, int) and not isinstance(step, bool) else None,
            "source": source if isinstance(source, str) else None,
            "run_id": str(run_id) if run_id is not None else None,
        }
        parent = await self.store.record(thread_id, ns, parent_id) if parent_id else None
        try:
            await self.store.put_checkpoint(thread_id, ns, checkpoint_id, parent, head, *parts, changed,
                                            dict(checkpoint.get("channel_versions") or {}))
        except (TypeError, ValueError) as exc:  # a header that is not JSON
            raise UnstorableStateError(
                f"checkpoint {checkpoint_id} has channel versions or a timestamp that are not plain JSON ({exc}); "
                "use LangGraph's default int / str versions"
            ) from exc
        return _config(thread_id, ns, checkpoint_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = _configurable(config, "put_writes")
        thread_id, ns = _thread_of(conf, "put_writes"), _ns_of(conf)
        checkpoint_id = conf.get("checkpoint_id")
        if not checkpoint_id:
            raise UsageError("RewindSaver.put_writes: the config names no checkpoint_id; writes belong to a checkpoint")
        if not writes:
            return
        entries = [(WRITES_IDX_MAP.get(channel, i), channel,
                    self._encode(value, f"write to channel {channel!r} by task {task_id} (checkpoint {checkpoint_id})"))
                   for i, (channel, value) in enumerate(writes)]
        await self.store.put_writes(thread_id, ns, checkpoint_id, task_id, task_path or "", entries)

    # -- BaseCheckpointSaver: deleting, copying ------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase every checkpoint, value, write and element of the thread, in every namespace."""
        await self.store.delete_thread(str(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every object of the source thread to the target thread, byte for byte."""
        await self.store.copy_thread(str(source_thread_id), str(target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (and the values it
        builds on), erase the rest; ``delete``: erase the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"RewindSaver.prune: unknown strategy {strategy!r}; use 'keep_latest' or 'delete'")
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                await self.store.delete_thread(thread_id)
                continue
            by_ns: dict[str, list[str]] = {}
            for _k, parsed in await self.store.record_keys(self.layout.thread(thread_id)):
                by_ns.setdefault(parsed.checkpoint_ns, []).append(parsed.checkpoint_id)
            for ns, ids in by_ns.items():
                kept = await self.store.record(thread_id, ns, max(ids))
                if kept is not None and "counters_since_delta_snapshot" in self._loads(kept.metadata, kept.key):
                    raise UsageError(
                        f"RewindSaver.prune: thread {thread_id!r} uses LangGraph's DeltaChannel, whose state is "
                        "rebuilt from the writes of earlier checkpoints; keep_latest would lose it. Use "
                        "strategy='delete' or delete_thread"
                    )
                await self.store.erase(thread_id, ns, set(ids) - {max(ids)})

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Erase every checkpoint whose metadata names one of ``run_ids`` (and its writes);
        this reads every checkpoint record of the store once."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        keys = await self.store.record_keys(self.layout.all_threads())
        doomed: dict[tuple[str, str], set[str]] = {}
        for start in range(0, len(keys), 256):
            for record in await self.store.records_at(keys[start:start + 256]):
                if record.run_id in wanted:
                    doomed.setdefault((record.thread_id, record.checkpoint_ns), set()).add(record.checkpoint_id)
        for (thread_id, ns), ids in doomed.items():
            await self.store.erase(thread_id, ns, ids)


class _LoopThread:
    """A private event loop on a thread of its own, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Awaitable[T]) -> Future[T]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=serve, name="rewind-langgraph-saver", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            loop = self._loop
        if threading.current_thread() is self._thread:
            raise UsageError("RewindSaver was called from its own store thread; call it from the graph's thread")
        return asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]

    @property
    def running(self) -> bool:
        return self._loop is not None

    def stop(self, last: Awaitable[None]) -> None:
        """Run `last` on the loop (closing connections), then stop the thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(last, loop).result()  # type: ignore[arg-type]
        loop.call_soon_threadsafe(loop.stop)
        assert thread is not None
        thread.join()
        loop.close()


class RewindSaver(BaseCheckpointSaver[int]):
    """LangGraph checkpoints in a Rewind object store, for sync graphs (``invoke``) and async ones.

    The store is driven from a private event loop on a thread of its own,
    started on first use; ``close()`` (or leaving ``with``) stops it.
    """

    def __init__(
        self,
        objects: ObjectStore,
        *,
        serde: SerializerProtocol | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int = 32,
    ) -> None:
        self._inner = AsyncRewindSaver(objects, serde=serde, prefix=prefix, concurrency=concurrency)
        super().__init__(serde=self._inner.serde)
        self._runner = _LoopThread()

    @classmethod
    def from_url(
        cls, url: str, *, endpoint_url: str | None = None, region_name: str | None = None, **options: Any,
    ) -> RewindSaver:
        """A saver on a ``REWIND_STORE``-style URL (a local folder or ``s3://bucket/prefix``).
        Use as ``with RewindSaver.from_url(url) as saver:`` to stop its thread and connections."""
        return cls(open_object_store(url, endpoint_url=endpoint_url, region_name=region_name), **options)

    @property
    def objects(self) -> ObjectStore:
        return self._inner.objects

    @property
    def layout(self) -> Layout:
        return self._inner.layout

    def __enter__(self) -> RewindSaver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> RewindSaver:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.close)

    def with_allowlist(self, extra_allowlist: Any) -> RewindSaver:
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            # The clone shares the loop thread, the store and the caches (they hold bytes, not objects).
            inner = copy.copy(self._inner)
            inner.serde = clone.serde
            clone._inner = inner  # type: ignore[attr-defined]
        return clone  # type: ignore[return-value]

    def close(self) -> None:
        """Close the store's connections and stop the saver's thread (it may be used again afterwards)."""
        coro = self._inner.aclose()
        if self._runner.running:
            self._runner.stop(coro)
        else:
            coro.close()

    def _submit(self, coro: Awaitable[T]) -> Future[T]:
        return self._runner.submit(coro)

    def _run(self, coro: Awaitable[T]) -> T:
        return self._submit(coro).result()

    async def _arun(self, coro: Awaitable[T]) -> T:
        return await asyncio.wrap_future(self._submit(coro))

    # -- sync ------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._inner.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        found = self._inner.alist(config, filter=filter, before=before, limit=limit)
        try:
            while True:
                try:
                    yield self._run(found.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if self._runner.running:
                self._run(found.aclose())

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self._run(self._inner.aput(config, checkpoint, metadata, new_versions))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._run(self._inner.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._inner.adelete_thread(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._inner.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(self._inner.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._inner.adelete_for_runs(run_ids))

    # -- async (from another event loop) --------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._inner.aget_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = self._inner.alist(config, filter=filter, before=before, limit=limit)
        try:
            while True:
                try:
                    yield await self._arun(found.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            await self._arun(found.aclose())

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self._arun(self._inner.aput(config, checkpoint, metadata, new_versions))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self._arun(self._inner.aput_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._inner.adelete_thread(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._inner.acopy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._inner.aprune(thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._inner.adelete_for_runs(run_ids))
