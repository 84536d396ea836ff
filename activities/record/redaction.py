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

import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import regex

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


class StreamRedactor:
    """Redaction of text that arrives in pieces (a model's deltas): each piece goes out redacted,
    but for its tail while that tail may still become a secret (a known value's first
    characters, a pattern's partial match: `regex`'s partial matching tells), which waits for
    the next piece. Prose is held back a few characters at most; a secret split across pieces
    is replaced whole, and the pieces put together read as the whole text redacted at once."""

    # Characters of what went out that a pattern's lookbehind may look at.
    CONTEXT = 64

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._pending = ""
        self._sent = ""  # the tail of what went out (redacted)
        self._partial = [_partial_pattern(pattern) for _, pattern in redactor.patterns]

    def feed(self, piece: str) -> str:
        text = self._pending + piece
        cut = self._safe_end(text)
        self._pending = text[cut:]
        return self._send(text[:cut])

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return self._send(text)

    def _send(self, text: str) -> str:
        if not text:
            return ""
        # As `Redactor.redact_text` on the whole text: values, then each pattern in turn, with
        # what went out before as the context a lookbehind sees (never replaced again).
        for name, value in self._redactor.values:
            if value in text:
                text = text.replace(value, f"[REDACTED:{name}]")
        context = self._sent
        for name, pattern in self._redactor.patterns:
            whole = pattern.sub(lambda m, n=name: m.group(0) if m.start() < len(context) else f"[REDACTED:{n}]",
                                context + text)
            text = whole[len(context):]
        self._sent = (self._sent + text)[-self.CONTEXT:]
        return text

    def _safe_end(self, text: str) -> int:
        """Where the text that cannot become (part of) a secret ends: before any tail that may
        still grow into one, and never inside a secret already whole."""
        end = len(text)
        whole: list[tuple[int, int]] = []  # secrets complete in `text`: the end must not cut one
        for _, value in self._redactor.values:
            at = text.find(value)
            while at != -1:
                whole.append((at, at + len(value)))
                at = text.find(value, at + 1)
            for size in range(min(len(value) - 1, len(text)), 0, -1):
                if text.endswith(value[:size]):
                    end = min(end, len(text) - size)
                    break
        context = self._sent
        for partial in self._partial:
            if partial is None:  # a pattern `regex` cannot read: nothing is safe before the end
                return 0
            for match in partial.finditer(context + text, len(context), partial=True):
                start, stop = match.start() - len(context), match.end() - len(context)
                # A partial match, or a whole one at the end that more text may still extend.
                if match.partial or stop == len(text):
                    end = min(end, start)
                else:
                    whole.append((start, stop))
        moved = True
        while moved:
            moved = False
            for start, stop in whole:
                if start < end < stop:
                    end, moved = start, True
        return end


@functools.lru_cache(maxsize=256)
def _regex_of(source: str, flags: int) -> Any:
    try:
        return regex.compile(source, flags)
    except Exception:  # noqa: BLE001 - a `re` pattern `regex` does not take
        return None


def _partial_pattern(pattern: re.Pattern[str]) -> Any:
    """The `regex` module's compile of `pattern` (it can tell a partial match), or None."""
    return _regex_of(pattern.pattern, pattern.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE))


NO_REDACTION = Redactor(values=(), patterns=())

__all__ = ["Redactor", "StreamRedactor", "NO_REDACTION", "BUILTIN_PATTERNS", "parse_patterns"]
