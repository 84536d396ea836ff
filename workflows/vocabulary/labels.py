"""A step's label: what its model asked for ("search", "search x2, fetch", "final answer").

Its own module, free of the contracts, so that the wire form of a step record
(workflows/vocabulary/said_once.py, imported by the contracts) can derive it too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def step_label(assistant_message: dict[str, Any]) -> str:
    calls = assistant_message.get("tool_calls") or []
    if not calls:
        return "final answer"
    counts = Counter(str((c.get("function") or {}).get("name", "?")) for c in calls)
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())
