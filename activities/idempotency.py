"""The idempotency record of side-effecting tool calls.

After a side-effecting tool returns, its result is recorded under the call's
idempotency key. A retry of that call (a worker crash after the effect, a
timeout, a zombie attempt) finds the record and returns the recorded result
without running the tool again.

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

from checkpoint_bridge.errors import CheckpointNotFoundError
from checkpoint_bridge.objects import ObjectStore


class IdempotencyLedger:
    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    @staticmethod
    def _key(key: str) -> str:
        prefix = key.split("-", 1)[0]
        if prefix not in ("idem", "comp") or not key[5:].isalnum():
            raise ValueError(f"not an idempotency key: {key!r}")
        return f"idempotency/{key}.json"

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
