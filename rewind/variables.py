"""Agent variables given on the command line (`fork --set`, an experiment's variants):
JSON when the text is JSON, else the text itself, and never a JSON typo taken for text."""

from __future__ import annotations

import json
from typing import Any

from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import echo

# Text that starts like a JSON object, array or string was meant as JSON: a typo in it
# (`{"a":`) stored silently as the literal text would surface only when the agent misbehaves.
_LOOKS_LIKE_JSON = ("{", "[", '"')


def variable_value(key: str, text: str, *, flag: str, literal_hint: str) -> Any:
    """The value of variable `key` given as `text` after `flag`; `literal_hint` says how to
    give text that starts like JSON but is meant literally."""
    try:
        return json.loads(text)
    except ValueError as exc:
        if text.lstrip().startswith(_LOOKS_LIKE_JSON):
            raise UsageError(
                f"{flag} {key}={echo(text, 40)} is not valid JSON ({exc}); fix the JSON, "
                f"or {literal_hint}") from None
        return text
