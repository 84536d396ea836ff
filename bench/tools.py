"""Tools the benchmark workers load (`--tools bench.tools`).

`blob` is the test-suite's long-run tool: deterministic text of `size`
characters. `nap` sleeps (a first attempt long enough to kill a worker during
it, a short retry) and logs its start to $BENCH_EVENTS so the crash benchmark sees which
attempt ran where. Both keep the defaults the project ships for @tool
(heartbeat 5 s, timeout 60 s, 3 attempts).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from activities.tools import tool, tool_context


def blob_text(index: int, size: int) -> str:
    line = f"record {index}: " + "lorem ipsum dolor sit amet " * 4
    return (line * (size // len(line) + 1))[:size]


@tool
async def blob(index: int, size: int) -> str:
    """Read-only: `size` characters of deterministic text."""
    return blob_text(index, size)


@tool
async def nap(label: str, seconds: float, retry_seconds: float = 0.2) -> str:
    """Sleep `seconds` (`retry_seconds` on a retry), logging the start (crash benchmark)."""
    ctx = tool_context()
    path = os.environ.get("BENCH_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"kind": "nap_start", "label": label, "attempt": ctx.attempt,
                                "pid": os.getpid(), "at": time.time()}) + "\n")
    await asyncio.sleep(seconds if ctx.attempt == 1 else retry_seconds)
    return f"{label} done"


# A sub-agent for the sub-agents benchmark: one `nap` as its work, then its answer.
from activities.tools import subagent  # noqa: E402

helper = subagent(name="helper", description="Do one piece of work and report.", system_prompt="You do one task.",
                  tools=["nap"], max_steps=4)
