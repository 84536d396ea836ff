"""Where a LangGraph thread's objects live in a Rewind store (``RewindSaver``).

    <prefix>/threads/<thread>/<ns>/checkpoints/<checkpoint>.bin      one record per checkpoint
    <prefix>/threads/<thread>/<ns>/channels/<checkpoint>/<channel>.bin
                                                  a channel's value at the version that checkpoint wrote
    <prefix>/threads/<thread>/<ns>/writes/<checkpoint>/<task>.<seq:06d>.bin
                                                  one put_writes call of a task (pending writes)
    <prefix>/threads/<thread>/elements/<sha256>.bin
                                                  a large list element or value, stored once and named
                                                  by its hash (a message both written and appended)

``<ns>`` is ``root`` for LangGraph's root namespace ("") and ``ns-<name>``
for a subgraph's. Listing ``.../checkpoints/`` gives a thread's checkpoints;
each record's first line names its parent (``langgraph_objects``), so a
reader can put them in order without decoding any state.

LangGraph's names (thread ids, namespaces like ``node:<task id>``, channels
like ``__start__`` or ``branch:to:agent``) are free text, so each becomes one
key segment by a reversible escape: ``A-Z a-z 0-9 -`` stay as they are, every
other byte of the UTF-8 text is ``_`` and two hex digits, and a segment that
would start with ``_`` or ``-`` gets ``x.`` in front (an escaped name never
holds a ``.``, so that prefix cannot be part of a name). Every key passes
``check_key``, like every key the rest of the store builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workflows.vocabulary.errors import InvalidIdError, UsageError

from checkpoint_bridge.stores.contract import check_key

__all__ = [
    "DEFAULT_PREFIX", "MAX_SEGMENT", "encode_name", "decode_name", "Layout", "RecordKey",
]

DEFAULT_PREFIX = "langgraph"
# File systems allow 255 bytes per name; leave room for the extensions added here.
MAX_SEGMENT = 200
_KEEP = re.compile(r"[A-Za-z0-9-]")
_ESCAPED = re.compile(r"(?:x\.)?(?:[A-Za-z0-9-]|_[0-9a-f]{2})*")
_ROOT_NS = "root"
_NS = "ns-"


def encode_name(what: str, value: object) -> str:
    """``value`` (a LangGraph name) as one safe key segment; see the module docstring."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"LangGraph {what} {value!r:.80} must be a non-empty string")
    out = []
    for char in value:
        if _KEEP.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"_{b:02x}" for b in char.encode("utf-8", "surrogatepass"))
    text = "".join(out)
    if not text[0].isalnum():
        text = "x." + text
    if len(text) > MAX_SEGMENT:
        raise InvalidIdError(
            f"LangGraph {what} {value!r:.60} is too long to be stored ({len(text)} characters once escaped, "
            f"at most {MAX_SEGMENT}); use a shorter {what}"
        )
    return text


def decode_name(segment: str) -> str | None:
    """The name a segment was made from; None if ``encode_name`` could not have made it."""
    if not segment or not _ESCAPED.fullmatch(segment):
        return None
    body = segment[2:] if segment.startswith("x.") else segment
    raw = bytearray()
    i = 0
    while i < len(body):
        if body[i] == "_":
            raw.append(int(body[i + 1:i + 3], 16))
            i += 3
        else:
            raw.extend(body[i].encode())
            i += 1
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def _ns_segment(checkpoint_ns: str) -> str:
    if not isinstance(checkpoint_ns, str):
        raise UsageError(f"LangGraph checkpoint_ns {checkpoint_ns!r:.80} must be a string ('' for the root graph)")
    return _ROOT_NS if checkpoint_ns == "" else _NS + encode_name("checkpoint_ns", checkpoint_ns)


def _ns_name(segment: str) -> str | None:
    if segment == _ROOT_NS:
        return ""
    return decode_name(segment[len(_NS):]) if segment.startswith(_NS) else None


