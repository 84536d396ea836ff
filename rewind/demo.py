"""`rewind demo`: the whole embedded stack and the research agent in one command.

Starts a Temporal dev server (state in .rewind/temporal.db), the scripted
offline model (unless OPENAI_API_KEY is set), a worker with the research
tools, runs the agent on five companies with live progress, then prints the
report and where the run's state lives. Safe to run again: it uses free
ports, stops a dev server left behind by an interrupted demo, and reuses the
state on disk.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from examples.research_agent import DEFAULT_TASK, outbox_dir
from rewind.client import new_run_id, run_view, start_run
from rewind.config import Settings
from rewind.stack import embedded_stack
from rewind.timing import median_or_none, retried_attempts, step_durations
from workflows.contracts import AgentInput, AgentResult


async def follow(client, run_id: str, handle, out: TextIO) -> AgentResult:  # type: ignore[no-untyped-def]
    """Print a line whenever the run's live status changes, until it ends."""
    result_task = asyncio.ensure_future(handle.result())
    last = ""
    while not result_task.done():
        view = await run_view(client, run_id)
        if view.status is not None:
            s = view.status
            retries = "; ".join(
                f"retrying {p['activity']} (attempt {p['attempt']}: {p.get('last_failure', '')})"
                for p in view.pending if p["attempt"] > 1
            )
            line = (
                f"  step {s.step:>2} | {s.state:<9} | {s.total_tokens:>6} tokens | ${s.cost_usd:.5f} | "
                f"tool calls {s.tool_calls_done} (cache hits {s.tool_cache_hits})" + (f" | {retries}" if retries else "")
            )
            if line != last:
                print(line, file=out, flush=True)
                last = line
        await asyncio.wait([result_task], timeout=0.25)
    return result_task.result()


async def run_demo(settings: Settings, task: str = DEFAULT_TASK, out: TextIO = sys.stdout) -> AgentResult:
    home = settings.home
    async with embedded_stack(settings, ["examples.research_agent"], out) as stack:
        client = stack.client
        run_id = new_run_id()
        handle = await start_run(
            client, settings,
            AgentInput(run_id=run_id, task=task, model=settings.model or "gpt-4o-mini"),
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
