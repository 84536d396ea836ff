"""Upgrading old checkpoint documents, and loading any document safely.

Each migration is a pure function from a plain dict of version N to a new
dict of version N+1; ``load_document`` runs the chain and only then validates,
so a document either loads completely at the current version or raises. A
document newer than this code raises ``FutureSchemaError`` instead of being
read partially.

Migrations only add what an older version lacked (``setdefault``), so running
one over a dict that already has the newer fields is harmless; the store
relies on that when it merges an old delta onto an already-upgraded parent.

History of the schema:
  v1  no ``branch_id`` (every run had one line of steps, ids were ``run:step``)
      and no ``llm_cost_usd``.
  v2  ``branch_id`` (default "main"), ``llm_cost_usd``; ids ``run:branch:step``.
  v3  ledger fields ``prompt_tokens``, ``completion_tokens``, ``model``,
      ``model_view`` (what compression did), ``ledger`` (per step / branch).
  v4  tool records may carry ``approval`` (a person's decision on the call) and
      ``reused`` (the earlier effect whose result the call returned); both are
      left out when absent, so a v3 document only changes its version.
  v5  tool records' ``attempts`` (absent: 1) and the ledgers' retry counts (absent: 0).
  v6  sub-agents and redo: tool records may carry ``subagent``, ``answered_from`` and
      ``redo_of``, checkpoints ``agent``, ledgers ``subagent_*``; all left out when
      absent, so a v5 document only changes its version.
  v7  tool records' ``dry_run`` (a dry-run branch's call whose effect did not happen),
      absent when false.
  v8  ``pipeline``: which call of a pipeline's code a step is (absent for the agent loop's
      steps), so a v7 document only changes its version.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from pydantic import ValidationError

from workflows.vocabulary.errors import CorruptCheckpointError, FutureSchemaError

from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION, AgentCheckpoint

__all__ = ["MIGRATIONS", "migrate", "parse_json_object", "validate_document", "load_document"]

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def _v1_id_to_v2(value: Any, branch_id: str) -> Any:
    # v1 ids were "run:step"; v2 put the branch in the middle.
    if isinstance(value, str) and value.count(":") == 1:
        run_id, step = value.split(":")
        return f"{run_id}:{branch_id}:{step}"
    return value


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    out.setdefault("branch_id", "main")
    out.setdefault("llm_cost_usd", 0.0)
    out["checkpoint_id"] = _v1_id_to_v2(out.get("checkpoint_id"), out["branch_id"])
    out["parent_id"] = _v1_id_to_v2(out.get("parent_id"), out["branch_id"])
    out["schema_version"] = 2
    return out


def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    out.setdefault("prompt_tokens", 0)
    out.setdefault("completion_tokens", 0)
    out.setdefault("model", None)
    out.setdefault("model_view", None)
    out.setdefault("ledger", None)
    out["schema_version"] = 3
    return out


def _v3_to_v4(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "schema_version": 4}


def _v4_to_v5(doc: dict[str, Any]) -> dict[str, Any]:
    # v5 added tool records' `attempts` (absent: 1) and the ledgers' retry counts (absent: 0).
    return {**doc, "schema_version": 5}


def _v5_to_v6(doc: dict[str, Any]) -> dict[str, Any]:
    # v6 added sub-agent and redo fields, each absent when unused.
    return {**doc, "schema_version": 6}


def _v6_to_v7(doc: dict[str, Any]) -> dict[str, Any]:
    # v7 added tool records' `dry_run`, absent when false.
    return {**doc, "schema_version": 7}


def _v7_to_v8(doc: dict[str, Any]) -> dict[str, Any]:
    # v8 added the checkpoint's `pipeline` (a pipeline's step), absent otherwise.
    return {**doc, "schema_version": 8}


MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6,
                                    6: _v6_to_v7, 7: _v7_to_v8}
"""``MIGRATIONS[n]`` turns a version-n document into a version-(n+1) one."""


def _version_of(doc: dict[str, Any], name: str) -> int:
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CorruptCheckpointError(
            f"checkpoint document {name} has schema_version {version!r}; expected an integer "
            f"1..{CURRENT_SCHEMA_VERSION}. Restore the object from a backup or rebuild it "
            "from history with `rewind mirror RUN`"
        )
    if version > CURRENT_SCHEMA_VERSION:
        raise FutureSchemaError(
            f"checkpoint document {name} has schema_version {version}, newer than the "
            f"{CURRENT_SCHEMA_VERSION} this Rewind understands; upgrade rewind to read it"
        )
    return version


def migrate(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """Return ``doc`` upgraded to ``CURRENT_SCHEMA_VERSION`` (the input is not modified)."""
    version = _version_of(doc, name)
    while version < CURRENT_SCHEMA_VERSION:
        doc = MIGRATIONS[version](doc)
        version += 1
    return doc


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


# One decoder for every object (json.loads with options builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_json_object(raw: bytes | memoryview | str, name: str) -> dict[str, Any]:
    """Parse strict JSON (no NaN/Infinity, no object hooks) that must be an object."""
    try:
        text = raw if isinstance(raw, str) else str(raw, "utf-8")
        if text.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        value = _DECODER.decode(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(
            f"checkpoint object {name} is not valid JSON ({exc}); restore it from a backup "
            "or delete it and rebuild it from history with `rewind mirror RUN`"
        ) from exc
    if not isinstance(value, dict):
        raise CorruptCheckpointError(
            f"checkpoint object {name} holds a JSON {type(value).__name__}, not an object; "
            "restore it from a backup or delete it and rebuild it with `rewind mirror RUN`"
        )
    return value


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "document"
        parts.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def validate_document(doc: dict[str, Any], name: str) -> AgentCheckpoint:
    """Migrate a plain dict to the current version and validate it as a whole."""
    current = migrate(doc, name)
    try:
        return AgentCheckpoint.model_validate(current)
    except ValidationError as exc:
        raise CorruptCheckpointError(
            f"checkpoint document {name} is not a valid AgentCheckpoint ({_describe(exc)}); "
            "restore it from a backup or rebuild it from history with `rewind mirror RUN`"
        ) from exc


def load_document(raw: bytes | str | dict[str, Any], name: str) -> AgentCheckpoint:
    """Load a standalone checkpoint document (e.g. a ``rewind export`` file) of any known version.

    ``name`` (a file name, object key or checkpoint id) appears in every error.
    """
    doc = raw if isinstance(raw, dict) else parse_json_object(raw, name)
    return validate_document(doc, name)
