"""The conversation as it goes out on the wire: one shape every server accepts.

The transcript keeps each assistant message verbatim, exactly as the API
returned it. Sending it back verbatim is what breaks "any OpenAI-compatible
endpoint": every server parses request messages with its own strictness, and
what one server returns another rejects. `outgoing_messages` projects the
stored conversation onto the intersection of what OpenAI, vLLM, Ollama
(/v1/chat/completions) and llama.cpp's llama-server accept, without changing
what the conversation says. It does not know which server is configured, so a
run can move between servers (or be replayed) and send the same bytes.

Why each rule (the evidence; `rewind/worker/scripted_model.py` emulates the servers'
rejections as "dialects"):

* Assistant `content` is always a string; null (and missing) become "".
  - null: llama-server answered 500 "Expected 'content' to be a string or an
    array" for `content: null` next to `tool_calls` (ggml-org/llama.cpp issue
    #13471, builds b5331 to the fix in PR #13477; "" worked). Ollama rejects
    null content without tool_calls, e.g. an OpenAI refusal message, with 400
    "invalid message content type: <nil>" (ollama/ollama openai/openai.go
    `FromChatRequest`; pydantic/pydantic-ai issue #3406). OpenAI rejects null
    content without tool_calls ("Invalid value for 'content': expected a
    string, got null", vercel/ai PR #13744).
  - missing: llama-server answered "Missing 'content'" before PR #12293
    (issue #12279), and llama-cpp-python still does (abetlen/llama-cpp-python
    issue #1805).
  - "": accepted by all four: OpenAI's param type is `str | parts | None`
    ("required unless tool_calls"), llama.cpp (issue #13471: "" works),
    Ollama (the `string` case of `FromChatRequest`), vLLM (chat_utils.py turns
    any string into a text part).
* A text-only list of content parts becomes one string, parts joined with
  "\\n": llama.cpp rejects part types other than "text" (issue #17700, 500
  "unsupported content[].type"; an OpenAI assistant may hold "refusal" parts),
  Ollama turns each text part into a separate message, and "\\n" is how
  llama.cpp (common/chat.cpp `to_json_oaicompat`) and vLLM (chat_utils.py
  `_parse_chat_message_content_parts`, "string" content format) join them
  themselves. Lists with other parts (images) are left as they are.
* Tool messages carry a string `content` and their `tool_call_id`; nothing
  else (OpenAI's `ChatCompletionToolMessageParam` has no other key).
* `tool_calls`: an empty list is dropped (OpenAI 400 "Invalid
  'messages[1].tool_calls': empty array", openai/openai-node PR #1341; vLLM
  itself returns `tool_calls: []` and `reasoning_content: null`, see
  vllm/entrypoints/openai/protocol.py `ChatMessage`). Each call keeps its `id`, `type` and
  `function.name` exactly; `type` defaults to "function" (llama.cpp throws
  "Missing tool call type", common/chat.cpp). Other keys (`index`) go.
* `function.arguments` is a string holding a JSON object, kept byte for byte
  when it already is one. A dict is serialized (OpenAI and Ollama type it as
  a string). Missing/None/"" become "{}" (no arguments). Anything else, i.e.
  invalid JSON or a JSON scalar/array the model produced, is wrapped as
  `{"_unparsed_arguments": "<the original text>"}`: Ollama answers 400
  "invalid tool call arguments" (openai/openai.go `FromCompletionToolCall`),
  vLLM up to 0.25 answers 400 with the JSON error (vllm-project/vllm issue
  #43995) or fails in the chat template for scalars (issues #43851, #46328),
  and every later request of the run would fail the same way. Wrapping keeps
  what the model wrote visible next to the tool message that told it the
  arguments were invalid; vLLM's own later fix (PR #48922) throws it away
  (coerces to {}).
* Keys the API does not need back are dropped: `refusal` (folded into
  `content` when the content is empty, so the model still sees what it said),
  `annotations`, `audio`, `function_call`, `reasoning_content`, `reasoning`
  and anything else not in OpenAI's request param types. OpenAI validates
  message keys strictly for some models ("Additional properties are not
  allowed ('parsed', 'refusal' were unexpected)", openai/openai-node issue
  #1161), `annotations` exists only on the response type (openai-python
  `ChatCompletionMessage` vs `ChatCompletionAssistantMessageParam`), and
  llama.cpp throws on a null `reasoning_content`/`name`/`tool_call_id`
  (common/chat.cpp assigns them to std::string). Rewind never requests audio
  output; reasoning is not replayed (most chat templates drop it anyway).
* `name` is kept only as a non-empty string (llama.cpp: see above).

Not handled here, because it depends on the model rather than the server:
Mistral tokenizers require 9-character alphanumeric tool call ids
(vllm-project/vllm PR #12332); ids are sent exactly as the model produced
them.

`outgoing_messages` never mutates its input, is deterministic, and is
idempotent: outgoing_messages(outgoing_messages(x)) == outgoing_messages(x).
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

__all__ = ["UNPARSED_ARGUMENTS_KEY", "outgoing_messages", "outgoing_message", "outgoing_tool_call", "tool_arguments"]

# The key under which arguments that are not a JSON object are carried.
UNPARSED_ARGUMENTS_KEY = "_unparsed_arguments"

# Keys each role may carry on the wire, in the order they are written
# (OpenAI's request param types). Unknown roles pass through, minus nulls.
_ROLE_KEYS: dict[str, tuple[str, ...]] = {
    "system": ("role", "content", "name"),
    "developer": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}
_TEXT_PART_TYPES = ("text", "refusal")  # an assistant's refusal part is text it said


def outgoing_messages(messages: list[dict]) -> list[dict]:
    """The request messages for a stored conversation (see the module docstring).

    Each message is projected once per worker and remembered by what it says:
    a model call sends the whole conversation, and projecting every old
    message again made each call's work grow with the run. The projections
    returned are shared: callers serialize them, never change them.

    A conversation's messages are the same objects from call to call (the
    transcript cache), so a message is first looked up by identity: building
    its content key again cost ~3 µs a message, 3 ms a call at 1,000
    messages. The identity entry keeps the message (an id is only reused once
    its object is gone), its size and its content and tool-call objects, so a
    message changed in place is projected again.
    """
    out = []
    for message in messages:
        seen = _by_identity.get(id(message))
        if seen is not None and seen[0] is message and seen[1] == _shape(message):
            out.append(seen[2])
            continue
        key = _memo_key(message)
        projected = _memo.get(key) if key is not None else None
        if projected is None:
            projected = outgoing_message(message)
            if key is not None:
                with _memo_lock:
                    if len(_memo) >= _MEMO_LIMIT:
                        _memo.clear()
                    _memo[key] = projected
        if key is not None:
            with _memo_lock:
                if len(_by_identity) >= _MEMO_LIMIT:
                    _by_identity.clear()
                _by_identity[id(message)] = (message, _shape(message), projected)
        out.append(projected)
    return out


_MEMO_LIMIT = 100_000
_memo: dict[tuple[Any, ...], dict] = {}
_by_identity: dict[int, tuple[dict, tuple[int, int, int], dict]] = {}
_memo_lock = threading.Lock()


def _shape(message: dict) -> tuple[int, int, int]:
    """What changes when a message is changed in place: its size, and which content and tool calls it holds."""
    return len(message), id(message.get("content")), id(message.get("tool_calls"))
_PLAIN = (str, type(None))


def _memo_key(message: Any) -> tuple[Any, ...] | None:
    """What the projection depends on, as a hashable tuple; None for shapes not worth it."""
    if not isinstance(message, dict) or not all(isinstance(k, str) for k in message):
        return None
    items = []
    for k, v in message.items():
        if isinstance(v, _PLAIN) or isinstance(v, (bool, int, float)):
            items.append((k, type(v).__name__, v))
        elif k == "tool_calls" and isinstance(v, list):
            calls = []
            for call in v:
                fn = call.get("function") if isinstance(call, dict) else None
                if not (isinstance(call, dict) and isinstance(fn, dict)
                        and all(isinstance(x, _PLAIN) for x in (call.get("id"), call.get("type"), fn.get("name"), fn.get("arguments")))
                        and set(call) <= {"id", "type", "function", "index"} and set(fn) <= {"name", "arguments"}):
                    return None
                calls.append((call.get("id"), call.get("type"), call.get("index"), fn.get("name"), fn.get("arguments")))
            items.append((k, "calls", tuple(calls)))
        else:
            return None  # content parts, nested objects: projected every time
    return tuple(sorted(items, key=lambda kv: kv[0]))


def outgoing_message(message: dict) -> dict:
    """One stored message as every server accepts it; the input is not modified."""
    if not isinstance(message, dict):
        return copy.deepcopy(message)
    role = message.get("role")
    keys = _ROLE_KEYS.get(role) if isinstance(role, str) else None
    if keys is None:
        # Not ours to judge: only nulls go, which no server needs.
        return {k: copy.deepcopy(v) for k, v in message.items() if v is not None}
    out: dict[str, Any] = {"role": role}
    if role == "tool":
        out["content"] = _tool_content(message.get("content"))
    else:
        out["content"] = _content(message.get("content"))
    if role == "assistant":
        refusal = message.get("refusal")
        if out["content"] == "" and isinstance(refusal, str) and refusal:
            out["content"] = refusal
    name = message.get("name")
    if "name" in keys and isinstance(name, str) and name:
        out["name"] = name
    calls = message.get("tool_calls")
    if "tool_calls" in keys and isinstance(calls, list) and calls:
        out["tool_calls"] = [outgoing_tool_call(c) for c in calls]
    if "tool_call_id" in keys and message.get("tool_call_id") is not None:
        out["tool_call_id"] = copy.deepcopy(message["tool_call_id"])
    return out


def outgoing_tool_call(call: dict) -> dict:
    """A tool call with its id, type and name exactly, and arguments every server parses."""
    if not isinstance(call, dict):
        return copy.deepcopy(call)
    kind = call.get("type") or "function"
    fn = call.get("function")
    if kind != "function" or not isinstance(fn, dict):
        return copy.deepcopy(call)  # e.g. a "custom" tool call: nothing to translate it to
    out: dict[str, Any] = {}
    if call.get("id") is not None:
        out["id"] = copy.deepcopy(call["id"])
    out["type"] = "function"
    out["function"] = {"name": copy.deepcopy(fn.get("name")), "arguments": tool_arguments(fn.get("arguments"))}
    return out


def tool_arguments(arguments: Any) -> str:
    """`function.arguments` as a string holding a JSON object; a JSON object string is kept as is."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return "{}"
    if isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    try:
        parsed = json.loads(raw, parse_constant=_not_json)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        return raw
    return json.dumps({UNPARSED_ARGUMENTS_KEY: raw}, ensure_ascii=False)


def _not_json(constant: str) -> Any:
    # Python reads NaN/Infinity; the Go and C++ parsers of Ollama and llama.cpp do not.
    raise ValueError(f"{constant} is not JSON")


def _text_parts(content: list) -> list[str] | None:
    """The texts of a list of text (or refusal) parts; None if any part is something else."""
    texts = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        text = part.get(kind) if kind in _TEXT_PART_TYPES else None
        if not isinstance(text, str):
            return None
        texts.append(text)
    return texts


def _content(content: Any) -> Any:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = _text_parts(content)
        # Images and other media stay parts: only a vision-capable server can take them anyway.
        return "\n".join(texts) if texts is not None else copy.deepcopy(content)
    return json.dumps(content, ensure_ascii=False)  # not a valid content anywhere; keep it readable


def _tool_content(content: Any) -> str:
    value = _content(content)
    # Tool output must be a string (OpenAI allows only text parts; Ollama splits parts into messages).
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
