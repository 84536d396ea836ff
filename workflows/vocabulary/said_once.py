"""The wire form of what a run puts in Temporal history: each fact said about once.

History is what Temporal keeps, replicates and bills storage for, and a step's
record rides in it (the next model call carries it, `LlmRequest.checkpoints`)
next to the very things it describes. So the serialized form of a StepRecord
leaves out what the same payload already says, and validation puts it back:
every reader (the checkpoint writer, `rewind mirror`, a replay) sees whole
records, and the checkpoint built from one is the same, byte for byte.

What a record's wire form leaves out (the `said_once` dict says what, where a
field with a default could not say it by its absence):

- a tool call's output or output reference that its tool message holds
  ("outputs"), its id, name and arguments that its assistant message holds as
  asked ("asked", with a 1 when they also give its cache key);
- a tool call's step (the record's own) and its fields at their defaults;
- the record's fields at their defaults, the branch ledger when it equals the
  total ("branch_is_total"), the four totals when they equal the total
  ledger's ("totals"), the parent (required) when it is the branch's previous step,
  the label (required) when the step's one assistant message gives it;
- ledgers are lists in `LEDGER_WIRE` order, not dicts of long names.

A carried record (inside an LlmRequest) also leaves out its messages when they
are a slice of the request's `new_messages` ("sent": the messages a step added
are what the next model call sends), and its run and model (required) when
they are the request's. Records without `said_once` (older histories) are read
as they are.

These are pure functions on the JSON form (dicts), so contracts.py stays the
models and this module the encoding. An older worker that met a record in
this form would fail to validate it (a required field or a ledger list it
does not know) and its activity would be retried on a current worker, rather
than read a record with parts missing.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.vocabulary.canonical import cache_key
from workflows.vocabulary.labels import step_label

WIRE = "said_once"
# A tool message whose output is stored by reference (workflows/vocabulary/tool_calls.py OUTPUT_REF):
# repeated here, not imported, to keep this module free of the contracts' imports.
OUTPUT_REF = "rewind_output_ref"

# The order of a ledger's fields in its wire list. Append new fields at the end only:
# lists already in history are read by position.
LEDGER_WIRE = (
    "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "model_calls", "unpriced_calls",
    "tool_calls", "cache_hits", "tool_time_ms", "model_retries", "tool_retries", "reused_calls",
    "dry_run_calls", "subagent_calls", "subagent_prompt_tokens", "subagent_completion_tokens",
    "subagent_total_tokens", "subagent_cost_usd", "subagent_model_calls", "subagent_tool_calls",
)
_LEDGERS = ("step_ledger", "branch_ledger", "total_ledger")
# A record's four totals and the total ledger's fields they repeat.
_TOTALS = (("prompt_tokens", "prompt_tokens"), ("completion_tokens", "completion_tokens"),
           ("llm_tokens_used", "total_tokens"), ("llm_cost_usd", "cost_usd"))
_ASKED = ("tool_call_id", "tool_name", "arguments")
# A carried record's fields that its model call's request holds too.
_CARRIED_SAME = ("run_id", "model")


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON, key order and number types included (1 and 1.0, 1 and True differ)."""
    try:
        return json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)
    except (TypeError, ValueError):
        return False


