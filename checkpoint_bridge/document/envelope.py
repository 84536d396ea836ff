"""The stored form of a step: a hashed envelope around a snapshot or a delta.

    {"format": "rewind.checkpoint/v3", "kind": "snapshot" | "delta",
     "schema_version": 8, "sha256": <hex of canonical payload>, "payload": {...}}

A snapshot payload is the whole checkpoint document: only the root of a run
(step 0) is stored whole. Every other step is a delta of its parent (also the
first step of a fork or of a rolled-back revision, whose parent lies on
another branch):

    parent_id, base_message_count, new_messages, base_tool_count,
    new_tool_records, [agent_variables], [system_prompt], chain

`chain` lists, as [branch, first step, last step] ranges, every object from
the root snapshot to the parent: a reader fetches them all at once (one
round of parallel GETs after the head), and a writer extends its parent's
chain without reading anything else. So storage is the content once plus a
little per step, and no step has to be rewritten whole.

Format v3 deltas also carry `blocks_sha256`, a hash chained over the merged
content of every finished block of steps in the chain, and the last step of
a block its own block's `block_sha256` (document/packs.py): what a reader
checks the packs it reads against. Format v2 deltas (without them) are what
an older Rewind wrote; their chains are continued in format v2.

Format v2 also leaves out what the document itself implies (run, branch and
step from the checkpoint id; zero ledger fields; a branch ledger equal to the
total; token totals equal to the ledger's; default values of tool records),
and `decode` puts it back, so every reader sees whole documents. Objects of
format v1 (deltas with `variables_set`/`variables_removed`, snapshots every
few steps) are still read; they are never written any more.

The envelope's canonical JSON is stored gzip'd (``compression="gzip"``, the
default; ``REWIND_STORE_COMPRESSION=none`` stores it plain): text like prose
shrinks to well under half, and the step objects are most of what a run
stores. Every object is gzip'd, however small: gzip's 18 bytes of header and
trailer are less than it saves even on a step that adds one short message
(its digests and field names compress, ~1 KB to ~0.56 KB), so a size
threshold would only add a second form to explain. The header is fixed (no
name, mtime 0), so the same envelope always makes the same bytes (with the
same zlib) and re-mirroring a run writes what it wrote before. ``decode``
reads both forms, told apart by gzip's magic bytes (``1f 8b``; JSON never
starts with them): every plain object an older Rewind wrote loads as before,
and chains may mix the two. ``zcat -f`` prints either form as JSON.

Every function here is pure (dicts in, dicts/bytes out); ``CheckpointStore``
does the I/O. Documents are always compared through their canonical JSON,
because Python equality would call ``1``, ``1.0`` and ``True`` the same value.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from workflows.vocabulary.canonical import cache_key, canonical_json
from workflows.vocabulary.errors import CheckpointError, CorruptCheckpointError, FutureSchemaError
from workflows.vocabulary.ids import parse_checkpoint_id
from workflows.vocabulary.tool_calls import with_system_prompt

from checkpoint_bridge.document.migrations import migrate, parse_json_object
from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION

__all__ = [
    "FORMAT", "FORMAT_V2", "FORMAT_V1", "Envelope", "Chain", "encode", "decode", "make_delta", "apply_delta", "is_prefix",
    "chain_after", "corrupt", "output_source", "Compacted", "compacted", "seal", "Compression", "COMPRESSIONS",
    "compress", "object_json",
]

FORMAT = "rewind.checkpoint/v3"
FORMAT_V2 = "rewind.checkpoint/v2"
FORMAT_V1 = "rewind.checkpoint/v1"
_FORMAT_STEM = "rewind.checkpoint/v"
_KNOWN_FORMATS = {FORMAT_V1: 1, FORMAT_V2: 2, FORMAT: 3}
# Fields that accumulate over a run and are therefore stored as differences.
_GROWING = ("messages", "agent_variables", "tool_call_cache")
_V1_DELTA_FIELDS = (
    "base_message_count", "new_messages", "base_tool_count",
    "new_tool_records", "variables_set", "variables_removed",
)
_V2_DELTA_FIELDS = ("base_message_count", "new_messages", "base_tool_count", "new_tool_records", "chain")
_DIGESTS = ("blocks_sha256", "block_sha256")
_DELTA_ONLY = (*_V1_DELTA_FIELDS, "chain", "system_prompt", *_DIGESTS)
_HEX64 = re.compile(r"[0-9a-f]{64}")
Kind = Literal["snapshot", "delta"]
Chain = list[tuple[str, int, int]]
"""[(branch, first step, last step), ...]: the objects from a root snapshot to a parent, in order."""


@dataclass(frozen=True)
class Envelope:
    kind: Kind
    schema_version: int
    payload: dict[str, Any]
    format_version: int = 3
    chain: Chain | None = None
    """The objects before this one (v2 and v3 deltas; [] for a snapshot, None for v1 objects)."""
    blocks_sha256: str | None = None
    """The digest of the finished blocks in the chain (v3 deltas)."""
    block_sha256: str | None = None
    """The sha256 of the merged block this step finishes (v3 deltas that finish one)."""


def _sha256(payload: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


# -- tool outputs stored once ---------------------------------------------------

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


def _compact_outputs(kind: Kind, payload: dict[str, Any]) -> dict[str, Any]:
    msgs_field, records_field = _LISTS[kind]
    contents = _tool_contents(payload.get(msgs_field) or [])
    refs: dict[str, str] = {}
    records = []
    for index, record in enumerate(payload.get(records_field) or []):
        content = contents.get(record.get("tool_call_id")) if isinstance(record, dict) else None
        how = output_source(record.get("tool_output"), content) if content is not None else None
        if how is None:
            records.append(record)
            continue
        refs[str(index)] = how
        records.append({**record, "tool_output": None})
    if not refs:
        return payload
    return {**payload, records_field: records, _OUTPUT_REFS: refs}


def output_source(output: Any, content: str) -> str | None:
    """How a tool record's output is read back from the content of the tool message that
    answered the call: "text" (the content as is), "json" (parsed), or None (it is not)."""
    if output is None:
        return None
    if isinstance(output, str):
        return "text" if output == content else None
    return "json" if canonical_json(output) == _canonical_parsed(content) else None


def _canonical_parsed(content: str) -> str | None:
    try:
        return canonical_json(json.loads(content))
    except ValueError:
        return None


def _expand_outputs(kind: Kind, payload: dict[str, Any], key: str) -> dict[str, Any]:
    refs = payload.get(_OUTPUT_REFS)
    if refs is None:
        return payload
    msgs_field, records_field = _LISTS[kind]
    records = payload.get(records_field)
    if not isinstance(refs, dict) or not isinstance(records, list):
        raise corrupt(key, f"has a malformed {_OUTPUT_REFS}")
    contents = _tool_contents(payload.get(msgs_field) or [])
    restored = list(records)
    for index, how in refs.items():
        try:
            record = restored[int(index)]
            content = contents[record["tool_call_id"]]
            restored[int(index)] = {**record, "tool_output": content if how == "text" else json.loads(content)}
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            raise corrupt(key, f"has a tool output reference {index!r} that points nowhere ({exc})") from None
    out = {k: v for k, v in payload.items() if k != _OUTPUT_REFS}
    out[records_field] = restored
    return out


# -- what a v2 payload leaves out, and puts back ---------------------------------

_LEDGER_DEFAULTS: dict[str, Any] = {
    "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "cost_usd": 0.0, "model_calls": 0,
    "unpriced_calls": 0, "tool_calls": 0, "cache_hits": 0, "tool_time_ms": 0,
}
# Document fields left out when they hold this value (compared as canonical JSON, so 0 is not 0.0).
_DOC_DEFAULTS: dict[str, Any] = {
    "step_label": "", "status": "completed", "error_info": None, "model_view": None, "ledger": None,
    "model": None,
}
_RECORD_DEFAULTS: dict[str, Any] = {
    "tool_input": {}, "tool_output": None, "duration_ms": 0, "error": None, "cache_key": "",
    "tool_call_id": None, "idempotency_key": None, "side_effects": False, "served_from_cache": False,
}
# Document totals that repeat the total ledger.
_TOTALS = {"llm_tokens_used": "total_tokens", "prompt_tokens": "prompt_tokens",
           "completion_tokens": "completion_tokens", "llm_cost_usd": "cost_usd"}
_DERIVED_IDS = ("run_id", "branch_id", "step_index")


# Scalars whose equality is their JSON text's (not float: -0.0 == 0.0 spells differently).
_PLAIN_SCALARS = (str, int, bool, type(None))


def _same(a: Any, b: Any) -> bool:
    """Whether `a` and `b` have the same canonical JSON (what decides a stored object's bytes)."""
    if type(a) is type(b) and type(a) in _PLAIN_SCALARS:
        return a == b  # most ledger fields and ids: no JSON needed to compare them
    try:
        return canonical_json(a) == canonical_json(b)
    except (TypeError, ValueError):
        return False


def _without_defaults(value: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if not (k in defaults and _same(v, defaults[k]))}


def _with_defaults(value: Any, defaults: dict[str, Any]) -> Any:
    if not isinstance(value, dict):
        return value  # not ours to fix: validation names it
    return {**{k: v for k, v in defaults.items() if k not in value}, **value}


def _compact_ledger(ledger: Any) -> Any:
    if not (isinstance(ledger, dict) and all(isinstance(v, dict) for v in ledger.values())):
        return ledger
    out = {part: _without_defaults(values, _LEDGER_DEFAULTS) for part, values in ledger.items()}
    if "branch" in ledger and "total" in ledger and _same(ledger["branch"], ledger["total"]):
        del out["branch"]  # nothing inherited: the branch's own ledger is the whole line's
    return out


def _expand_ledger(ledger: Any) -> Any:
    if not (isinstance(ledger, dict) and all(isinstance(v, dict) for v in ledger.values())):
        return ledger
    out = {part: _with_defaults(values, _LEDGER_DEFAULTS) for part, values in ledger.items()}
    if "total" in out and "branch" not in out:
        out["branch"] = dict(out["total"])
    return out


def _compact_doc(payload: dict[str, Any], records_field: str) -> dict[str, Any]:
    """A current-version document (or a delta's scalars) without what it implies."""
    if payload.get("schema_version") != CURRENT_SCHEMA_VERSION or "checkpoint_id" not in payload:
        return payload  # an older document (tests, imports) is stored as it is
    try:
        run_id, branch_id, step = parse_checkpoint_id(payload["checkpoint_id"])
    except Exception:  # noqa: BLE001 - a malformed id is kept as it is, and refused on load
        return payload
    out = dict(payload)
    for name, value in zip(_DERIVED_IDS, (run_id, branch_id, step)):
        if name in out and _same(out[name], value):
            del out[name]
    total = (payload.get("ledger") or {}).get("total") if isinstance(payload.get("ledger"), dict) else None
    if isinstance(total, dict):
        for name, field in _TOTALS.items():
            if name in out and field in total and _same(out[name], total[field]):
                del out[name]
    if "ledger" in out:
        out["ledger"] = _compact_ledger(out["ledger"])
    out = _without_defaults(out, _DOC_DEFAULTS)
    if "agent_variables" in out and out["agent_variables"] == {}:
        del out["agent_variables"]
    records = out.get(records_field)
    if isinstance(records, list):
        out[records_field] = [_compact_record(r) for r in records]
    return out


def _compact_record(record: Any) -> Any:
    if not isinstance(record, dict):
        return record
    out = _without_defaults(record, _RECORD_DEFAULTS)
    # The key of a call whose arguments were taken as they are is their hash: recomputed on load.
    if isinstance(out.get("cache_key"), str) and isinstance(out.get("tool_name"), str):
        try:
            if out["cache_key"] == cache_key(out["tool_name"], record.get("tool_input", {})):
                out["cache_key"] = ""
                del out["cache_key"]
        except (TypeError, ValueError):
            pass
    return out


def _expand_record(record: Any) -> Any:
    if not isinstance(record, dict):
        return record
    out = _with_defaults(record, _RECORD_DEFAULTS)
    if out["cache_key"] == "" and "cache_key" not in record and isinstance(out.get("tool_name"), str):
        try:
            out["cache_key"] = cache_key(out["tool_name"], out["tool_input"])
        except (TypeError, ValueError):
            pass  # not JSON: validation names it
    return out


# The first schema version format v2 wrote: every writer since left out what a document
# implies, by the rules above (unchanged since), in the version current when it wrote.
FIRST_COMPACT_SCHEMA = 3


def _expand_doc(payload: dict[str, Any], records_field: str, key: str) -> dict[str, Any]:
    version = payload.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < FIRST_COMPACT_SCHEMA:
        # Older documents were stored whole (imported, or written by tests as they were). A
        # v3+ one was compacted by whatever Rewind wrote it: put back what it left out, then
        # the migrations upgrade it (expanding only current documents made every object of
        # an earlier release unreadable once the schema moved on).
        return payload
    out = dict(payload)
    cid = out.get("checkpoint_id")
    if any(name not in out for name in _DERIVED_IDS):
        try:
            run_id, branch_id, step = parse_checkpoint_id(cid)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001
            raise corrupt(key, f"has checkpoint_id {cid!r:.80}, which is not RUN:BRANCH:STEP") from None
        for name, value in zip(_DERIVED_IDS, (run_id, branch_id, step)):
            out.setdefault(name, value)
    for name, value in _DOC_DEFAULTS.items():
        out.setdefault(name, value)
    out["ledger"] = _expand_ledger(out["ledger"])
    total = out["ledger"].get("total") if isinstance(out["ledger"], dict) else None
    for name, field in _TOTALS.items():
        if name not in out:
            out[name] = total[field] if isinstance(total, dict) and field in total else (0.0 if name == "llm_cost_usd" else 0)
    records = out.get(records_field)
    if isinstance(records, list):
        out[records_field] = [_expand_record(r) for r in records]
    return out


# -- the stored bytes: gzip'd or plain JSON ------------------------------------------

Compression = Literal["gzip", "none"]
COMPRESSIONS: tuple[Compression, ...] = ("gzip", "none")
_GZIP_MAGIC = b"\x1f\x8b"
# Deflate, no flags, mtime 0, no extra flags, OS "unknown": written here rather than by
# gzip.compress, whose header bytes have changed between Python versions.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_GZIP_LEVEL = 6


def compress(data: bytes, compression: Compression = "gzip") -> bytes:
    """The stored form of an object's JSON bytes: gzip'd (always the same bytes for the same
    JSON with one zlib) or, with ``"none"``, the JSON as it is."""
    if compression == "none":
        return data
    if compression != "gzip":
        raise ValueError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return _GZIP_HEADER + zlib.compress(data, _GZIP_LEVEL, -zlib.MAX_WBITS) + trailer


def object_json(data: bytes, key: str) -> bytes:
    """The JSON bytes of a stored object: gunzipped when it is gzip'd, as they are when
    plain (what an older Rewind wrote, or ``REWIND_STORE_COMPRESSION=none``); damaged
    gzip is a ``CorruptCheckpointError`` naming ``key``."""
    if data[:2] != _GZIP_MAGIC:
        return data
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data)
    except zlib.error as exc:
        raise corrupt(key, f"is gzip'd but does not decompress ({exc})") from None
    if not inflate.eof:
        raise corrupt(key, "is gzip'd but cut short (its gzip stream does not end)")
    if inflate.unused_data:
        raise corrupt(key, f"has {len(inflate.unused_data)} stray bytes after its gzip stream")
    return out


