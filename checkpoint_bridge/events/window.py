"""What a bus holds of a run: its recent durable events, and each call in flight from its
current attempt's start (a reader that connects gets these first). Shared by the buses."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# A control message on the bus (not an event): a call's attempt ended, its live window can go.
ENDED = "_ended"
RECENT = 2000  # durable events a window keeps of a run (the rest come from the store)


def ended_message(run_id: str, branch: str, call: str, attempt: int) -> dict[str, Any]:
    return {"control": ENDED, "run_id": run_id, "branch": branch, "call": call, "attempt": attempt}


@dataclass
class RunWindow:
    durable: deque[Any] = field(default_factory=lambda: deque(maxlen=RECENT))
    # (branch, call) -> (attempt, its live messages since that attempt started)
    calls: dict[tuple[str, str], tuple[int, list[Any]]] = field(default_factory=dict)
    touched: float = field(default_factory=time.monotonic)


def window_update(window: RunWindow, message: dict[str, Any], item: Any) -> None:
    """What a run's window keeps of one message."""
    window.touched = time.monotonic()
    if message.get("control") == ENDED:
        key = (message.get("branch", ""), message.get("call", ""))
        held = window.calls.get(key)
        if held is not None and held[0] <= int(message.get("attempt") or 0):
            del window.calls[key]
        return
    event_id = str(message.get("id", ""))
    if "~" not in event_id:
        window.durable.append(item)
        return
    data = message.get("data") or {}
    call = data.get("call")
    if not call:
        return  # a live event of no call (a pause): said once, not held
    key = (message.get("branch", ""), str(call))
    attempt = int(data.get("attempt") or 1)
    held = window.calls.get(key)
    if held is None or attempt > held[0]:
        held = (attempt, [])
        window.calls[key] = held
    if attempt == held[0]:
        held[1].append(item)



__all__ = ["RunWindow", "window_update", "ended_message", "ENDED", "RECENT"]
