"""Checkpoint bridge: the AgentCheckpoint document, its stores, and (elsewhere) projection.

Public names are re-exported lazily: workflow code imports
``checkpoint_bridge.canonical`` inside Temporal's sandbox, and importing this
package must not drag pydantic, aioboto3 or aiohttp in with it.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "canonical_json": "canonical",
    "cache_key": "canonical",
    "CheckpointError": "errors",
    "CheckpointNotFoundError": "errors",
    "CorruptCheckpointError": "errors",
    "FutureSchemaError": "errors",
    "CheckpointExistsError": "errors",
    "StoreUnavailableError": "errors",
    "validate_id": "ids",
    "checkpoint_id": "ids",
    "parse_checkpoint_id": "ids",
    "short_id": "ids",
    "CURRENT_SCHEMA_VERSION": "schema",
    "AgentCheckpoint": "schema",
    "ToolCallRecord": "schema",
    "CheckpointStatus": "schema",
    "CheckpointSummary": "schema",
    "dump_checkpoint": "schema",
    "load_document": "migrations",
    "ObjectStore": "objects",
    "FileObjectStore": "objects",
    "S3ObjectStore": "objects",
    "open_object_store": "objects",
    "CheckpointStore": "store",
    "open_checkpoint_store": "store",
    # The operations behind `rewind tree / fork / rollback / diff / mirror`.
    "tree": "inspect",
    "fork": "branching",
    "rollback": "branching",
    "diff": "diff",
    "lineage": "lineage",
    "mirror_run": "mirror",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'checkpoint_bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