# -- envelopes ---------------------------------------------------------------------

def encode(kind: Kind, payload: dict[str, Any], *, chain: Chain | None = None, blocks_sha256: str | None = None,
           block_sha256: str | None = None, compression: Compression = "gzip") -> bytes:
    """The stored bytes of an envelope (deterministic for equal payloads): its canonical
    JSON, gzip'd unless ``compression`` is ``"none"``.

    A snapshot payload is a whole document; a delta payload is the document's
    scalar fields plus the delta fields (`make_delta`), and `chain` the objects
    from the root snapshot to its parent. A delta with `blocks_sha256` (and,
    finishing a block, `block_sha256`) is format v3; one without continues a
    chain an older Rewind began, in format v2.
    """
    return seal(compacted(kind, payload, chain), blocks_sha256, block_sha256, compression=compression)


@dataclass(frozen=True)
class Compacted:
    """A payload as it is stored (``compacted``), before its envelope (``seal``)."""

    kind: Kind
    stored: dict[str, Any]
    checkpoint_id: Any


def compacted(kind: Kind, payload: dict[str, Any], chain: Chain | None = None) -> Compacted:
    """The stored form of a payload, without what it implies (the costly half of ``encode``)."""
    records_field = _LISTS[kind][1]
    stored = _compact_outputs(kind, payload)
    stored = _compact_doc(stored, records_field)
    if kind == "delta":
        if chain is None:
            raise ValueError("a delta needs the chain of objects before it")
        stored["chain"] = [[b, lo, hi] for b, lo, hi in chain]
    return Compacted(kind, stored, payload.get("checkpoint_id"))


