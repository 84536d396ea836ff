"""The stored form of a step: a hashed envelope around a snapshot or a delta.

    {"format": "rewind.checkpoint/v1", "kind": "snapshot" | "delta",
     "schema_version": 3, "sha256": <hex of canonical payload>, "payload": {...}}

A snapshot payload is the whole checkpoint document. A delta payload holds the
checkpoint's scalar fields plus what changed since its parent:

    parent_id, base_message_count, new_messages, base_tool_count,
    new_tool_records, variables_set, variables_removed

Every function here is pure (dicts in, dicts/bytes out); ``CheckpointStore``
does the I/O. Documents are always compared through their canonical JSON,
because Python equality would call ``1``, ``1.0`` and ``True`` the same value.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from workflows.canonical import canonical_json
from workflows.errors import CheckpointError, CorruptCheckpointError, FutureSchemaError

from .migrations import migrate, parse_json_object
from .schema import CURRENT_SCHEMA_VERSION

__all__ = ["FORMAT", "Envelope", "encode", "decode", "make_delta", "apply_delta", "is_prefix"]

FORMAT = "rewind.checkpoint/v1"
_FORMAT_STEM = "rewind.checkpoint/v"
# Fields that accumulate over a run and are therefore stored as differences.
_GROWING = ("messages", "agent_variables", "tool_call_cache")
_DELTA_FIELDS = (
    "base_message_count", "new_messages", "base_tool_count",
    "new_tool_records", "variables_set", "variables_removed",
)
Kind = Literal["snapshot", "delta"]


@dataclass(frozen=True)
class Envelope:
    kind: Kind
    schema_version: int
    payload: dict[str, Any]


def _sha256(payload: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


# A tool record's output is usually also the content of the tool message that
# answered the call. The stored form keeps it once: the record's output is
# dropped and `tool_outputs_in_messages` says where to read it back from
# ("text": the message content as is; "json": the content parsed as JSON).
_OUTPUT_REFS = "tool_outputs_in_messages"
_LISTS = {"snapshot": ("messages", "tool_call_cache"), "delta": ("new_messages", "new_tool_records")}


def _tool_contents(messages: list[Any]) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
        and isinstance(m.get("tool_call_id"), str) and isinstance(m.get("content"), str)
    }


def _compact(kind: Kind, payload: dict[str, Any]) -> dict[str, Any]:
    msgs_field, records_field = _LISTS[kind]
    contents = _tool_contents(payload.get(msgs_field) or [])
    refs: dict[str, str] = {}
    records = []
    for index, record in enumerate(payload.get(records_field) or []):
        content = contents.get(record.get("tool_call_id")) if isinstance(record, dict) else None
        output = record.get("tool_output") if content is not None else None
        how = None
        if content is not None and output is not None:
            if isinstance(output, str):
                how = "text" if output == content else None
            elif canonical_json(output) == _canonical_parsed(content):
                how = "json"
        if how is None:
            records.append(record)
            continue
        refs[str(index)] = how
        records.append({**record, "tool_output": None})
    if not refs:
        return payload
    return {**payload, records_field: records, _OUTPUT_REFS: refs}


def _canonical_parsed(content: str) -> str | None:
    try:
        return canonical_json(json.loads(content))
    except ValueError:
        return None


def _expand(kind: Kind, payload: dict[str, Any], key: str) -> dict[str, Any]:
    refs = payload.get(_OUTPUT_REFS)
    if refs is None:
        return payload
    msgs_field, records_field = _LISTS[kind]
    records = payload.get(records_field)
    if not isinstance(refs, dict) or not isinstance(records, list):
        raise _corrupt(key, f"has a malformed {_OUTPUT_REFS}")
    contents = _tool_contents(payload.get(msgs_field) or [])
    restored = list(records)
    for index, how in refs.items():
        try:
            record = restored[int(index)]
            content = contents[record["tool_call_id"]]
            restored[int(index)] = {**record, "tool_output": content if how == "text" else json.loads(content)}
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            raise _corrupt(key, f"has a tool output reference {index!r} that points nowhere ({exc})") from None
    out = {k: v for k, v in payload.items() if k != _OUTPUT_REFS}
    out[records_field] = restored
    return out


def encode(kind: Kind, payload: dict[str, Any]) -> bytes:
    """The canonical bytes of an envelope (deterministic for equal payloads)."""
    payload = _compact(kind, payload)
    try:
        envelope = {
            "format": FORMAT,
            "kind": kind,
            "schema_version": CURRENT_SCHEMA_VERSION,
            "sha256": _sha256(payload),
            "payload": payload,
        }
        return canonical_json(envelope).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CheckpointError(
            f"checkpoint {payload.get('checkpoint_id')} holds text that is not valid Unicode ({exc}); "
            "scrub lone surrogates (workflows.text.scrub_surrogates) before storing"
        ) from exc


def _corrupt(key: str, problem: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"checkpoint object {key} {problem}; restore it from a backup, or delete the run's "
        "checkpoints and rebuild them from history with `rewind mirror RUN`"
    )


def _check_format(value: Any, key: str) -> None:
    if value == FORMAT:
        return
    if isinstance(value, str) and value.startswith(_FORMAT_STEM) and value[len(_FORMAT_STEM):].isdigit():
        raise FutureSchemaError(
            f"checkpoint object {key} uses storage format {value!r}, newer than {FORMAT!r}; "
            "upgrade rewind to read it"
        )
    raise _corrupt(key, f"has format {value!r:.60}, expected {FORMAT!r}")


def decode(data: bytes, key: str) -> Envelope:
    """Parse and verify one stored object; every failure names ``key``."""
    raw = parse_json_object(data, key)
    _check_format(raw.get("format"), key)
    version = raw.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _corrupt(key, f"has schema_version {version!r}")
    if version > CURRENT_SCHEMA_VERSION:
        raise FutureSchemaError(
            f"checkpoint object {key} has schema_version {version}, newer than the "
            f"{CURRENT_SCHEMA_VERSION} this Rewind understands; upgrade rewind to read it"
        )
    kind, payload = raw.get("kind"), raw.get("payload")
    if kind not in ("snapshot", "delta"):
        raise _corrupt(key, f"has kind {kind!r:.60}, expected 'snapshot' or 'delta'")
    if not isinstance(payload, dict):
        raise _corrupt(key, "has no payload object")
    try:
        digest = _sha256(payload)
    except UnicodeEncodeError:
        raise _corrupt(key, "holds text that is not valid Unicode (a lone surrogate)") from None
    if raw.get("sha256") != digest:
        raise _corrupt(key, "does not match its sha256 (the bytes were changed after writing)")
    if kind == "delta":
        missing = [f for f in ("parent_id", *_DELTA_FIELDS) if f not in payload]
        if missing:
            raise _corrupt(key, f"is a delta without {', '.join(missing)}")
    return Envelope(kind, version, _expand(kind, payload, key))


def is_prefix(shorter: list[Any], longer: list[Any]) -> bool:
    """True if ``shorter`` equals the start of ``longer``, value for value."""
    if len(shorter) > len(longer):
        return False
    return canonical_json(shorter) == canonical_json(longer[: len(shorter)])


def make_delta(doc: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any] | None:
    """A delta payload turning ``parent`` into ``doc``; ``None`` if ``doc`` did not grow from it.

    Both are plain checkpoint documents at the current schema version.
    """
    old_msgs, new_msgs = parent["messages"], doc["messages"]
    old_tools, new_tools = parent["tool_call_cache"], doc["tool_call_cache"]
    if not (is_prefix(old_msgs, new_msgs) and is_prefix(old_tools, new_tools)):
        return None
    old_vars, new_vars = parent["agent_variables"], doc["agent_variables"]
    payload = {k: v for k, v in doc.items() if k not in _GROWING}
    payload.update(
        base_message_count=len(old_msgs),
        new_messages=new_msgs[len(old_msgs):],
        base_tool_count=len(old_tools),
        new_tool_records=new_tools[len(old_tools):],
        variables_set={
            k: v for k, v in new_vars.items()
            if k not in old_vars or canonical_json(old_vars[k]) != canonical_json(v)
        },
        variables_removed=sorted(k for k in old_vars if k not in new_vars),
    )
    return payload


def _list_field(payload: dict[str, Any], name: str, key: str) -> list[Any]:
    value = payload[name]
    if not isinstance(value, list):
        raise _corrupt(key, f"has a non-list {name}")
    return value


def apply_delta(parent: dict[str, Any], payload: dict[str, Any], key: str) -> dict[str, Any]:
    """Rebuild the full current-version document from its parent's document and a delta.

    The result shares message dicts with ``parent`` (never mutated), so a chain
    of cached checkpoints costs one list of references per step, not a copy.
    """
    base_msgs, base_tools = parent["messages"], parent["tool_call_cache"]
    if payload["base_message_count"] != len(base_msgs) or payload["base_tool_count"] != len(base_tools):
        raise _corrupt(
            key,
            f"expects a parent with {payload['base_message_count']} messages and "
            f"{payload['base_tool_count']} tool records, but parent {payload['parent_id']} has "
            f"{len(base_msgs)} and {len(base_tools)}",
        )
    variables_set, removed = payload["variables_set"], payload["variables_removed"]
    if not (isinstance(variables_set, dict) and isinstance(removed, list) and all(isinstance(k, str) for k in removed)):
        raise _corrupt(key, "has malformed variables_set / variables_removed")
    gone = set(removed)
    variables = {k: v for k, v in parent["agent_variables"].items() if k not in gone}
    variables.update(variables_set)
    doc = {k: v for k, v in payload.items() if k not in _DELTA_FIELDS}
    doc.update(
        messages=base_msgs + _list_field(payload, "new_messages", key),
        tool_call_cache=base_tools + _list_field(payload, "new_tool_records", key),
        agent_variables=variables,
    )
    # An old delta over an already-upgraded parent: migrations only fill gaps.
    return migrate(doc, key)
