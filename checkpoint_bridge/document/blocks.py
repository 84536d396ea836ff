"""The merged content of a finished block of steps: what packs hold (document/packs.py).

A block's steps, replayed one after another, add messages (and maybe change
the system prompt), tool records, and leave the variables of its last step.
Merged, that is one JSON object:

    {"run_id", "branch_id", "first", "last",
     "snapshot": the block starts its chain (a root snapshot; no parent),
     "parent_id", "base_message_count", "base_tool_count": what it extends,
     "messages": [...], "tool_records": [...], "agent_variables": {...},
     ["prompts": [[n, prompt], ...]]   after the block's first n messages, the system prompt became prompt
     ["outputs": [[record, message, "text" | "json"], ...]]   a record's output is that message's content
     ["calls": [[step, m, n, r, s, call], ...]]   the block's step ``first + step`` is a pipeline's
                                                  (``call``: its ``pipeline`` field); its own messages
                                                  are the block's ``messages[m:n]``, its own tool
                                                  records ``tool_records[r:s]``}

The ``calls`` let a fork of a pipeline read the calls it answers again from the
record with the chain's few packs, not one object per recorded call
(``block_calls``). A block of the agent loop's steps has none, and its bytes are
what they were before they existed.

Tool records are whole (defaults and cache keys filled in, as a replay gives
them); an output that is also the content of the tool message answering the
call is stored once, in the message. The content is canonical JSON, so the
same steps always merge to the same bytes: the writer, and a reader that has
to merge a block from its step objects, agree on its sha256, which the
chain's digest covers.

Every function here is pure; chain.py and store.py do the I/O.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.errors import CorruptCheckpointError
from workflows.vocabulary.tool_calls import with_system_prompt

from checkpoint_bridge.document.envelope import Envelope, apply_delta, corrupt, output_source
from checkpoint_bridge.document.migrations import migrate, parse_json_object
from checkpoint_bridge.document.schema import CURRENT_SCHEMA_VERSION

__all__ = ["merge_block", "content_bytes", "parse_block", "block_calls", "BlockCall", "Replay"]


def merge_block(run_id: str, branch_id: str, first: int, links: list[tuple[str, Envelope]]) -> dict[str, Any]:
    """The merged content of steps ``first``.. of a branch, from their objects (key and
    envelope, decoded as chain links), in order; checks that each extends the one before."""
    messages: list[Any] = []
    records: list[Any] = []
    prompts: list[list[Any]] = []
    outputs: list[list[Any]] = []
    calls: list[list[Any]] = []
    variables: Any = {}
    head: dict[str, Any] = {}
    previous: str | None = None
    for position, (key, envelope) in enumerate(links):
        payload = envelope.payload
        if envelope.kind == "snapshot":
            if position:
                raise corrupt(key, "is a snapshot inside a block of steps it does not start")
            doc = migrate(payload, key)
            head = {"snapshot": True, "parent_id": None, "base_message_count": 0, "base_tool_count": 0}
            new_messages, new_records, variables, prompt = (
                doc["messages"], doc["tool_call_cache"], doc["agent_variables"], None)
        else:
            if envelope.format_version < 2:
                raise corrupt(key, "is a format v1 delta inside a chain of format v3 objects")
            base = (payload["base_message_count"], payload["base_tool_count"])
            if position == 0:
                head = {"snapshot": False, "parent_id": payload["parent_id"], "base_message_count": base[0],
                        "base_tool_count": base[1]}
            elif payload["parent_id"] != previous or base != (
                    head["base_message_count"] + len(messages), head["base_tool_count"] + len(records)):
                raise corrupt(key, f"is not the child of {previous} that its block of steps needs")
            new_messages, new_records = payload["new_messages"], payload["new_tool_records"]
            variables, prompt = payload.get("agent_variables", {}), payload.get("system_prompt")
        if not (isinstance(new_messages, list) and isinstance(new_records, list) and isinstance(variables, dict)
                and (prompt is None or isinstance(prompt, str))):
            raise corrupt(key, "has malformed messages, tool records, variables or system prompt")
        offset = len(messages)
        messages.extend(new_messages)
        if prompt is not None:
            prompts.append([len(messages), prompt])
        answers = {m["tool_call_id"]: offset + i for i, m in enumerate(new_messages)
                   if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)
                   and isinstance(m.get("content"), str)}
        for record in new_records:
            where = answers.get(record.get("tool_call_id")) if isinstance(record, dict) else None
            how = output_source(record.get("tool_output"), messages[where]["content"]) if where is not None else None
            if how is not None:
                outputs.append([len(records), where, how])
                record = {**record, "tool_output": None}
            records.append(record)
        call = payload.get("pipeline")
        if isinstance(call, dict) and call:
            calls.append([position, offset, len(messages), len(records) - len(new_records), len(records), call])
        previous = f"{run_id}:{branch_id}:{first + position}"
    content = {"run_id": run_id, "branch_id": branch_id, "first": first, "last": first + len(links) - 1, **head,
               "messages": messages, "tool_records": records, "agent_variables": variables}
    if prompts:
        content["prompts"] = prompts
    if outputs:
        content["outputs"] = outputs
    if calls:
        content["calls"] = calls
    return content


def content_bytes(content: dict[str, Any]) -> tuple[bytes, str]:
    """The canonical bytes of merged content, and their sha256."""
    data = canonical_json(content).encode("utf-8")
    return data, hashlib.sha256(data).hexdigest()


def _is_int(value: Any) -> bool:
    return type(value) is int and value >= 0


def parse_block(data: bytes | memoryview, run_id: str, branch_id: str, first: int, last: int) -> dict[str, Any] | None:
    """Merged content read from a pack, if it is well-formed and this block's; else None."""
    try:
        content = parse_json_object(data, f"block {first}-{last}")
    except CorruptCheckpointError:
        return None
    messages, records = content.get("messages"), content.get("tool_records")
    prompts, outputs = content.get("prompts", []), content.get("outputs", [])
    if not (content.get("run_id") == run_id and content.get("branch_id") == branch_id
            and content.get("first") == first and content.get("last") == last
            and isinstance(content.get("snapshot"), bool) and _is_int(content.get("base_message_count"))
            and _is_int(content.get("base_tool_count")) and type(messages) is list and type(records) is list
            and type(content.get("agent_variables")) is dict and type(prompts) is list and type(outputs) is list):
        return None
    for item in prompts:
        if not (type(item) is list and len(item) == 2 and _is_int(item[0]) and item[0] <= len(messages)
                and type(item[1]) is str):
            return None
    records_count, messages_count = len(records), len(messages)
    for item in outputs:
        if not (type(item) is list and len(item) == 3 and type(item[0]) is int and 0 <= item[0] < records_count
                and type(item[1]) is int and 0 <= item[1] < messages_count and item[2] in ("text", "json")
                and type(records[item[0]]) is dict and type(messages[item[1]]) is dict
                and type(messages[item[1]].get("content")) is str):
            return None
    calls, after = content.get("calls", []), -1
    if type(calls) is not list:
        return None
    for item in calls:
        if not (type(item) is list and len(item) == 6 and all(_is_int(n) for n in item[:5])
                and after < item[0] <= last - first and item[1] <= item[2] <= messages_count
                and item[3] <= item[4] <= records_count and type(item[5]) is dict):
            return None
        after = item[0]
    return content