def seal(payload: Compacted, blocks_sha256: str | None = None, block_sha256: str | None = None, *,
         compression: Compression = "gzip") -> bytes:
    """The stored envelope of a compacted payload, with the chain's digests of a v3 delta (see ``encode``)."""
    stored, format_ = payload.stored, FORMAT
    if payload.kind == "delta" and blocks_sha256 is None:
        format_ = FORMAT_V2
    elif payload.kind == "delta":
        stored = {**stored, "blocks_sha256": blocks_sha256}
        if block_sha256 is not None:
            stored["block_sha256"] = block_sha256
    try:
        # canonical_json of {"format", "kind", "payload", "schema_version", "sha256"} (its keys in
        # sorted order), with the payload's JSON encoded once: the same for its digest and for
        # the envelope, which a step's write did twice.
        text = canonical_json(stored)
        data = text.encode("utf-8")
        head = canonical_json({"format": format_, "kind": payload.kind})
        tail = canonical_json({"schema_version": CURRENT_SCHEMA_VERSION, "sha256": hashlib.sha256(data).hexdigest()})
        envelope = f'{head[:-1]},"payload":{text},{tail[1:]}'.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CheckpointError(
            f"checkpoint {payload.checkpoint_id} holds text that is not valid Unicode ({exc}); "
            "scrub lone surrogates (workflows.vocabulary.text.scrub_surrogates) before storing"
        ) from exc
    return compress(envelope, compression)


