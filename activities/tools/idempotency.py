"""The idempotency record of side-effecting tool calls.

After a side-effecting tool returns, its result is recorded under the call's
idempotency key. A retry of that call (a worker crash after the effect, a
timeout, a zombie attempt) finds the record and returns the recorded result
without running the tool again.

Where the records live: in the payload store (`REWIND_PAYLOADS`), beside the
transcript segments, not in the checkpoint store. A run cannot take a step
without the payload store anyway, while the checkpoint store is an archive
the run may outpace (the mirror catches up); so a side-effecting tool adds no
dependency on a store the run could otherwise do without.

What the record is for: Temporal's history already holds the result of every
completed call, and a completed call is never run again. The record only
closes the window between the effect and the completion reaching Temporal (a
worker killed in between). So writing it is best effort: if the store refuses
the write, the effect still happened and the call is reported as it went (the
tool runner logs the failed write), and only that call's crash window stays
open. Reading it before a retry is not best effort: if the store cannot say
whether an earlier attempt ran, the attempt fails before running the tool
and Temporal retries it.

What this cannot close alone: a crash after the tool's effect but before the
record is written. The retry then runs the tool again with the SAME key, so a
tool that makes its effect conditional on the key (an outbox file named by
it, an `Idempotency-Key` header, a unique constraint) is effectively-once.
Rewind guarantees the key is stable; the tool uses it.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from checkpoint_bridge.stores import ObjectStore
from workflows.vocabulary.errors import CheckpointNotFoundError


def record_key(key: str) -> str:
    """Where the record of idempotency key `key` (`idem-...`, `comp-...`) lives in the payload store."""
    prefix = key.split("-", 1)[0]
    if prefix not in ("idem", "comp") or not key[5:].isalnum():
        raise ValueError(f"not an idempotency key: {key!r}")
    return f"idempotency/{key}.json"


class IdempotencyLedger:
    """Records in `objects`: the payload store (see the module docstring)."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    _key = staticmethod(record_key)

    async def recorded(self, key: str) -> dict[str, Any] | None:
        try:
            raw = await self._objects.get(self._key(key))
        except CheckpointNotFoundError:
            return None
        return json.loads(raw)

    async def record(self, key: str, tool_name: str, output: Any) -> None:
        doc = {
            "idempotency_key": key,
            "tool_name": tool_name,
            "output": output,
            "recorded_at": datetime.now(timezone.utc).isoformat(),
        }
        data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        # A concurrent attempt may have recorded first: the first record wins and
        # the later (different timestamp) one is not written.
        existing = await self.recorded(key)
        if existing is None:
            try:
                await self._objects.put_if_absent(self._key(key), data)
            except Exception:
                if await self.recorded(key) is None:
                    raise
