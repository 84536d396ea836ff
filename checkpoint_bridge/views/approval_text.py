"""One line for a person's decision on a tool call, as `show` and `diff` print it.

Its own module so that `show` does not import the diff's models to print one line.
"""

from __future__ import annotations

from typing import Any


def decision_text(approval: dict[str, Any] | None) -> str | None:
    """One line for a tool record's approval (also the diff's ToolCallRow.decision)."""
    if not approval:
        return None
    text = f"{approval.get('verdict', '?')} by {approval.get('by', '?')}"
    if approval.get("original_arguments") is not None:
        text += ", edited"
    if approval.get("verdict") == "rejected" and approval.get("reason"):
        text += f": {approval['reason']}"
    return text