def corrupt(key: str, problem: str) -> CorruptCheckpointError:
    """A damaged object: the error names it and how to recover."""
    return CorruptCheckpointError(
        f"checkpoint object {key} {problem}; restore it from a backup, or delete the run's "
        "checkpoints and rebuild them from history with `rewind mirror RUN`"
    )


def _format_version(value: Any, key: str) -> int:
    if value in _KNOWN_FORMATS:
        return _KNOWN_FORMATS[value]
    if isinstance(value, str) and value.startswith(_FORMAT_STEM) and value[len(_FORMAT_STEM):].isdigit():
        raise FutureSchemaError(
            f"checkpoint object {key} uses storage format {value!r}, newer than {FORMAT!r}; "
            "upgrade rewind to read it"
        )
    raise corrupt(key, f"has format {value!r:.60}, expected {FORMAT!r}")


def _parse_chain(value: Any, key: str) -> Chain:
    if not isinstance(value, list):
        raise corrupt(key, "has a malformed chain")
    out: Chain = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in item[1:])
                and item[1] <= item[2]):
            raise corrupt(key, f"has a malformed chain range {item!r:.80}")
        out.append((item[0], item[1], item[2]))
    return out


def decode(data: bytes, key: str, *, link: bool = False) -> Envelope:
    """Parse and verify one stored object, gzip'd or plain; every failure names ``key``.

    The payload comes back whole: what format v2 leaves out is put back. With
    ``link`` (an object in the middle of a chain being replayed, whose own
    facts the loaded document does not show) only its tool records are put
    back whole; its scalar fields stay as stored.
    """
    data = object_json(data, key)
    raw = parse_json_object(data, key)
    version_of_format = _format_version(raw.get("format"), key)
    version = raw.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise corrupt(key, f"has schema_version {version!r}")
    if version > CURRENT_SCHEMA_VERSION:
        raise FutureSchemaError(
            f"checkpoint object {key} has schema_version {version}, newer than the "
            f"{CURRENT_SCHEMA_VERSION} this Rewind understands; upgrade rewind to read it"
        )
    kind, payload = raw.get("kind"), raw.get("payload")
    if kind not in ("snapshot", "delta"):
        raise corrupt(key, f"has kind {kind!r:.60}, expected 'snapshot' or 'delta'")
    if not isinstance(payload, dict):
        raise corrupt(key, "has no payload object")
    try:
        written = _payload_bytes(data, raw["format"], kind)
        digest = hashlib.sha256(written).hexdigest() if written is not None else _sha256(payload)
    except UnicodeEncodeError:
        raise corrupt(key, "holds text that is not valid Unicode (a lone surrogate)") from None
    if raw.get("sha256") != digest:
        raise corrupt(key, "does not match its sha256 (the bytes were changed after writing)")
    chain: Chain | None = None
    digests: dict[str, str] = {}
    if kind == "delta":
        required = _V1_DELTA_FIELDS if version_of_format == 1 else _V2_DELTA_FIELDS
        if version_of_format >= 3:
            required = (*required, "blocks_sha256")
        missing = [f for f in ("parent_id", *required) if f not in payload]
        if missing:
            raise corrupt(key, f"is a delta without {', '.join(missing)}")
        if version_of_format >= 2:
            chain = _parse_chain(payload["chain"], key)
            for name in _DIGESTS if version_of_format >= 3 else ():
                value = payload.get(name)
                if value is not None and not (isinstance(value, str) and _HEX64.fullmatch(value)):
                    raise corrupt(key, f"has a malformed {name}")
                if value is not None:
                    digests[name] = value
            payload = {k: v for k, v in payload.items() if k != "chain" and k not in _DIGESTS}
    elif version_of_format >= 2:
        chain = []
    records_field = _LISTS[kind][1]
    payload = _expand_outputs(kind, payload, key)
    if version_of_format >= 2 and link and kind == "delta" and payload.get("schema_version") == CURRENT_SCHEMA_VERSION:
        records = payload.get(records_field)
        if isinstance(records, list):
            payload = {**payload, records_field: [_expand_record(r) for r in records]}
    elif version_of_format >= 2:
        payload = _expand_doc(payload, records_field, key)
        if kind == "snapshot":
            payload.setdefault("agent_variables", {})
    return Envelope(kind, version, payload, version_of_format, chain, **digests)


