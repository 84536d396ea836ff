"""Watching: `rewind watch` (a run's events as they happen, docs/streaming.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, TextIO

from rewind.cli.commands.arguments import BRANCH_HELP, RUN_HELP
from rewind.cli.commands.common import EXIT_ERROR
from rewind.settings.config import Settings
from workflows.vocabulary.text import usd

# How much of a tool's output or a custom event a line shows.
SHOWN = 160


async def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.watching import events

    printer = _Printer(sys.stdout, args.run)
    ended = None
    async for event in events(args.run, args.branch, args.after, settings=settings):
        if args.json:
            sys.stdout.write(event.model_dump_json(exclude_none=True) + "\n")
            sys.stdout.flush()
        else:
            printer.show(event)
        if not event.path and event.type in ("run.completed", "run.failed", "run.cancelled"):
            ended = event.type
    printer.done()
    return 0 if ended == "run.completed" else EXIT_ERROR


class _Printer:
    """Tokens as they stream, a line per call, approval, checkpoint and end."""

    def __init__(self, out: TextIO, run_id: str) -> None:
        self._out = out
        self._run = run_id
        self._open_line = False  # a model's text is being written on the current line
        self._writing: str | None = None  # the call whose text the open line holds
        self._streamed: set[str] = set()  # calls whose text came as deltas

    def _line(self, text: str, prefix: str = "") -> None:
        if self._open_line:
            self._out.write("\n")
            self._open_line = False
        self._writing = None
        self._out.write(f"{prefix}{text}\n")
        self._out.flush()

    def done(self) -> None:
        if self._open_line:
            self._out.write("\n")
            self._open_line = False
        self._out.flush()

    def show(self, event: Any) -> None:
        prefix = f"[{'/'.join(event.path)}] " if event.path else ""
        data = event.data
        shown = _SHOW.get(event.type)
        if event.type == "model.delta":
            text = data.get("text")
            call = f"{prefix}{data.get('call')}"
            if text:
                if call != self._writing:  # another call's text (parallel sub-agents): a line of its own
                    if self._open_line:
                        self._out.write("\n")
                    self._out.write(f"{prefix}model> " if call not in self._streamed else f"{prefix}model> ...")
                    self._streamed.add(call)
                    self._writing = call
                self._out.write(text)
                self._out.flush()
                self._open_line = True
            return
        if event.type == "model.completed":
            call = f"{prefix}{data.get('call')}"
            message = data.get("message") or {}
            usage = data.get("usage") or {}
            content = message.get("content")
            if call not in self._streamed and isinstance(content, str) and content:
                self._line(f"model> {content}", prefix)
            calls = [str((c.get("function") or {}).get("name")) for c in message.get("tool_calls") or []]
            what = f"asks for {', '.join(calls)}; " if calls else ""
            self._line(f"  ({what}{usage.get('total_tokens', 0)} tokens, {usd(float(usage.get('cost_usd') or 0.0))})",
                       prefix)
            self._streamed.discard(call)
            return
        if shown is not None:
            self._line(shown(event, self._run), prefix)


def _output(data: dict[str, Any]) -> str:
    value = data.get("error") if data.get("failed") else data.get("output")
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def _tool_completed(event: Any, _run: str) -> str:
    data = event.data
    how = [word for word, on in (("from cache", data.get("cached")), ("reused", data.get("reused")),
                                 ("dry run", data.get("dry_run"))) if on]
    attempt = data.get("attempt") or 1
    if attempt > 1:
        how.append(f"attempt {attempt}")
    subagent = data.get("subagent")
    if subagent:
        how.append(f"sub-agent {subagent.get('branch')} {subagent.get('state')}")
    state = "failed" if data.get("failed") else "done"
    return f"tool {data.get('tool')} {state}{' (' + ', '.join(how) + ')' if how else ''}: {_output(data)}"


def _approval_waiting(event: Any, _run: str) -> str:
    data = event.data
    return (f"tool {data.get('tool')} waits for a person: `{data.get('approve')}` runs it, "
            f"`{data.get('reject')} --reason TEXT` refuses it")


_SHOW: dict[str, Callable[[Any, str], str]] = {
    "run.started": lambda e, run: (f"run {run} branch {e.branch} started"
                                   + (f" from {e.data['forked_from']}" if e.data.get("forked_from") else "")),
    "model.started": lambda e, _r: f"model call ({e.data.get('model')}"
                                   + (f", {e.data['label']}" if e.data.get("label") else "") + ")",
    "model.retrying": lambda e, _r: f"model call again, attempt {e.data.get('attempt')}: {e.data.get('reason')}",
    "tool.started": lambda e, _r: f"tool {e.data.get('tool')}({json.dumps(e.data.get('arguments'), default=str)[:SHOWN]})"
                                  + (f", attempt {e.data['attempt']}" if (e.data.get("attempt") or 1) > 1 else ""),
    "tool.completed": _tool_completed,
    "approval.waiting": _approval_waiting,
    "approval.resolved": lambda e, _r: f"tool call {e.data.get('tool_call_id')} {e.data.get('verdict')} by {e.data.get('by')}",
    "checkpoint": lambda e, _r: (f"step {e.step} {e.data.get('label')}: checkpoint {e.data.get('checkpoint_id')}, "
                                 f"{e.data.get('tokens')} tokens, {usd(float(e.data.get('cost_usd') or 0.0))} so far"),
    "custom": lambda e, _r: f"{e.data.get('source', 'custom')}: {json.dumps(e.data.get('data'), default=str)[:SHOWN]}",
    "graph.update": lambda e, _r: f"node {e.data.get('node')} updated {', '.join(sorted(e.data.get('update') or {}))}"
                                  if isinstance(e.data.get("update"), dict) else f"node {e.data.get('node')} updated",
    "run.paused": lambda e, run: f"paused: {e.data.get('reason')} (`rewind continue {run} --max-cost USD` goes on)",
    "run.completed": lambda e, _r: f"completed: {e.data.get('answer')}",
    "run.failed": lambda e, _r: f"failed: {e.data.get('reason')}",
    "run.cancelled": lambda e, _r: "cancelled",
}


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("watch", "watch a run as it happens: the model's tokens as it writes them, a line per tool call, "
                         "approval and checkpoint, until the run ends (exit 0 when it completed)", handler=cmd_watch,
                json_help="print each event as one JSON object a line (docs/streaming.md), as it comes")
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--branch", default="main", help=BRANCH_HELP)
    p.add_argument("--after", metavar="ID",
                   help="resume after this event: a durable event's id (4.2) or the cursor an event carried "
                        "(every durable event after it comes once; a call in flight again from its start)")
