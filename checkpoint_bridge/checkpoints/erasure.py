"""Erasing runs from the stores: the one exception to "objects are never overwritten".

The checkpoint store keeps everything of a run under one prefix
(`runs/<run>/`: every branch and revision, steps, rollback markers, packs),
so a run's checkpoints go with one listing and one prefix deletion. The
payload store is content-addressed (transcript segments, tool outputs,
Temporal payloads, named by the sha256 of their bytes) and shared by every
run, so what to delete there is decided above (rewind/erasure.py, from the
Temporal histories that name the objects) and deleted here key by key.

Deleting is idempotent: a key that is already gone counts as not removed and
is no error, so a deletion that stopped part way is finished by running it
again. Counts say what was really there.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from datetime import datetime
from typing import Iterable

from workflows.vocabulary.errors import CheckpointError, CorruptCheckpointError
from workflows.vocabulary.ids import checkpoint_id

from checkpoint_bridge.checkpoints.chain import decode_as, read_many
from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.layout import parse_key, run_prefix, step_key
from checkpoint_bridge.document.migrations import migrate
from checkpoint_bridge.stores import ObjectStore
from checkpoint_bridge.checkpoints.store import CheckpointStore

__all__ = [
    "IDEMPOTENCY_KEY", "PartialDeletion", "run_object_keys", "delete_run_objects", "delete_keys",
    "idempotency_keys_in", "last_checkpoint_at",
]

# The two forms of idempotency key: `idem-` (workflows/vocabulary/tool_calls.idempotency_key) and
# `comp-` (checkpoint_bridge/compensation.compensation_key), 40 hex digits each.
IDEMPOTENCY_KEY = re.compile(rb"(?<![A-Za-z0-9])(?:idem|comp)-[0-9a-f]{40}(?![0-9a-f])")


class PartialDeletion(Exception):
    """`delete_keys` stopped on a store error after removing `removed` objects."""

    def __init__(self, removed: int, error: CheckpointError) -> None:
        super().__init__(str(error))
        self.removed = removed
        self.error = error


async def run_object_keys(store: CheckpointStore, run_id: str) -> list[str]:
    """Every object the checkpoint store holds for the run (all branches, steps, markers, packs)."""
    return await store.objects.list(run_prefix(run_id))


async def delete_run_objects(store: CheckpointStore, run_id: str) -> int:
    """Delete the run's whole prefix; returns how many objects were there."""
    keys = await run_object_keys(store, run_id)
    if keys:
        await store.objects.delete_prefix(run_prefix(run_id))
    return len(keys)


async def delete_keys(objects: ObjectStore, keys: Iterable[str], *, concurrency: int = 16) -> int:
    """Delete `keys` (bounded parallel requests); returns how many were there.

    Raises `PartialDeletion` (with the count so far) if the store fails on some.
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(key: str) -> bool:
        async with gate:
            return await objects.delete(key)

    outcomes = await asyncio.gather(*(one(k) for k in sorted(set(keys))), return_exceptions=True)
    removed = sum(1 for o in outcomes if o is True)
    for outcome in outcomes:
        if isinstance(outcome, CheckpointError):
            raise PartialDeletion(removed, outcome)
        if isinstance(outcome, BaseException):
            raise outcome
    return removed


async def idempotency_keys_in(store: CheckpointStore, run_id: str) -> set[str]:
    """The idempotency keys the run's step objects name (its side-effecting calls'
    records; the history names them too, unless Temporal no longer has it).

    Step objects are JSON (gzip'd or plain): a pattern over their JSON finds the keys
    without rebuilding a single checkpoint. Packs are copies of the same content."""
    keys = [k for k in await run_object_keys(store, run_id) if parse_key(k) is not None]
    found = await read_many(store.objects, keys, 32)
    return {m.decode() for key, data in found.items() if data for m in IDEMPOTENCY_KEY.findall(_scannable(data, key))}


def _scannable(data: bytes, key: str) -> bytes:
    """An object's JSON to look for keys in. A damaged gzip'd object does not stop the
    deletion (it goes with the run): whatever of it still inflates is searched, as the
    bytes of a damaged plain object are."""
    try:
        return object_json(data, key)
    except CorruptCheckpointError:
        inflate, out = zlib.decompressobj(16 + zlib.MAX_WBITS), []
        for at in range(0, len(data), 4096):  # in pieces: what came before the damage is kept
            try:
                out.append(inflate.decompress(data[at:at + 4096]))
            except zlib.error:
                break
        return b"".join(out)


async def last_checkpoint_at(store: CheckpointStore, run_id: str) -> datetime | None:
    """When the run's newest checkpoint (of any branch) was made, by its `created_at`
    (the step's time in its workflow, so a rebuilt run keeps it); None: no checkpoint.

    Reads one object per branch: the highest step of each."""
    heads: dict[str, int] = {}
    for key in await run_object_keys(store, run_id):
        parsed = parse_key(key)
        if parsed is not None and parsed.kind == "step":
            heads[parsed.branch_id] = max(heads.get(parsed.branch_id, -1), parsed.step_index)
    keys = {step_key(run_id, branch, step): checkpoint_id(run_id, branch, step) for branch, step in heads.items()}
    found = await read_many(store.objects, list(keys), 32)
    newest: datetime | None = None
    for key, data in found.items():
        if data is None:
            continue  # deleted between listing and reading
        fields = migrate(decode_as(keys[key], key, data).payload, key)
        try:
            made = datetime.fromisoformat(str(fields["created_at"]).replace("Z", "+00:00"))
        except (KeyError, ValueError) as exc:
            raise CorruptCheckpointError(
                f"checkpoint object {key} has no valid created_at; rebuild the run with `rewind mirror {run_id}`"
            ) from exc
        newest = made if newest is None or made > newest else newest
    return newest