_TAIL = re.compile(rb',"schema_version":[0-9]+,"sha256":"[0-9a-f]{64}"\}\Z')


def _payload_bytes(data: bytes, format_: str, kind: str) -> bytes | None:
    """The payload's bytes as written, when the object is canonical JSON (as `encode`
    writes it): its hash is then the payload's, without serialising it again
    (half of a long chain's load time). None for any other spelling."""
    head = b'{"format":"%s","kind":"%s","payload":' % (format_.encode(), kind.encode())
    if not data.startswith(head):
        return None
    tail = _TAIL.search(data, len(head))
    return data[len(head):tail.start()] if tail is not None else None


def is_prefix(shorter: list[Any], longer: list[Any]) -> bool:
    """True if ``shorter`` equals the start of ``longer``, value for value."""
    if len(shorter) > len(longer):
        return False
    return canonical_json(shorter) == canonical_json(longer[: len(shorter)])


def make_delta(doc: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any] | None:
    """A v2 delta payload turning ``parent`` into ``doc``; ``None`` if ``doc`` did not grow from it.

    Both are plain checkpoint documents at the current schema version. A new
    system message (a fork with another system prompt) is a delta too.
    """
    old_msgs, new_msgs = parent["messages"], doc["messages"]
    old_tools, new_tools = parent["tool_call_cache"], doc["tool_call_cache"]
    if not is_prefix(old_tools, new_tools):
        return None
    system_prompt = None
    if not is_prefix(old_msgs, new_msgs):
        system_prompt = _changed_system_prompt(old_msgs, new_msgs)
        if system_prompt is None:
            return None
    return delta_payload(
        {k: v for k, v in doc.items() if k not in _GROWING},
        base_message_count=len(old_msgs), new_messages=new_msgs[len(old_msgs):],
        base_tool_count=len(old_tools), new_tool_records=new_tools[len(old_tools):],
        agent_variables=doc["agent_variables"], system_prompt=system_prompt,
    )


