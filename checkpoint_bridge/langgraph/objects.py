"""The stored form of LangGraph checkpoints, channel values and pending writes.

Every object is one line of canonical JSON (its header) and a body of
binary parts, the bytes LangGraph's serializer made (``serde.dumps_typed``):

    {"format": "rewind.langgraph.<kind>/v1", ..., "types": [...], "sizes": [...], "sha256": "<hex>"}\\n<part><part>...

``sha256`` covers the header (without itself) and the body, so a changed
byte anywhere is found on read; objects are written with ``put_if_absent``
and never replaced. The header alone says how the object fits with the
others (a record's parent, a value's base), so tools can walk a thread
without deserializing any state.

Kinds:

* ``checkpoint``: a checkpoint record. Header: ``checkpoint_id``,
  ``parent_checkpoint_id``, ``step``, ``source``, ``run_id`` (each left out
  when there is none), and ``channels``:
  for each channel of ``channel_versions``, its version and ``at``, the
  checkpoint whose ``channels/`` folder holds the value (``null``: the
  channel has that version but no value). Parts: the checkpoint without its
  channel values, and the metadata.
* ``value``: a channel value. ``mode`` is ``whole`` (one part, the value),
  ``list`` (a Python list, one part per element) or ``delta``: the value is
  the list stored at ``base`` (a checkpoint of the same thread and
  namespace) followed by this object's elements. ``base_count`` and
  ``base_digest`` (``extend_digest`` over the base's elements) say which
  list the delta extends, so a reader checks every link. A step that
  appends messages to a list channel therefore stores only the new messages:
  storage grows with the content, not with the square of the run's length.
* ``writes``: one ``put_writes`` call: ``task_id``, ``task_path`` and, per
  write, ``[idx, channel, count]``: ``count`` parts holding a list's
  elements, or -1 for one part holding the whole value.

A record also holds its small values (``inline``: channel -> [first part,
count], count -1 for a whole value), so a step does not spend an object on a
trigger channel holding ``None``; a record never points at another record's
small values, it copies them.

Elements: a part of ``ELEMENT_MIN`` bytes or more (a value, a list element,
a write) is stored once, as its own object named by its hash
(``<type>\0<bytes>``, ``sha256`` = ``element_digest``), and the part becomes
a reference (type ``rewind.element``, the 32-byte digest). A tool message
that a task wrote and the next checkpoint appended to ``messages`` is then
stored once, not twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.errors import CorruptCheckpointError, FutureSchemaError

__all__ = [
    "CHECKPOINT_FORMAT", "VALUE_FORMAT", "WRITES_FORMAT", "Typed", "StoredObject", "encode_object",
    "decode_object", "element_digest", "element_bytes", "decode_element", "extend_digest", "EMPTY_LIST_DIGEST",
    "REF", "ELEMENT_MIN",
]

_STEM = "rewind.langgraph."
CHECKPOINT_FORMAT = _STEM + "checkpoint/v1"
VALUE_FORMAT = _STEM + "value/v1"
WRITES_FORMAT = _STEM + "writes/v1"
_KNOWN = {CHECKPOINT_FORMAT, VALUE_FORMAT, WRITES_FORMAT}
Typed = tuple[str, bytes]
"""What ``SerializerProtocol.dumps_typed`` returns: a type tag and bytes."""
EMPTY_LIST_DIGEST = hashlib.sha256(b"rewind.langgraph.list").hexdigest()
REF = "rewind.element"
"""The type of a part that names an element object by its digest."""
ELEMENT_MIN = 512


@dataclass(frozen=True)
class StoredObject:
    header: dict[str, Any]
    parts: list[Typed]


def encode_object(format_: str, header: dict[str, Any], parts: list[Typed]) -> bytes:
    """The bytes of one object (deterministic: equal inputs give equal bytes)."""
    head = {**header, "format": format_, "types": [t for t, _ in parts], "sizes": [len(b) for _, b in parts]}
    body = b"".join(b for _, b in parts)
    line = canonical_json(head).encode("utf-8")
    digest = hashlib.sha256(line + b"\n" + body).hexdigest()
    return canonical_json({**head, "sha256": digest}).encode("utf-8") + b"\n" + body


def _corrupt(key: str, problem: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"LangGraph object {key} {problem}; it was changed or damaged after it was written. Restore it "
        "from a backup, or delete the thread (RewindSaver.delete_thread) and run the graph again"
    )


def decode_object(data: bytes, key: str, format_: str) -> StoredObject:
    """Parse and verify one object of ``format_``; every failure names ``key``."""
    line, newline, body = data.partition(b"\n")
    if not newline:
        raise _corrupt(key, "has no header line")
    try:
        head = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise _corrupt(key, "has a header that is not JSON") from None
    if not isinstance(head, dict):
        raise _corrupt(key, "has a header that is not a JSON object")
    found = head.get("format")
    if found != format_:
        if isinstance(found, str) and found.startswith(_STEM) and found not in _KNOWN:
            raise FutureSchemaError(f"LangGraph object {key} uses format {found!r}, newer than this Rewind "
                                    f"({format_!r}); upgrade rewind to read it")
        raise _corrupt(key, f"has format {found!r:.60}, expected {format_!r}")
    claimed = head.pop("sha256", None)
    try:
        digest = hashlib.sha256(canonical_json(head).encode("utf-8") + b"\n" + body).hexdigest()
    except (TypeError, ValueError):
        raise _corrupt(key, "has a header that is not canonical JSON") from None
    if claimed != digest:
        raise _corrupt(key, "does not match its sha256")
    types, sizes = head.get("types"), head.get("sizes")
    if not (isinstance(types, list) and isinstance(sizes, list) and len(types) == len(sizes)
            and all(isinstance(t, str) for t in types)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sizes)
            and sum(sizes) == len(body)):
        raise _corrupt(key, "has types and sizes that do not describe its body")
    parts, offset = [], 0
    for type_, size in zip(types, sizes):
        parts.append((type_, body[offset:offset + size]))
        offset += size
    return StoredObject(head, parts)


def element_digest(typed: Typed) -> bytes:
    """The digest of one serialized part (its type tag and bytes); for a reference, the
    digest it names (so a list's digest does not depend on where its elements are)."""
    if typed[0] == REF:
        return typed[1]
    return hashlib.sha256(element_bytes(typed)).digest()


def element_bytes(typed: Typed) -> bytes:
    """The bytes of an element object: what its name is the sha256 of."""
    return typed[0].encode("utf-8") + b"\0" + typed[1]


def decode_element(data: bytes, key: str, digest: bytes) -> Typed:
    if hashlib.sha256(data).digest() != digest:
        raise _corrupt(key, "does not match the sha256 it is named by")
    type_, sep, body = data.partition(b"\0")
    if not sep or type_ == REF.encode():
        raise _corrupt(key, "is not an element object")
    return type_.decode("utf-8", "replace"), body


def extend_digest(digest: str, elements: list[bytes]) -> str:
    """The digest of a list that is the list of ``digest`` followed by elements with these digests."""
    for e in elements:
        digest = hashlib.sha256(bytes.fromhex(digest) + e).hexdigest()
    return digest