@dataclass(frozen=True)
class BlockCall:
    """A pipeline's step, as a block's ``calls`` give it: what ``CheckpointStore.step_ends``
    says of the step's object, without reading it."""

    step: int
    call: dict[str, Any]
    last_message: dict[str, Any] | None
    last_tool_record: dict[str, Any] | None
    records: tuple[dict[str, Any], ...]
    """The step's own tool records (a snapshot's: the line's), outputs in place."""


def block_calls(content: dict[str, Any], where: str) -> list[BlockCall]:
    """The pipeline steps of a block's merged content (from ``parse_block`` or ``merge_block``,
    not replayed), in order, their tool outputs put back (``where``: the block, for an error)."""
    messages, records = content["messages"], content["tool_records"]
    restored = {record: (message, how) for record, message, how in content.get("outputs", ())}
    out = []
    for offset, message_lo, message_hi, record_lo, record_hi, call in content.get("calls", ()):
        own = []
        for index in range(record_lo, record_hi):
            record = records[index]
            if index in restored:
                message, how = restored[index]
                text = messages[message]["content"]
                try:
                    record = {**record, "tool_output": text if how == "text" else json.loads(text)}
                except ValueError as exc:
                    raise corrupt(where, f"has a tool output that is not the JSON it says ({exc})") from None
            own.append(record)
        out.append(BlockCall(step=content["first"] + offset, call=call,
                             last_message=messages[message_hi - 1] if message_hi > message_lo else None,
                             last_tool_record=own[-1] if own else None, records=tuple(own)))
    return out