def drop_defaults(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`data` without the fields that hold their default (validation gives them back)."""
    return {k: v for k, v in data.items() if not (k in defaults and same_json(v, defaults[k]))}


def plain_defaults(model: Any, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The fields of a pydantic model class with a plain JSON default (None, a bool, a
    number, a string, an empty list or dict): what `drop_defaults` may leave out."""
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required() or (names is not None and name not in names) or field.exclude:
            continue
        value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        if value is None or isinstance(value, (bool, int, float, str)) or value in ([], {}):
            found[name] = value
    return found


# -- step records -----------------------------------------------------------------

def compact_record(data: dict[str, Any], wire: dict[str, Any], record_defaults: dict[str, Any]) -> None:
    """Make the serialized record `data` (tool calls already without their defaults and
    their outputs noted in `wire`) say each fact once; notes what it left out in `wire`."""
    messages = data.get("new_messages") or []
    asked = _asked_calls(messages)
    refs = {m.get("tool_call_id"): m.get(OUTPUT_REF) for m in messages
            if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get(OUTPUT_REF), str)}
    outputs = wire.setdefault("outputs", [])
    placed: list[list[int]] = []
    for index, call in enumerate(data.get("new_tool_calls") or []):
        call = dict(call)
        if call.get("output") is None and call.get("output_ref") is not None \
                and refs.get(call.get("tool_call_id")) == call["output_ref"]:
            del call["output_ref"]
            outputs.append([index, "ref"])
        where = asked.get(call.get("tool_call_id"))
        if where is not None and call.get("tool_name") == where[2] and _parsed_same(where[3], call.get("arguments")):
            for name in _ASKED:
                call.pop(name, None)
            place = [index, where[0], where[1]]
            if call.get("cache_key") is not None and call["cache_key"] == _cache_key(where[2], _parsed(where[3])):
                del call["cache_key"]
                place.append(1)  # and its cache key is the one its tool and arguments make
            placed.append(place)
        if same_json(call.get("step"), data.get("step_index")):
            del call["step"]
        data["new_tool_calls"][index] = call
    if not outputs:
        del wire["outputs"]
    if placed:
        wire["asked"] = placed
    assistant = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if len(assistant) == 1 and data.get("step_label") == step_label(assistant[0]):
        del data["step_label"]  # required: absent only here, where the step's one assistant message gives it
    total = data.get("total_ledger")
    if isinstance(total, dict) and all(same_json(data.get(mine), total.get(theirs)) for mine, theirs in _TOTALS):
        for mine, _ in _TOTALS:
            data.pop(mine, None)
        wire["totals"] = True
    run_id, branch_id, step = data.get("run_id"), data.get("branch_id"), data.get("step_index")
    if isinstance(step, int) and data.get("parent_id") == f"{run_id}:{branch_id}:{step - 1}":
        del data["parent_id"]  # required: absent only here, where it means the previous step
    for name in _LEDGERS:
        if isinstance(data.get(name), dict):
            data[name] = ledger_list(data[name])
    if data.get("model_view") is not None:
        data["model_view"] = short_view(data["model_view"])
    for name in [k for k in data if k in record_defaults and same_json(data[k], record_defaults[k])]:
        del data[name]


