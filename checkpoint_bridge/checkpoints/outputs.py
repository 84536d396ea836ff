"""Tool outputs by reference: stored once in the payload store, named in history.

A tool's output would otherwise enter Temporal history three times: as the
tool activity's result, in the next model call's input (the new tool
message) and in the step record the mirror gets. A read-only tool's output
of ``REF_MIN_BYTES`` or more is therefore stored by the tool activity, once,
content-addressed:

    outputs/<2 hex>/<sha256>.json    {"format": "rewind.tool-output/v1", "output": ...}

and history carries its digest: the activity's result has `output_ref`, the
tool message `{"role": "tool", "tool_call_id": ..., OUTPUT_REF: digest}`.
The model-call activity, the live mirror and `rewind mirror` put the output
back (``resolve_messages``, ``resolve_record``) before they send or store
anything, so the model, the transcript and the checkpoints see exactly what
they saw before. Side-effecting tools keep their outputs in history (a
rollback's compensation reads them from there).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.contracts import StepRecord
from workflows.vocabulary.errors import TranscriptError
from workflows.vocabulary.tool_calls import OUTPUT_REF, output_text

from checkpoint_bridge.stores.addressed import get_addressed, put_addressed
from checkpoint_bridge.checkpoints.lru import LRU
from checkpoint_bridge.stores import ObjectStore

__all__ = ["OUTPUT_FORMAT", "REF_MIN_BYTES", "OutputStore", "output_key"]

OUTPUT_FORMAT = "rewind.tool-output/v1"
REF_MIN_BYTES = 512


def output_key(digest: str) -> str:
    return f"outputs/{digest[:2]}/{digest}.json"


class OutputStore:
    def __init__(self, objects: ObjectStore, cache_size: int = 1024, concurrency: int = 16) -> None:
        self._objects = objects
        self._cache: LRU[Any] = LRU(cache_size)
        self._concurrency = concurrency

    @property
    def url(self) -> str:
        return self._objects.url

    async def put(self, output: Any) -> str:
        """Store `output` (JSON) and return its digest; a repeated put is a no-op."""
        digest = await put_addressed(self._objects, output_key,
                                     canonical_json({"format": OUTPUT_FORMAT, "output": output}).encode("utf-8"))
        self._cache.put(digest, _Boxed(output))
        return digest

    async def get(self, digest: str) -> Any:
        cached = self._cache.get(digest)
        if cached is not None:
            return cached.value
        doc = json.loads(await get_addressed(self._objects, output_key(digest), digest, "tool output"))
        if not isinstance(doc, dict) or doc.get("format") != OUTPUT_FORMAT or "output" not in doc:
            raise TranscriptError(f"tool output {digest} in {self._objects.url} has an unknown format")
        self._cache.put(digest, _Boxed(doc["output"]))
        return doc["output"]

    async def _many(self, digests: set[str]) -> dict[str, Any]:
        # Outputs this worker stored or read are answered from memory, without a task each:
        # the common case (the model call and the checkpoint right after the tool call).
        found: dict[str, Any] = {}
        for digest in digests:
            cached = self._cache.get(digest)
            if cached is not None:
                found[digest] = cached.value
        missing = digests - found.keys()
        if missing:
            found.update(await self._read_many(missing))
        return found

    async def _read_many(self, digests: set[str]) -> dict[str, Any]:
        gate = asyncio.Semaphore(self._concurrency)

        async def one(digest: str) -> Any:
            async with gate:
                return await self.get(digest)

        ordered = sorted(digests)
        return dict(zip(ordered, await asyncio.gather(*(one(d) for d in ordered)), strict=True))

    async def resolve_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` with every referenced tool output put back as the message's content."""
        digests = {m[OUTPUT_REF] for m in messages if isinstance(m, dict) and OUTPUT_REF in m}
        if not digests:
            return messages
        found = await self._many(digests)
        return [_resolved(m, found) for m in messages]

    async def resolve_record(self, record: StepRecord) -> StepRecord:
        """The record with its referenced outputs put back (messages and tool calls)."""
        digests = {c.output_ref for c in record.new_tool_calls if c.output_ref is not None}
        digests |= {m[OUTPUT_REF] for m in record.new_messages if isinstance(m, dict) and OUTPUT_REF in m}
        if not digests:
            return record
        found = await self._many(digests)
        calls = [c if c.output_ref is None else c.model_copy(update={"output": found[c.output_ref], "output_ref": None})
                 for c in record.new_tool_calls]
        return record.model_copy(update={"new_messages": [_resolved(m, found) for m in record.new_messages],
                                         "new_tool_calls": calls})


class _Boxed:
    """An output in the cache (None and falsy outputs are cached too)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _resolved(message: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(message, dict) or OUTPUT_REF not in message:
        return message
    out = {k: v for k, v in message.items() if k != OUTPUT_REF}
    out["content"] = output_text(found[message[OUTPUT_REF]])
    return out


def worth_a_reference(output: Any) -> bool:
    """True when `output` is large enough that storing it beats repeating it in history."""
    if output is None:
        return False
    if isinstance(output, str):
        return len(output.encode("utf-8")) >= REF_MIN_BYTES
    try:
        return len(json.dumps(output, ensure_ascii=False).encode("utf-8")) >= REF_MIN_BYTES
    except (TypeError, ValueError):
        return False
