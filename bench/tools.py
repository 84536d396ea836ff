"""Tools the benchmark workers load (`--tools bench.tools`).

`blob` is the test-suite's long-run tool: deterministic text of `size`
characters. `nap` sleeps (a first attempt long enough to kill a worker during
it, a short retry) and logs its start to $BENCH_EVENTS so the crash benchmark sees which
attempt ran where. Both keep the defaults the project ships for @tool
(heartbeat 5 s, timeout 60 s, 3 attempts). `gate` holds a run until a file exists.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import random
import time

from activities.tools.registry import tool, tool_context


_SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "er")]


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[list[str], list[float]]:
    """A few thousand made-up words and cumulative Zipf weights (a word's weight 1/rank)."""
    rng = random.Random(47)
    words = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))) for _ in range(6000)})
    rng.shuffle(words)
    return words, list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))


def prose_text(index: int, size: int) -> str:
    """`size` characters of deterministic word-like text that compresses as prose does (gzip: about
    2x a 2 KB piece, 3x a long run of them), where `blob_text`'s repeated line compresses 20x and
    would flatter anything stored compressed."""
    words, weights = _vocabulary()
    rng = random.Random(index)
    out, n = [], 0
    while n < size:
        text = " ".join(rng.choices(words, cum_weights=weights, k=rng.randint(6, 18))).capitalize()
        text += rng.choice((". ", ". ", ", ", "; ", "? "))
        out.append(text)
        n += len(text)
    return "".join(out)[:size]


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


@tool(timeout_s=600)
async def gate(path: str) -> str:
    """Wait until the file `path` exists: the streaming benchmark holds its runs here until
    every watcher is connected, so each one reads the model's tokens live from the first.
    Logs its start to $BENCH_EVENTS (when each run got there)."""
    events = os.environ.get("BENCH_EVENTS")
    if events:
        with open(events, "a") as f:
            f.write(json.dumps({"kind": "gate_start", "gate": path, "at": time.time()}) + "\n")
    while not os.path.exists(path):
        await asyncio.sleep(0.02)
    return "open"


# A sub-agent for the sub-agents benchmark: one `nap` as its work, then its answer.
from activities.tools.registry import subagent  # noqa: E402

helper = subagent(name="helper", description="Do one piece of work and report.", system_prompt="You do one task.",
                  tools=["nap"], max_steps=4)
