"""Secrets are replaced by `[REDACTED:<name>]` before anything is persisted.

Everything an activity returns or raises ends up in Temporal history, in the
worker's logs, in the transcript store and in the checkpoints, and the model
reads it on the next step. So the activities redact where that data is made
(tool outputs and errors, model errors, the model's own reply), and everything
downstream only ever sees the redacted form.

What is a secret (rewind/settings/config.py reads the environment):
  - the value of every environment variable named in `REWIND_SECRET_ENV`
    (comma-separated; default: OpenAI, AWS and Anthropic keys), read once
    when the worker starts, and the model key in use;
    values shorter than 8 characters are ignored (they would redact ordinary
    words: the test-suite's fake AWS secret is "testing");
  - built-in patterns: OpenAI-style keys, AWS access key ids, bearer tokens,
    PEM private key blocks;
  - the regexes in `REWIND_REDACT_PATTERNS` (a JSON list, or one per line).

Redaction is best effort: a secret that is none of these (a password a tool
prints, a key split across two strings) passes through.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from workflows.vocabulary.errors import ConfigError

MIN_SECRET_LEN = 8

BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    ("private_key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----"),
    # Anchored so that words merely containing "sk-" ("task-...") are left alone.
    ("openai_key", r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}"),
    ("aws_access_key_id", r"(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}(?![A-Za-z0-9])"),
    ("bearer_token", r"Bearer\s+[A-Za-z0-9._~+/=-]{8,}"),
)


def _compile(name: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ConfigError(f"redaction pattern {name} {pattern!r} is not a valid regex: {exc}") from exc


def parse_patterns(text: str) -> list[str]:
    """`REWIND_REDACT_PATTERNS`: a JSON list of regexes, or one regex per line."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"REWIND_REDACT_PATTERNS looks like JSON but does not parse: {exc}") from exc
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ConfigError("REWIND_REDACT_PATTERNS must be a JSON list of strings (or one regex per line)")
        return [p for p in value if p]
    return [line.strip() for line in text.splitlines() if line.strip()]


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values and secret-looking patterns in text and JSON."""

    # (name, exact value), longest first so a secret containing another wins.
    values: tuple[tuple[str, str], ...] = ()
    patterns: tuple[tuple[str, re.Pattern[str]], ...] = field(
        default_factory=lambda: tuple((n, _compile(n, p)) for n, p in BUILTIN_PATTERNS)
    )

    @classmethod
    def build(cls, secrets: Mapping[str, str] | None = None, extra_patterns: Iterable[str] = ()) -> "Redactor":
        values = sorted(
            ((name, value) for name, value in (secrets or {}).items() if value and len(value) >= MIN_SECRET_LEN),
            key=lambda item: -len(item[1]),
        )
        extra = tuple((f"pattern_{i}", _compile(f"#{i}", p)) for i, p in enumerate(extra_patterns, 1))
        return cls(values=tuple(values), patterns=cls().patterns + extra)

    def redact_text(self, text: str) -> str:
        for name, value in self.values:
            if value in text:
                text = text.replace(value, f"[REDACTED:{name}]")
        for name, pattern in self.patterns:
            text = pattern.sub(f"[REDACTED:{name}]", text)
        return text

    def redact_json(self, value: Any) -> Any:
        """A copy of a JSON-like value with every string redacted (dict keys untouched)."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact_json(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.redact_json(v) for v in value]
        return value


# The start of a built-in secret, still being written at the end of a stream's text.
_OPEN_SECRET = re.compile(r"(?:(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]*|AKIA[0-9A-Z]{0,15}|Bearer\s*[A-Za-z0-9._~+/=-]*"
                          r"|-----BEGIN[^\n]*(?:\n(?!-----END)[^\n]*)*|-{1,5}B?E?G?I?N?)$")


class StreamRedactor:
    """Redaction of text that arrives in pieces (a model's deltas): a piece goes out redacted,
    but for its tail while that tail may be the start of a secret (a known value's first
    characters, a built-in pattern's opening), which waits for the next piece. Prose is
    never held back; a secret split across pieces is replaced whole."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._pending = ""

    def feed(self, piece: str) -> str:
        text = self._pending + piece
        cut = len(text) - self._held_tail(text)
        self._pending = text[cut:]
        return self._redactor.redact_text(text[:cut]) if cut else ""

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return self._redactor.redact_text(text) if text else ""

    def _held_tail(self, text: str) -> int:
        longest = 0
        for _, value in self._redactor.values:
            for size in range(min(len(value) - 1, len(text)), longest, -1):
                if text.endswith(value[:size]):
                    longest = size
                    break
        if self._redactor.patterns:
            found = _OPEN_SECRET.search(text[-4096:])
            if found is not None and found.group(0):
                longest = max(longest, len(found.group(0)))
        return longest


NO_REDACTION = Redactor(values=(), patterns=())

__all__ = ["Redactor", "StreamRedactor", "NO_REDACTION", "BUILTIN_PATTERNS", "parse_patterns"]
