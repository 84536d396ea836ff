"""Live progress of a run on a terminal: one line whenever something changes.

Used by `rewind demo` and by `start/fork/continue/rollback --wait` when
stdout is a terminal (and not `--json`): the step, the state, tokens, cost,
the activity running and the retries in flight (a rate limit, a flaky tool,
an unreachable model endpoint show up here while Temporal retries them).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, TextIO

from temporalio.client import Client

from rewind.client import RunView, run_view
from workflows.pipeline.ids import parse_activity_id

POLL_S = 0.25


def progress_line(view: RunView) -> str | None:
    s = view.status
    if view.no_worker:
        return f"  waiting: {view.no_worker}"
    if s is None:
        return None
    running = ", ".join(sorted({_activity(p) for p in view.pending})) or "-"
    retries = "; ".join(
        f"retrying {_activity(p)} (attempt {p['attempt']}: {p.get('last_failure', '')})"
        for p in view.pending if p["attempt"] > 1
    )
    line = (
        f"  step {s.step:>2} | {s.state:<15} | {s.total_tokens:>6} tokens | ${s.cost_usd:.5f} | "
        f"tool calls {s.tool_calls_done} (cache hits {s.tool_cache_hits}) | running {running}"
    )
    waiting = "; ".join(f"waiting for approval: {p.tool_name} call {p.tool_call_id} "
                        f"(rewind approve {p.run_id} {p.tool_call_id})" for p in s.pending_approvals)
    return (line + (f" | {retries}" if retries else "") + (f" | {waiting}" if waiting else "")
            + (f" | {subagents_text(s.subagents)}" if s.subagents else ""))


def subagents_text(subagents: list[Any]) -> str:
    """`sub-agents research_company: 3 completed, 2 running`: which calls of the step are done."""
    by_agent: dict[str, dict[str, int]] = {}
    for sub in subagents:
        states = by_agent.setdefault(sub.agent, {})
        states[sub.state] = states.get(sub.state, 0) + 1
    return "sub-agents " + "; ".join(
        f"{agent}: " + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        for agent, states in by_agent.items())


def _activity(pending: dict[str, Any]) -> str:
    call = parse_activity_id(pending.get("activity_id") or "")
    if call is not None:  # a pipeline's call: its label says which
        return call["label"]
    return f"{pending['activity']} {pending['detail']}" if pending.get("detail") else pending["activity"]


async def follow(client: Client, run_id: str, handle: Any, out: TextIO, branch: str = "main",
                 on_view: Callable[[RunView], None] | None = None) -> Any:
    """Print a line whenever the run's live status changes, until the workflow ends
    (or pauses for its budget); returns the run's result as `wait_for_outcome` does.
    `on_view` sees every view polled (the demo answers approvals from it)."""
    from rewind.client import wait_for_outcome

    outcome = asyncio.ensure_future(wait_for_outcome(handle))
    last = ""
    try:
        while not outcome.done():
            try:
                view = await run_view(client, run_id, branch, query_timeout_s=2.0)
                line = progress_line(view)
                if on_view is not None:
                    on_view(view)
            except Exception:  # noqa: BLE001 - progress is best effort; the outcome decides
                line = None
            if line and line != last:
                print(line, file=out, flush=True)
                last = line
            await asyncio.wait([outcome], timeout=POLL_S)
    finally:
        if not outcome.done():
            outcome.cancel()
    return outcome.result()


__all__ = ["follow", "progress_line", "subagents_text"]