class Replay:
    """The messages, tool records and variables of a chain, growing as its blocks and
    steps are added in order (lists grow in place: replaying a chain is linear)."""

    def __init__(self, doc: dict[str, Any] | None = None, last_id: str | None = None) -> None:
        """Empty (the chain starts with a snapshot), or after ``doc``, the document of ``last_id``."""
        self.messages: list[Any] = list(doc["messages"]) if doc else []
        self.tools: list[Any] = list(doc["tool_call_cache"]) if doc else []
        self.variables: dict[str, Any] = doc["agent_variables"] if doc else {}
        self.last_id = last_id
        self.started = doc is not None

    def add_step(self, envelope: Envelope, key: str, cid: str, chain_of: str) -> None:
        """The object of the chain's next step, ``cid`` (of the chain of ``chain_of``)."""
        payload = envelope.payload
        if envelope.kind == "snapshot" or not self.started:
            if envelope.kind != "snapshot" or self.started:
                raise CorruptCheckpointError(
                    f"checkpoint object {key} {'starts' if not self.started else 'is inside'} the chain of "
                    f"{chain_of} but is {'not ' if not self.started else ''}a snapshot; rebuild the run with "
                    "`rewind mirror RUN`"
                )
            self._reset(migrate(payload, key))
        elif payload.get("parent_id") != self.last_id:
            raise CorruptCheckpointError(
                f"checkpoint object {key} is not the child of {self.last_id} that the chain of {chain_of} "
                "names; rebuild the run with `rewind mirror RUN`"
            )
        else:
            new_messages, new_tools = payload["new_messages"], payload.get("new_tool_records")
            variables, prompt = payload.get("agent_variables", {}), payload.get("system_prompt")
            if (envelope.format_version >= 2 and payload.get("schema_version") == CURRENT_SCHEMA_VERSION
                    and payload["base_message_count"] == len(self.messages)
                    and payload["base_tool_count"] == len(self.tools)
                    and isinstance(new_messages, list) and isinstance(new_tools, list)
                    and isinstance(variables, dict) and (prompt is None or isinstance(prompt, str))):
                self.messages.extend(new_messages)
                if prompt is not None:
                    self.messages = with_system_prompt(self.messages, prompt)
                self.tools.extend(new_tools)
                self.variables = variables
            else:
                # An older object, or one that does not fit: the general replay migrates
                # it, or names what is wrong with it.
                self._reset(apply_delta(self.document(), payload, key))
        self.last_id = cid
        self.started = True

    def _reset(self, doc: dict[str, Any]) -> None:
        self.messages, self.tools = list(doc["messages"]), list(doc["tool_call_cache"])
        self.variables = doc["agent_variables"]

    def add_block(self, content: dict[str, Any], where: str) -> None:
        """Merged content of the next block (well-formed: ``merge_block`` or ``parse_block``)."""
        if content["snapshot"] == self.started or (self.started and (
                content["parent_id"] != self.last_id or content["base_message_count"] != len(self.messages)
                or content["base_tool_count"] != len(self.tools))):
            raise corrupt(where, f"does not continue the chain after {self.last_id or 'its start'}")
        new_messages, records = content["messages"], content["tool_records"]
        done = 0
        for count, prompt in content.get("prompts", ()):
            self.messages.extend(new_messages[done:count])
            self.messages = with_system_prompt(self.messages, prompt)
            done = count
        self.messages.extend(new_messages[done:])
        for record, message, how in content.get("outputs", ()):
            text = new_messages[message]["content"]
            try:
                records[record]["tool_output"] = text if how == "text" else json.loads(text)
            except ValueError as exc:
                raise corrupt(where, f"has a tool output that is not the JSON it says ({exc})") from None
        self.tools.extend(records)
        self.variables = content["agent_variables"]
        self.last_id = f"{content['run_id']}:{content['branch_id']}:{content['last']}"
        self.started = True

    def document(self) -> dict[str, Any]:
        """What a delta of the chain's last step applies to (``envelope.apply_delta``)."""
        return {"messages": list(self.messages), "tool_call_cache": list(self.tools), "agent_variables": self.variables}