def whole_record(data: dict[str, Any], wire: dict[str, Any]) -> dict[str, Any]:
    """`compact_record` undone (on a copy; `wire` already popped from it). The outputs
    noted in `wire` are put back by the caller, which knows their JSON forms."""
    if "sent" in wire or "run_id" not in data:
        raise ValueError("a step record carried by a model call is read with its LlmRequest, which holds its "
                         "messages; validate the LlmRequest, not the record alone")
    for name in _LEDGERS:
        if isinstance(data.get(name), list):
            data[name] = ledger_dict(data[name])
    if data.get("model_view") is not None:
        data["model_view"] = whole_view(data["model_view"])
    if wire.get("branch_is_total") and "total_ledger" in data:
        data["branch_ledger"] = data["total_ledger"]
    if wire.get("totals"):
        total = data.get("total_ledger") or {}
        for mine, theirs in _TOTALS:
            if theirs in total:
                data[mine] = total[theirs]
    if "parent_id" not in data:
        data["parent_id"] = f"{data['run_id']}:{data['branch_id']}:{data['step_index'] - 1}"
    calls = [dict(c) for c in data.get("new_tool_calls") or []]
    messages = data.get("new_messages") or []
    for index, message_index, call_index, *keyed in wire.get("asked") or []:
        asked = messages[message_index]["tool_calls"][call_index]
        function = asked.get("function") or {}
        calls[index].update(tool_call_id=asked.get("id"), tool_name=function.get("name"),
                            arguments=json.loads(function.get("arguments") or "{}"))
        if keyed:
            calls[index]["cache_key"] = _cache_key(calls[index]["tool_name"], calls[index]["arguments"])
    for call in calls:
        call.setdefault("step", data.get("step_index"))
    if "step_label" not in data:
        data["step_label"] = step_label(next(m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"))
    contents = {m.get("tool_call_id"): m for m in messages if isinstance(m, dict) and m.get("role") == "tool"}
    for index, how in wire.get("outputs") or []:
        if how == "ref":
            calls[index]["output_ref"] = contents[calls[index]["tool_call_id"]][OUTPUT_REF]
    if calls:
        data["new_tool_calls"] = calls
    return data


def _asked_calls(messages: list[Any]) -> dict[str, tuple[int, int, str, str]]:
    """Tool call id -> (message index, call index, tool name, arguments text) of the
    assistant messages' tool calls (the first of each id)."""
    found: dict[str, tuple[int, int, str, str]] = {}
    for mi, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for ti, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(call.get("id"), str) and isinstance(function.get("arguments"), str):
                found.setdefault(call["id"], (mi, ti, function.get("name"), function["arguments"]))
    return found


def _parsed(text: str) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return None


def _cache_key(tool: str, arguments: Any) -> str | None:
    """The key a read-only call of `tool` with `arguments` is cached under when no argument
    is volatile (then a record's key is said by its call; otherwise it is written out)."""
    try:
        return cache_key(tool, arguments)
    except (TypeError, ValueError):
        return None


def _parsed_same(text: str, arguments: Any) -> bool:
    """Whether `arguments` is exactly what `text` parses to (an edited or unparsable call is not)."""
    parsed = _parsed(text)
    return isinstance(parsed, dict) and same_json(parsed, arguments)


def ledger_list(ledger: dict[str, Any]) -> list[Any] | dict[str, Any]:
    """A ledger's fields in `LEDGER_WIRE` order, trailing zeros left out (a ledger with a
    field the order lacks stays a dict)."""
    if any(k not in LEDGER_WIRE for k in ledger):
        return ledger
    values = [ledger.get(k, 0) for k in LEDGER_WIRE]
    while values and values[-1] in (0, 0.0) and not isinstance(values[-1], bool):
        values.pop()
    return values


def ledger_dict(values: list[Any]) -> dict[str, Any]:
    if len(values) > len(LEDGER_WIRE):
        raise ValueError(f"a ledger of {len(values)} fields; this version knows {len(LEDGER_WIRE)}: upgrade the worker")
    return dict(zip(LEDGER_WIRE, values))


# -- records carried by a model call ----------------------------------------------

def compact_carried(request: dict[str, Any]) -> None:
    """The serialized LlmRequest's carried records without what the request itself says:
    their messages when a slice of its `new_messages`, its run and model."""
    sent = request.get("new_messages") or []
    start = 0
    for record in request.get("checkpoints") or []:
        messages = record.get("new_messages") or []
        if messages:
            at = _slice_at(sent, messages, start)
            if at is not None:
                record.setdefault(WIRE, {})["sent"] = [at, at + len(messages)]
                del record["new_messages"]
                start = at + len(messages)
        for name in _CARRIED_SAME:  # required fields: absent only here, where they are the request's
            if name in record and record[name] == request.get(name):
                del record[name]


def whole_carried(request: dict[str, Any]) -> dict[str, Any]:
    """`compact_carried` undone, before the records themselves are validated."""
    records = request.get("checkpoints")
    if not isinstance(records, list) or not any(isinstance(r, dict) and WIRE in r for r in records):
        return request  # none, or written whole (before the wire form)
    request = dict(request)
    sent = request.get("new_messages") or []
    whole = []
    for record in records:
        wire = record.get(WIRE) if isinstance(record, dict) else None
        if not isinstance(wire, dict):
            whole.append(record)
            continue
        wire = dict(wire)
        record = dict(record)
        if "sent" in wire:
            a, b = wire.pop("sent")
            record["new_messages"] = sent[a:b]
        record[WIRE] = wire
        for name in _CARRIED_SAME:
            record.setdefault(name, request.get(name))
        whole.append(record)
    request["checkpoints"] = whole
    return request


def _slice_at(sent: list[Any], messages: list[Any], start: int) -> int | None:
    """Where `messages` sits in `sent` (from `start` first), or None."""
    n = len(messages)
    for at in [start, *range(len(sent) - n + 1)]:
        if 0 <= at <= len(sent) - n and same_json(sent[at:at + n], messages):
            return at
    return None



# -- what a model call's compression did (LlmResponse.model_view, StepRecord.model_view) --

# Its keys, said short: a compressed step's view rides in history twice (the model call's
# result, then the step's record). Aliases start with "~", which no view key does, so a
# view is read back exactly, and one with such a key (none is) would be left as it is.
_VIEW_KEYS = {
    "budget_tokens": "~b", "tokens_before": "~t0", "tokens_after": "~t1", "over_budget": "~o", "actions": "~a",
    "action": "~k", "index": "~i", "from_index": "~f", "to_index": "~l", "to_chars": "~c", "from_chars": "~c0",
    "count": "~n", "turns": "~u", "messages": "~m", "omitted": "~x",
}
_VIEW_NAMES = {alias: name for name, alias in _VIEW_KEYS.items()}


def short_view(view: Any) -> Any:
    """A model view with its keys aliased (`_VIEW_KEYS`); as it is if any key starts with "~"."""
    if not isinstance(view, dict) or _has_alias(view):
        return view
    return _renamed(view, _VIEW_KEYS)


def whole_view(view: Any) -> Any:
    return _renamed(view, _VIEW_NAMES) if isinstance(view, dict) and _has_alias(view) else view


def _has_alias(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(k, str) and k.startswith("~") for k in value) or any(map(_has_alias, value.values()))
    if isinstance(value, list):
        return any(map(_has_alias, value))
    return False


def _renamed(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {names.get(k, k): _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return value


def compact_response(data: dict[str, Any]) -> None:
    """A model call's result without what its message and usage imply: the finish reason a
    chat API gives that message ("tool_calls" or "stop"), the usage's total when it is the
    sum. Absent means implied: results before this form always wrote both."""
    message = data.get("message")
    if isinstance(message, dict) and "finish_reason" in data and data["finish_reason"] == _finish(message):
        del data["finish_reason"]
    elif "finish_reason" not in data:
        data["finish_reason"] = None  # said: absent would mean implied
    usage = data.get("usage")
    if isinstance(usage, dict) and usage.get("total_tokens") == usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0):
        data["usage"] = {k: v for k, v in usage.items() if k != "total_tokens"}
    if "model_view" in data:
        data["model_view"] = short_view(data["model_view"])


def whole_response(data: dict[str, Any]) -> dict[str, Any]:
    data = dict(data)
    message = data.get("message")
    if "finish_reason" not in data and isinstance(message, dict):
        data["finish_reason"] = _finish(message)
    usage = data.get("usage")
    if isinstance(usage, dict) and "total_tokens" not in usage:
        data["usage"] = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
    if "model_view" in data:
        data["model_view"] = whole_view(data["model_view"])
    return data


def _finish(message: dict[str, Any]) -> str:
    return "tool_calls" if message.get("tool_calls") else "stop"


# -- the loop's state (continue-as-new input, a fork's seed) -------------------------

# A cached tool output stored by reference (workflows/loop/tool_step.py _CACHED_REF).
CACHED_REF = "$rewind_output_ref"


def compact_cache(data: dict[str, Any]) -> None:
    """LoopState.tool_cache's outputs stored by reference as one dict of key -> digest
    ("tool_cache_refs"), not one {"$rewind_output_ref": digest} per entry: the cache
    grows with the run and rides in every continue-as-new."""
    cache = data.get("tool_cache")
    if not isinstance(cache, dict):
        return
    refs = {k: v[CACHED_REF] for k, v in cache.items()
            if isinstance(v, dict) and len(v) == 1 and isinstance(v.get(CACHED_REF), str)}
    if refs and len(refs) == len(cache):  # all by reference: the common case, and order kept
        del data["tool_cache"]
        data["tool_cache_refs"] = refs


def whole_cache(data: dict[str, Any]) -> dict[str, Any]:
    if "tool_cache_refs" not in data:
        return data
    data = dict(data)
    data["tool_cache"] = {k: {CACHED_REF: v} for k, v in data.pop("tool_cache_refs").items()}
    return data
