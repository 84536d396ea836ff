"""Live progress of a run on a terminal: one line whenever something changes.

Used by `rewind demo` and by `start/fork/continue/rollback --wait` when
stdout is a terminal (and not `--json`): the step, the state, tokens, cost,
the activity running and the retries in flight (a rate limit, a flaky tool,
an unreachable model endpoint show up here while Temporal retries them).
With settings to read the run's events (`rewind demo`), the model's text too,
as it is written (`model> ...`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from temporalio.client import Client

from rewind.client import RunView, run_view
from workflows.pipeline.ids import parse_activity_id

POLL_S = 0.25
# How long the text of a finished run may still take to arrive (its events trail its outcome).
DRAIN_S = 5.0


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
                 on_view: Callable[[RunView], None] | None = None, settings: Any = None) -> Any:
    """Print a line whenever the run's live status changes, until the workflow ends
    (or pauses for its budget); returns the run's result as `wait_for_outcome` does.
    `on_view` sees every view polled (the demo answers approvals from it). With `settings`,
    the model's text as it is written too, from the run's events (`rewind.events`)."""
    from rewind.client import wait_for_outcome

    screen = Screen(out)
    outcome = asyncio.ensure_future(wait_for_outcome(handle))
    text = asyncio.ensure_future(_show_text(run_id, branch, settings, client, screen)) if settings is not None else None
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
                screen.line(line)
                last = line
            await asyncio.wait([outcome], timeout=POLL_S)
        if text is not None:  # the run's last words, which trail its outcome a moment
            await asyncio.wait([text], timeout=DRAIN_S)
    finally:
        for task in (outcome, text):
            if task is not None and not task.done():
                task.cancel()
        screen.close()
    return outcome.result()


async def _show_text(run_id: str, branch: str, settings: Any, client: Client, screen: "Screen") -> None:
    """The model's text of the run's calls (a sub-agent's too), as its deltas come."""
    from rewind.watching import events

    labels: dict[tuple[Any, ...], str | None] = {}
    try:
        async for event in events(run_id, branch, settings=settings, client=client):
            key = (*event.path, str(event.data.get("call")))
            if event.type == "model.started":
                labels[key] = event.data.get("label")
            elif event.type == "model.delta" and event.data.get("text"):
                screen.text(key, int(event.data.get("attempt") or 1), _speaker(event.path, labels.get(key)),
                            event.data["text"])
            elif event.type == "model.retrying":
                screen.end(key, f" [broken off: attempt {event.data.get('attempt')} writes it again]")
            elif event.type == "model.completed":
                screen.end(key)
    except Exception:  # noqa: BLE001 - the text is a bonus; the progress lines and the outcome decide
        return


def _speaker(path: list[str], label: str | None) -> str:
    return f"{''.join(f'[{p}] ' for p in path)}model{f' ({label})' if label else ''}> "


@dataclass
class _Text:
    speaker: str
    attempt: int
    pieces: list[str] = field(default_factory=list)
    done: bool = False
    note: str = ""


class Screen:
    """One terminal for the progress lines and the model's text: a call's text has the screen
    from its first token to its call's end (a progress line waits meanwhile, and only the
    newest one is printed); the text of calls written at the same time (sub-agents) waits
    its turn and is printed whole or goes on live."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._owner: tuple[Any, ...] | None = None  # the call whose text is on the screen
        self._calls: dict[tuple[Any, ...], _Text] = {}  # calls with text, the owner first
        self._held: str | None = None
        self._indent = 0
        self._fresh = False  # the text on the screen ended a line: the next line's indent is still due

    def line(self, text: str) -> None:
        if self._owner is not None:
            self._held = text
        else:
            self._print(text + "\n")

    def text(self, key: tuple[Any, ...], attempt: int, speaker: str, piece: str) -> None:
        call = self._calls.get(key)
        if call is not None and attempt > call.attempt:  # a new attempt: the old one's text broke off
            self.end(key, call.note or " [broken off]")
            call = None
        if call is None or call.done:
            call = self._calls[key] = _Text(speaker, attempt)
        call.pieces.append(piece)
        if self._owner is None:
            self._next()
        elif self._owner == key:
            self._write(piece)

    def end(self, key: tuple[Any, ...], note: str = "") -> None:
        """The call's text is complete, or (`note`) broke off."""
        call = self._calls.get(key)
        if call is None or call.done:
            return
        call.done, call.note = True, note
        if key == self._owner:
            self._end_line(note)
            self._owner = None
            del self._calls[key]
            self._next()

    def close(self) -> None:
        """What is still open or waiting, as it stands."""
        for key in list(self._calls):
            self.end(key)
            self._next()
        if self._owner is not None:
            self._end_line("")
            self._owner = None
        self._calls.clear()

    def _next(self) -> None:
        """The calls that waited, in turn: a finished one whole, the first unfinished one live."""
        while self._owner is None and self._calls:
            key, call = next(iter(self._calls.items()))
            self._owner = key
            self._print("  " + call.speaker)
            self._indent, self._fresh = 2 + len(call.speaker), False
            for piece in call.pieces:
                self._write(piece)
            if not call.done:
                return
            self._end_line(call.note)
            self._owner = None
            del self._calls[key]
        if self._owner is None and self._held is not None:
            held, self._held = self._held, None
            self._print(held + "\n")

    def _write(self, piece: str) -> None:
        """Text, its lines under the first one's start (an empty line left empty)."""
        for i, part in enumerate(piece.split("\n")):
            if i:
                self._print("\n")
                self._fresh = True
            if part:
                self._print((" " * self._indent if self._fresh else "") + part)
                self._fresh = False

    def _end_line(self, note: str) -> None:
        if note:
            self._print((" " * self._indent if self._fresh else "") + note.lstrip(" " if self._fresh else "") + "\n")
        elif not self._fresh:
            self._print("\n")

    def _print(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


__all__ = ["Screen", "follow", "progress_line", "subagents_text"]
