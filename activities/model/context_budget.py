"""How many tokens of conversation a model call may send.

The model's context window, minus room for the reply and for the tool
schemas (which the API counts but the message counter does not).
"""

from __future__ import annotations

import json
from typing import Any

from activities.model.tokens import encoding_for_model

# Context windows in tokens, matched by longest prefix.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
}
DEFAULT_WINDOW = 128_000
REPLY_RESERVE = 4_096


def context_window(model: str) -> int:
    matches = [k for k in CONTEXT_WINDOWS if model.startswith(k)]
    return CONTEXT_WINDOWS[max(matches, key=len)] if matches else DEFAULT_WINDOW


def message_budget(model: str, tools: list[dict[str, Any]], override: int | None) -> int:
    """Tokens the messages may use."""
    if override is not None:
        return override
    schema_tokens = len(encoding_for_model(model).encode_ordinary(json.dumps(tools))) if tools else 0
    return max(context_window(model) - REPLY_RESERVE - schema_tokens, 1_024)