@dataclass(frozen=True)
class RecordKey:
    """A checkpoint record's key, decoded."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


@dataclass(frozen=True)
class Layout:
    """Keys of the LangGraph objects under one prefix of an object store."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        try:
            check_key(self.prefix)
        except InvalidIdError as exc:
            raise UsageError(f"RewindSaver prefix {self.prefix!r}: {exc}") from exc

    def all_threads(self) -> str:
        return f"{self.prefix}/threads/"

    def thread(self, thread_id: str) -> str:
        return f"{self.prefix}/threads/{encode_name('thread_id', thread_id)}/"

    def namespace(self, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.thread(thread_id)}{_ns_segment(checkpoint_ns)}/"

    def checkpoints(self, thread_id: str, checkpoint_ns: str) -> str:
        return f"{self.namespace(thread_id, checkpoint_ns)}checkpoints/"

    def record(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
        return f"{self.checkpoints(thread_id, checkpoint_ns)}{encode_name('checkpoint_id', checkpoint_id)}.bin"

    def channels(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> str:
        base = f"{self.namespace(thread_id, checkpoint_ns)}channels/"
        return base if checkpoint_id is None else f"{base}{encode_name('checkpoint_id', checkpoint_id)}/"

    def value(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, channel: str) -> str:
        return f"{self.channels(thread_id, checkpoint_ns, checkpoint_id)}{encode_name('channel', channel)}.bin"

    def writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None = None) -> str:
        base = f"{self.namespace(thread_id, checkpoint_ns)}writes/"
        return base if checkpoint_id is None else f"{base}{encode_name('checkpoint_id', checkpoint_id)}/"

    def element(self, thread_id: str, digest: str) -> str:
        return f"{self.thread(thread_id)}elements/{digest}.bin"

    def task_writes(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str) -> str:
        """The prefix of one task's write objects (followed by ``<seq>.bin``)."""
        return f"{self.writes(thread_id, checkpoint_ns, checkpoint_id)}{encode_name('task_id', task_id)}."

    def write(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str, seq: int) -> str:
        return f"{self.task_writes(thread_id, checkpoint_ns, checkpoint_id, task_id)}{seq:06d}.bin"

    # -- decoding keys ----------------------------------------------------------

    def parse_record(self, key: str) -> RecordKey | None:
        """A checkpoint record's key decoded; None for every other key."""
        parts = key.split("/")
        head = self.prefix.split("/")
        if len(parts) != len(head) + 5 or parts[:len(head)] != head:
            return None
        threads, thread, ns, kind, name = parts[len(head):]
        if threads != "threads" or kind != "checkpoints" or not name.endswith(".bin"):
            return None
        found = decode_name(thread), _ns_name(ns), decode_name(name[:-len(".bin")])
        if any(v is None for v in found):
            return None
        return RecordKey(*found)  # type: ignore[arg-type]

    @staticmethod
    def is_element(key: str) -> bool:
        parts = key.split("/")
        return len(parts) >= 4 and parts[-2] == "elements" and parts[-4] == "threads"

    @staticmethod
    def parse_write_seq(key: str) -> int | None:
        """The ``seq`` of a write object's key; None if it is not one."""
        name = key.rsplit("/", 1)[-1]
        parts = name.rsplit(".", 2)
        if len(parts) != 3 or parts[2] != "bin" or not parts[1].isdigit():
            return None
        return int(parts[1])

    @staticmethod
    def parse_value_owner(key: str) -> tuple[str, str] | None:
        """(checkpoint id, channel) of a value object's key; None if it is not one."""
        parts = key.split("/")
        if len(parts) < 3 or parts[-3] != "channels" or not parts[-1].endswith(".bin"):
            return None
        cid, channel = decode_name(parts[-2]), decode_name(parts[-1][:-len(".bin")])
        return None if cid is None or channel is None else (cid, channel)

    @staticmethod
    def parse_writes_owner(key: str) -> str | None:
        """The checkpoint id a write object belongs to; None if it is not one."""
        parts = key.split("/")
        if len(parts) < 3 or parts[-3] != "writes":
            return None
        return decode_name(parts[-2])
