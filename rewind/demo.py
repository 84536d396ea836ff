"""`rewind demo`: the whole embedded stack and the research agent in one command.

Starts a Temporal dev server (state in .rewind/temporal.db), the scripted
offline model (unless OPENAI_API_KEY is set), a worker with the research
tools, runs the agent on five companies with live progress, then prints the
report and where the run's state lives. Safe to run again: it uses free
ports, stops a dev server left behind by an interrupted demo, and reuses the
state on disk.
"""

from __future__ import annotations

import io
import sys
from typing import TextIO

from examples.research_agent import DEFAULT_TASK, outbox_dir
from rewind.client import new_run_id, start_run
from rewind.config import Settings
from rewind.progress import follow
from rewind.stack import embedded_stack
from rewind.timing import median_or_none, retried_attempts, step_durations
from workflows.contracts import AgentInput, AgentResult


async def run_demo(settings: Settings, task: str = DEFAULT_TASK, out: TextIO = sys.stdout, *, quiet: bool = False) -> AgentResult:
    """`quiet` (rewind demo --json): nothing on `out`; the caller prints the result."""
    if quiet:
        out = io.StringIO()
    home = settings.home
    async with embedded_stack(settings, ["examples.research_agent"], out) as stack:
        client = stack.client
        run_id = new_run_id()
        handle = await start_run(
            client, settings,
            AgentInput(run_id=run_id, task=task, model=settings.model),
        )
        print(f"run {run_id} started; progress:", file=out)
        result = await follow(client, run_id, handle, out)
        durations = await step_durations(client, run_id)
        retries = await retried_attempts(client, run_id)

    print(f"\nfinished: {result.status.state} after {result.status.step} steps, "
          f"{result.status.total_tokens} tokens, ${result.status.cost_usd:.5f}", file=out)
    if retries:
        print("retried by Temporal: " + ", ".join(f"{name} {n}x" for name, n in sorted(retries.items())), file=out)
    median = median_or_none(durations)
    if median is not None:
        print(f"time per agent step (median): {median * 1000:.0f} ms", file=out)
    print(f"\nfinal answer:\n{result.final_answer}\n", file=out)
    reports = sorted(outbox_dir().glob("*.md"), key=lambda p: p.stat().st_mtime)
    if reports:
        print(f"report ({reports[-1]}):\n{reports[-1].read_text()}", file=out)
    print(
        f"state: Temporal history in {home / 'temporal.db'}, checkpoints in {settings.store_url}, "
        f"reports in {outbox_dir()}; inspect it with `rewind tree {run_id}` and `rewind show {run_id}:main:1`",
        file=out,
    )
    return result
