"""The payload store's references: tool schemas stored once by digest, found
again by any worker, and refused clearly when missing or altered."""

from __future__ import annotations

import pytest

from activities.model.transcript import TranscriptStore, tools_key
from checkpoint_bridge.stores import FileObjectStore
from workflows.vocabulary.errors import TranscriptError

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]


async def test_tool_schemas_by_digest_from_another_workers_store(tmp_path) -> None:
    digest = await TranscriptStore(FileObjectStore(tmp_path)).put_tools(TOOLS)
    assert await TranscriptStore(FileObjectStore(tmp_path)).put_tools(TOOLS) == digest  # same content, same name
    assert await TranscriptStore(FileObjectStore(tmp_path)).tools(digest) == TOOLS  # a cold cache reads the store


async def test_missing_or_altered_tool_schemas_are_a_clear_error(tmp_path) -> None:
    digest = await TranscriptStore(FileObjectStore(tmp_path)).put_tools(TOOLS)
    path = tmp_path / tools_key(digest)
    path.write_bytes(path.read_bytes().replace(b"lookup", b"lookat"))
    with pytest.raises(TranscriptError, match="do not match their hash"):
        await TranscriptStore(FileObjectStore(tmp_path)).tools(digest)
    path.unlink()
    with pytest.raises(TranscriptError, match="missing from .*same REWIND_PAYLOADS"):
        await TranscriptStore(FileObjectStore(tmp_path)).tools(digest)
