"""How the scripted model answers `stream: true`: server-sent events of `chat.completion.chunk`
objects, shaped as the server it emulates sends them, at a pace a script or the server sets.

The chunks carry exactly the answer the same request gets unstreamed (its id, content, tool
call ids, names and arguments, finish_reason and usage): a client that puts them back
together has the unstreamed answer, and a retried request gets the same deltas again. Text
and arguments are cut where a tokenizer cuts them (o200k, the bundled encoding), one token a
chunk, so a pace in tokens per second is a pace in chunks.

How each emulated server streams (`DIALECTS`; every shape ends with `data: [DONE]`):
    openai    a first chunk with the role (content "" for text, null for tool calls only),
              a chunk per token, each tool call's id and name first with empty arguments
              and then its arguments in pieces, a last chunk with an empty delta and the
              finish_reason; with stream_options.include_usage every chunk has
              `"usage": null` and one more chunk has the usage and no choices
    vllm      the same, but the first chunk's content is always "", a tool call's first
              chunk has no arguments, and the finish_reason rides on the last token's chunk
              (vllm/entrypoints/openai/serving_chat.py `chat_completion_stream_generator`)
    ollama    role and content in every chunk (content "" where there is none), each tool
              call whole in one chunk, a last chunk with empty content and the finish_reason,
              the usage chunk as OpenAI's (middleware/openai.go `ChatWriter`, openai/openai.go
              `ToChunk`)
    llamacpp  llama-server around b5350: a first chunk with role and content null, tool calls
              as OpenAI's but with the first piece of arguments beside the name, and the usage
              (with `timings`) on the last chunk, the one with the finish_reason, whether asked
              for or not: the separate usage chunk came with PR #15444 (Aug 2025; issues
              ggml-org/llama.cpp #12102, #16048)

A provider that cannot stream is emulated too (`mode`): "whole" answers a streaming request
with the whole completion as JSON (as a server that ignores `stream` does), "refuse" with a
400 that names `stream` (OpenAI's words for a model without streaming).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from activities.model.tokens import FALLBACK_ENCODING, load_encoding
from workflows.vocabulary.errors import ScriptError

MODES = ("sse", "whole", "refuse")
STREAM_DIALECTS = ("openai", "vllm", "ollama", "llamacpp")
REFUSAL = "Unsupported value: 'stream' does not support true with this model. Only the default (false) value is supported."

# A chunk, and what token it carries, if any: "text" or "arguments" (the pace applies to those).
_Chunk = tuple[dict[str, Any], str | None]
_KEYS = ("mode", "tokens_per_s", "arguments_tokens_per_s")


@dataclass(frozen=True)
class Pace:
    """How an answer streams: `mode` (sse, whole, refuse), `tokens_per_s` (0: as fast as it can
    write) and `arguments_tokens_per_s` for the tokens of tool calls' arguments (None: the same;
    `rewind demo` writes a long report into save_report's arguments, and shows the text)."""

    mode: str = "sse"
    tokens_per_s: float = 0.0
    arguments_tokens_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ScriptError(f"stream mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("tokens_per_s", "arguments_tokens_per_s"):
            value = getattr(self, name)
            if value is None and name != "tokens_per_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ScriptError(f"{name} must be a number >= 0 (0: no pace), got {value!r}")

    def over(self, spec: Any) -> "Pace":
        """This pace with a script turn's `"stream": {"tokens_per_s": N, "mode": M}` over it."""
        if spec is None:
            return self
        check_spec(spec, "a turn's stream")
        return Pace(*(spec.get(key, getattr(self, key)) for key in _KEYS))

    def interval(self, token: str) -> float:
        """Seconds between two tokens of this kind (0: none)."""
        rate = self.tokens_per_s if token == "text" or self.arguments_tokens_per_s is None \
            else self.arguments_tokens_per_s
        return 1.0 / rate if rate else 0.0


def check_spec(spec: Any, where: str) -> None:
    """A script turn's `stream`: {"tokens_per_s": N >= 0, "arguments_tokens_per_s": N >= 0,
    "mode": "sse" | "whole" | "refuse"}, each optional."""
    if not isinstance(spec, dict) or not set(spec) <= set(_KEYS):
        raise ScriptError(f"{where}: \"stream\" is {{\"tokens_per_s\": N, \"arguments_tokens_per_s\": N, "
                          f"\"mode\": {' | '.join(MODES)}}} (each optional), got {spec!r}")
    try:
        Pace(spec.get("mode", "sse"), spec.get("tokens_per_s", 0.0), spec.get("arguments_tokens_per_s"))
    except ScriptError as exc:
        raise ScriptError(f"{where}: {exc}") from None


_WORDS = re.compile(r"\s*\S+|\s+")


def pieces(text: str) -> list[str]:
    """`text` cut where the o200k tokenizer cuts it (a character a tokenizer splits in two stays
    whole); words and spaces when it cannot encode it (a lone surrogate)."""
    if not text:
        return []
    try:
        encoding = load_encoding(FALLBACK_ENCODING)
        decoded, starts = encoding.decode_with_offsets(encoding.encode(text, disallowed_special=()))
    except Exception:  # noqa: BLE001 - any text must stream; the tokenizer only decides the cuts
        return _WORDS.findall(text)
    if decoded != text:
        return _WORDS.findall(text)
    cuts = sorted(set(starts) | {len(text)})
    return [text[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def chunks(completion: dict[str, Any], dialect: str, include_usage: bool, usage_known: bool = True) -> list[_Chunk]:
    """The chunks that stream `completion` (an unstreamed answer of this server) as `dialect`'s
    server streams it; `usage_known` False: as a server whose streams never carry usage (one
    from before stream_options.include_usage, which ignores it)."""
    if not usage_known:
        return [(_without_usage(body), token) for body, token in chunks(completion, dialect, False) if body["choices"]]
    choice = completion["choices"][0]
    message, finish = choice["message"], choice["finish_reason"]
    content, calls = message.get("content"), message.get("tool_calls") or []
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"]}
    if completion.get("system_fingerprint"):  # OpenAI's chunks carry the completion's fingerprint
        base["system_fingerprint"] = completion["system_fingerprint"]
    usage = completion["usage"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
        body = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        if dialect == "openai" and include_usage:
            body["usage"] = None  # "All other chunks will also include a usage field, but with a null value"
        return {**body, **extra}

    out: list[_Chunk] = []
    if dialect == "ollama":
        out += [(chunk({"role": "assistant", "content": p}), "text") for p in pieces(content or "")]
        if calls:
            out.append((chunk({"role": "assistant", "content": "", "tool_calls": [
                {"id": c["id"], "index": i, "type": "function", "function": dict(c["function"])}
                for i, c in enumerate(calls)]}), "arguments"))
        out.append((chunk({"role": "assistant", "content": ""}, finish), None))
    else:
        first = "" if dialect == "vllm" or (dialect == "openai" and content is not None) else None
        out.append((chunk({"role": "assistant", "content": first, **({"refusal": None} if dialect == "openai" else {})}),
                    None))
        out += [(chunk({"content": p}), "text") for p in pieces(content or "")]
        for i, call in enumerate(calls):
            args = pieces(call["function"]["arguments"])
            opening: dict[str, Any] = {"name": call["function"]["name"]}
            if dialect == "openai":
                opening["arguments"] = ""
            elif dialect == "llamacpp":
                opening["arguments"] = args.pop(0) if args else ""
            out.append((chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                               "function": opening}]}), "arguments"))
            out += [(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}), "arguments") for p in args]
        if dialect == "vllm" and len(out) > 1:
            out[-1][0]["choices"][0]["finish_reason"] = finish
        elif dialect == "llamacpp":
            out.append((chunk({}, finish, usage=usage, timings={"predicted_n": usage["completion_tokens"],
                                                                 "prompt_n": usage["prompt_tokens"]}), None))
        else:
            out.append((chunk({}, finish), None))
    if include_usage and dialect != "llamacpp":
        out.append(({**base, "choices": [], "usage": usage}, None))
    return out


def _without_usage(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in ("usage", "timings")}


async def stream(request: web.Request, answer: list[_Chunk], pace: Pace,
                 cut_after: int | None = None, written: list[float] | None = None) -> tuple[web.StreamResponse, bool]:
    """Send `answer` as server-sent events, its tokens at `pace`; with `cut_after`, the
    connection drops after that many tokens (a provider's connection lost mid-answer);
    `written` gets the time (time.time()) each token's chunk was written, as it is.
    The response, and whether the whole answer went out."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    due, tokens = loop.time(), 0  # when the next token is due: on a schedule, so a slow write does not slow the pace
    try:
        for body, token in answer:
            if token is not None:
                if cut_after is not None and tokens >= cut_after:
                    if request.transport is not None:
                        request.transport.abort()
                    return response, False
                await asyncio.sleep(max(0.0, due - loop.time()))
                due += pace.interval(token)
                tokens += 1
            await response.write(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")
            if token is not None and written is not None:
                written.append(time.time())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
    except ConnectionError:  # the client went away (aiohttp's ClientConnectionResetError is one)
        return response, False
    return response, True


__all__ = ["MODES", "REFUSAL", "STREAM_DIALECTS", "Pace", "check_spec", "chunks", "pieces", "stream"]