def _changed_system_prompt(old: list[Any], new: list[Any]) -> str | None:
    """The new system prompt when `new` is `old` (plus more) with only its system message's content changed."""
    first = next((i for i, m in enumerate(new) if isinstance(m, dict) and m.get("role") == "system"), None)
    if first is None or not isinstance(new[first].get("content"), str):
        return None
    prompt = new[first]["content"]
    if len(new) < len(old):
        return None
    rebuilt = with_system_prompt([*old, *new[len(old):]], prompt)
    return prompt if _same(rebuilt, new) else None


def delta_payload(
    scalars: dict[str, Any], *, base_message_count: int, new_messages: list[Any], base_tool_count: int,
    new_tool_records: list[Any], agent_variables: dict[str, Any], system_prompt: str | None,
) -> dict[str, Any]:
    """A v2 delta payload (without its chain, which `encode` adds)."""
    payload = {k: v for k, v in scalars.items() if k not in _GROWING}
    payload.update(
        base_message_count=base_message_count, new_messages=new_messages,
        base_tool_count=base_tool_count, new_tool_records=new_tool_records,
    )
    if agent_variables:
        payload["agent_variables"] = agent_variables
    if system_prompt is not None:
        payload["system_prompt"] = system_prompt
    return payload


def chain_after(chain: Chain, branch_id: str, step: int) -> Chain:
    """`chain` followed by the object (branch, step): the chain of that object's child."""
    if chain and chain[-1][0] == branch_id and chain[-1][2] + 1 == step:
        return [*chain[:-1], (branch_id, chain[-1][1], step)]
    return [*chain, (branch_id, step, step)]


