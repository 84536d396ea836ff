"""A streamed completion put back together, its pieces published as `model.delta` on the way.

What the model call returns is the message an unstreamed call gets from the same server: its
content, tool calls (ids, names, arguments), finish_reason, usage, and any other text the
server streams beside the content (`refusal`, `reasoning_content`; such a field the stream
only ever sent as null is left out). The deltas are redacted
as they go (`StreamRedactor`: a secret split across pieces never goes out in part), the text
and each tool call's arguments on their own.

A stream that stops before its finish_reason (the connection dropped, the body ended) is no
answer: `StreamBroken`, which the call retries, never a truncated message in the record.
"""

from __future__ import annotations

import importlib
from typing import Any, AsyncIterable

import openai

from activities.record.live import CallEvents
from activities.record.redaction import Redactor, StreamRedactor


def _transport_errors() -> tuple[type[BaseException], ...]:
    """A dropped connection as the openai client's HTTP library raises it mid-stream: httpx2's
    (openai 3) or httpx's (openai 1), whichever is installed; neither is Rewind's own dependency."""
    found = []
    for library in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(library).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


_TRANSPORT_ERRORS = _transport_errors()

# Delta fields that are not text streamed in pieces.
_NOT_TEXT = {"role", "content", "tool_calls", "function_call"}


class StreamBroken(Exception):
    """A streamed answer ended before it was complete."""


async def assembled(stream: AsyncIterable[Any], events: CallEvents, redactor: Redactor) -> dict[str, Any]:
    """The completion `stream` carries, as an unstreamed call returns it (usage None when the
    stream carried none); raises StreamBroken for a stream that stopped short."""
    text: list[str] = []
    saw_content = False  # a delta had a content string ("" included): the answer's content is text
    extra: dict[str, list[str]] = {}  # refusal, reasoning_content, ...: key -> its pieces
    calls: dict[int, dict[str, Any]] = {}
    shown_text = StreamRedactor(redactor)
    shown_args: dict[int, StreamRedactor] = {}
    finish, usage, response_id, fingerprint, chunks = None, None, None, None, 0
    try:
        async for chunk in stream:
            chunks += 1
            if not isinstance(chunk, dict):
                raise TypeError(f"a streamed chunk is not a JSON object: {str(chunk)[:200]!r}")
            response_id = response_id or chunk.get("id")
            fingerprint = fingerprint or chunk.get("system_fingerprint")
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if isinstance(piece, str):
                    saw_content = True
                    if piece:
                        text.append(piece)
                        _text_delta(events, shown_text.feed(piece))
                for key, value in delta.items():
                    if key not in _NOT_TEXT and isinstance(value, str) and value:
                        extra.setdefault(key, []).append(value)
                for part in delta.get("tool_calls") or ():
                    _tool_call_piece(part, calls, shown_args, events, redactor)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    except (openai.APIConnectionError, *_TRANSPORT_ERRORS) as exc:
        raise StreamBroken(f"the connection dropped after {chunks} chunks ({type(exc).__name__}: {exc})") from None
    if finish is None:
        raise StreamBroken(f"it ended after {chunks} chunks without a finish_reason")
    _text_delta(events, shown_text.flush())
    for index, shown in shown_args.items():
        rest = shown.flush()
        if rest:
            events.delta({"tool_call": {"index": index, "id": None, "name": None, "arguments": rest}})
    content = "".join(text) if text else (None if calls or not saw_content else "")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    message.update({key: "".join(parts) for key, parts in extra.items()})  # a null one says nothing
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    answer = {"id": response_id, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
              "usage": usage}
    if fingerprint is not None:
        answer["system_fingerprint"] = fingerprint
    return answer


def _text_delta(events: CallEvents, shown: str) -> None:
    if shown:
        events.delta({"text": shown})


def _tool_call_piece(part: Any, calls: dict[int, dict[str, Any]], shown_args: dict[int, StreamRedactor],
                     events: CallEvents, redactor: Redactor) -> None:
    """One fragment of a tool call: its id and name come first (with the call's index), its
    arguments in pieces (all at once from a server that sends calls whole)."""
    if not isinstance(part, dict):
        raise TypeError(f"a streamed tool call is not a JSON object: {str(part)[:200]!r}")
    index = int(part.get("index", 0))
    slot = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    function = part.get("function") or {}
    if part.get("id"):
        slot["id"] = part["id"]
    name, arguments = function.get("name") or "", function.get("arguments") or ""
    slot["function"]["name"] += name
    slot["function"]["arguments"] += arguments
    shown = shown_args.setdefault(index, StreamRedactor(redactor)).feed(arguments) if arguments else ""
    if part.get("id") or name or shown:
        events.delta({"tool_call": {"index": index, "id": part.get("id"), "name": name or None, "arguments": shown}})


__all__ = ["StreamBroken", "assembled"]
