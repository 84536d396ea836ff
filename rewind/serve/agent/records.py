"""What the Agent Server API keeps beside the runs: threads and the API's runs, as objects.

A thread is a Rewind run (its id is the run's id), but a thread exists before its first run
(`threads.create()`), has metadata and an owner, and has a line: the branch its runs
continue (a fork after `update_state` at an earlier checkpoint moves it). An API run is a
stretch of that Rewind run: from the thread's head when it was created to where it ended
(the graph's end, an interrupt() it waits on, a cancel). Both are small JSON documents in
the checkpoint store (REWIND_STORE), under `agent-server/`, beside the runs' own objects,
so every deployment keeps them where it keeps its runs.

Objects are immutable once written (the store contract): a record changes by writing its
next version (`.../v00000007.json`, with `put_if_absent`, so two servers cannot both write
the same version: the loser reads again and retries). The newest version is the record.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from checkpoint_bridge.stores import ObjectStore
from workflows.vocabulary.errors import CheckpointExistsError, CheckpointNotFoundError, RunNotFoundError
from workflows.vocabulary.ids import validate_id

PREFIX = "agent-server/"
# A thread deleted through the API: a marker, so its run is not read as a thread again.
FORGOTTEN = PREFIX + "forgotten/"
# How often a write that lost a race reads the record again and retries.
WRITE_TRIES = 8

RunStatus = Literal["pending", "running", "error", "success", "timeout", "interrupted"]
FINAL = ("error", "success", "timeout", "interrupted")


def now() -> datetime:
    return datetime.now(timezone.utc)


def new_id() -> str:
    """An id as the Agent Server gives them (a UUID), also a valid Rewind run id."""
    return str(uuid.uuid4())


class PendingUpdate(BaseModel):
    """`update_state` not yet run: the next run of the thread forks at `step` of `branch` with
    `values` set (a Rewind fork with --set), or continues from there."""

    checkpoint_id: str  # what update_state answered (the thread's checkpoint until the next run)
    branch: str
    step: int
    values: dict[str, Any] = Field(default_factory=dict)
    as_node: str | None = None
    created_at: datetime = Field(default_factory=now)


class ThreadRecord(BaseModel):
    thread_id: str
    created_at: datetime = Field(default_factory=now)
    updated_at: datetime = Field(default_factory=now)
    metadata: dict[str, Any] = Field(default_factory=dict)
    owner: str | None = None  # the identity that created it (REWIND_SERVE_AUTH), None without a hook
    graph_id: str | None = None  # the graph its first run started (MODULE:ATTR)
    branch: str = "main"  # the line its runs continue (a fork's name after update_state + run)
    forks: int = 0  # how many forks its update_state calls made (they are named `thread-fork-N`)
    fork_point: str | None = None  # the checkpoint its line's fork started from (its line before its own steps)
    update: PendingUpdate | None = None
    version: int = 0


class RunRecord(BaseModel):
    run_id: str
    thread_id: str
    assistant_id: str
    graph_id: str
    created_at: datetime = Field(default_factory=now)
    updated_at: datetime = Field(default_factory=now)
    status: RunStatus = "pending"
    metadata: dict[str, Any] = Field(default_factory=dict)
    multitask_strategy: str = "reject"
    kwargs: dict[str, Any] = Field(default_factory=dict)  # what it was created with (input, command, modes, ...)
    owner: str | None = None
    branch: str | None = None  # the storage branch (a workflow of the Rewind run) it runs on, once started
    after: str | None = None  # the event cursor its stream starts after (the head it started from)
    start_step: int = -1  # the thread's head step when it started (-1: a new run)
    webhook: str | None = None
    webhook_sent: bool = False
    error: str | None = None
    version: int = 0


R = TypeVar("R", bound=BaseModel)


class RecordConflict(ValueError):
    """Another writer wrote the version this one would write: read the record again."""


class Shelf(Generic[R]):
    """Records of one kind: each under its own folder, a version an object."""

    def __init__(self, objects: ObjectStore, folder: str, model: type[R]) -> None:
        self.objects, self.folder, self.model = objects, PREFIX + folder, model

    def _dir(self, *parts: str) -> str:
        return self.folder + "".join(f"{validate_id('record', p)}/" for p in parts)

    async def get(self, *parts: str) -> R | None:
        keys = await self.objects.list(self._dir(*parts))
        versions = sorted(k for k in keys if k.rsplit("/", 1)[-1].startswith("v") and k.count("/") ==
                          self._dir(*parts).count("/"))
        for key in reversed(versions):
            try:
                return self.model.model_validate(json.loads(await self.objects.get(key)))
            except CheckpointNotFoundError:
                continue  # deleted as we read: an older version may still be there
        return None

    async def put(self, record: R, *parts: str) -> R:
        """Write `record` as the next version after the one it was read as (`version`); a record
        someone else wrote meanwhile is a conflict: RecordConflict (the caller reads again)."""
        nxt = int(getattr(record, "version")) + 1
        record = record.model_copy(update={"version": nxt, "updated_at": now()})
        data = record.model_dump_json().encode()
        key = f"{self._dir(*parts)}v{nxt:08d}.json"
        try:
            written = await self.objects.put_if_absent(key, data)
        except CheckpointExistsError:  # the other writer's version (other bytes) is there
            written = False
        if not written:
            raise RecordConflict(f"{key} was written meanwhile")
        return record

    async def change(self, parts: tuple[str, ...], edit: Callable[[R], Awaitable[R | None] | R | None]) -> R:
        """Read, `edit` (None: leave as is), write; again when another writer came first."""
        for _ in range(WRITE_TRIES):
            found = await self.get(*parts)
            if found is None:
                raise RunNotFoundError(f"no {self.folder.rsplit('/', 2)[-2][:-1]} {parts[-1]!r}")
            edited = edit(found)
            if hasattr(edited, "__await__"):
                edited = await edited  # type: ignore[misc]
            if edited is None:
                return found
            try:
                return await self.put(edited, *parts)  # type: ignore[arg-type]
            except RecordConflict:
                continue
        raise RunNotFoundError(f"{'/'.join(parts)} changes too often to be written; try again")

    async def ids(self, *parts: str) -> list[str]:
        """The records under `parts` (each its own folder), by id."""
        base = self._dir(*parts)
        found = []
        for key in await self.objects.list(base):
            rest = key[len(base):].split("/")
            if len(rest) == 2 and rest[0] not in found:
                found.append(rest[0])
        return found

    async def delete(self, *parts: str) -> None:
        await self.objects.delete_prefix(self._dir(*parts))


class Records:
    """The threads and runs of the Agent Server API on one object store."""

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects
        self.threads: Shelf[ThreadRecord] = Shelf(objects, "threads/", ThreadRecord)
        self.runs: Shelf[RunRecord] = Shelf(objects, "runs/", RunRecord)

    async def runs_of(self, thread_id: str) -> list[RunRecord]:
        """A thread's runs, oldest first."""
        found = [r for r in [await self.runs.get(thread_id, i) for i in await self.runs.ids(thread_id)] if r]
        return sorted(found, key=lambda r: r.created_at)


__all__ = ["FINAL", "FORGOTTEN", "PREFIX", "PendingUpdate", "RecordConflict", "Records", "RunRecord", "RunStatus", "Shelf",
           "ThreadRecord", "new_id", "now"]