def _list_field(payload: dict[str, Any], name: str, key: str) -> list[Any]:
    value = payload[name]
    if not isinstance(value, list):
        raise corrupt(key, f"has a non-list {name}")
    return value


def apply_delta(parent: dict[str, Any], payload: dict[str, Any], key: str) -> dict[str, Any]:
    """Rebuild the full current-version document from its parent's document and a delta
    (of either format: v1 names changed variables, v2 carries them whole).

    The result shares message dicts with ``parent`` (never mutated), so a chain
    of cached checkpoints costs one list of references per step, not a copy.
    """
    base_msgs, base_tools = parent["messages"], parent["tool_call_cache"]
    if payload["base_message_count"] != len(base_msgs) or payload["base_tool_count"] != len(base_tools):
        raise corrupt(
            key,
            f"expects a parent with {payload['base_message_count']} messages and "
            f"{payload['base_tool_count']} tool records, but parent {payload['parent_id']} has "
            f"{len(base_msgs)} and {len(base_tools)}",
        )
    if "variables_set" in payload:  # format v1
        variables_set, removed = payload["variables_set"], payload["variables_removed"]
        if not (isinstance(variables_set, dict) and isinstance(removed, list) and all(isinstance(k, str) for k in removed)):
            raise corrupt(key, "has malformed variables_set / variables_removed")
        gone = set(removed)
        variables = {k: v for k, v in parent["agent_variables"].items() if k not in gone}
        variables.update(variables_set)
    else:
        variables = payload.get("agent_variables", {})
        if not isinstance(variables, dict):
            raise corrupt(key, "has malformed agent_variables")
    messages = base_msgs + _list_field(payload, "new_messages", key)
    prompt = payload.get("system_prompt")
    if prompt is not None:
        if not isinstance(prompt, str):
            raise corrupt(key, "has a malformed system_prompt")
        messages = with_system_prompt(messages, prompt)
    doc = {k: v for k, v in payload.items() if k not in _DELTA_ONLY}
    doc.update(
        messages=messages,
        tool_call_cache=base_tools + _list_field(payload, "new_tool_records", key),
        agent_variables=variables,
    )
    # An old delta over an already-upgraded parent: migrations only fill gaps.
    return migrate(doc, key)
