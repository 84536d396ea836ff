"""One-line summaries of activities and runs, for the Temporal UI and CLI.

Every tool call is activity type `run_tool` with an opaque input; the summary
(Temporal's user metadata, shown next to the activity in the UI and in
`temporal workflow show`) says which tool, with what, at which step. Pure
functions of the call: deterministic, so a replay produces the same commands.
The summary travels as a payload through the run's data converter (encrypted
with it when payload encryption is on, like the call's input).
"""

from __future__ import annotations

import json
from typing import Any

# Temporal caps a summary at a few hundred bytes; the UI shows about one line.
SUMMARY_CHARS = 160
_ARGUMENT_CHARS = 40


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _argument(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return _short(repr(text) if isinstance(value, str) else text, _ARGUMENT_CHARS)


def call_text(tool_name: str, arguments: dict[str, Any]) -> str:
    """`search_web(query='durable agents', limit=5)`, each argument shortened."""
    inner = ", ".join(f"{key}={_argument(value)}" for key, value in sorted(arguments.items()))
    return _short(f"{tool_name}({inner})", SUMMARY_CHARS)


def tool_call_summary(step: int, tool_name: str, arguments: dict[str, Any], *, what: str = "") -> str:
    """`step 3: search_web(query='durable agents')`; `what` names a non-running use ("check")."""
    prefix = f"step {step}: {what + ' ' if what else ''}"
    return _short(prefix + call_text(tool_name, arguments), SUMMARY_CHARS)


def summary_step(summary: str) -> int | None:
    """The step a model or tool call's summary names (`step 3: …`), else None."""
    head, sep, _ = summary.partition(":")
    number = head.removeprefix("step ")
    return int(number) if sep and head.startswith("step ") and number.isdigit() else None


def model_call_summary(step: int, model: str) -> str:
    return _short(f"step {step}: model {model}", SUMMARY_CHARS)


def mirror_summary(steps: list[int]) -> str:
    if not steps:
        return "checkpoints"
    span = str(steps[0]) if len(steps) == 1 else f"{min(steps)}-{max(steps)}"
    return f"checkpoint of step{'s' if len(steps) > 1 else ''} {span}"


def run_summary(run_id: str, branch_id: str, task: str) -> str:
    """The workflow's static summary: which run, which branch, what it does."""
    return _short(f"{run_id} / {branch_id}: {task}", SUMMARY_CHARS)


__all__ = ["SUMMARY_CHARS", "call_text", "tool_call_summary", "model_call_summary", "mirror_summary", "run_summary"]
