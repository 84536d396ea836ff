"""Approvals: `rewind approve`, `reject`, `pending`."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from rewind.cli.commands.arguments import BRANCH_HELP, RUN_HELP
from rewind.cli.commands.common import client_for, connection_for, emit, shortened
from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id


def _edited_arguments(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--args is not valid JSON ({exc}); give the arguments as one JSON object") from None
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object of the tool's arguments, got {type(value).__name__}")
    return value


def _decision_text(run_id: str, call: str, record: Any) -> str:
    text = f"{call} of run {run_id} {record.verdict} by {record.by}"
    if record.original_arguments is not None:
        text += " with edited arguments"
    return text + (f": {record.reason}" if record.reason else "")


async def cmd_approve(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import approve

    validate_id("run", args.run)
    edited = _edited_arguments(args.args)
    client = await client_for(settings)
    value = _interrupt_value(args.value)
    record = await approve(client, args.run, args.call, branch=args.branch, by=args.by, reason=args.reason,
                           arguments=edited, value=value)
    emit(record.model_dump(mode="json"), args.json, _decision_text(args.run, args.call, record))
    return 0


def _interrupt_value(text: str | None) -> Any:
    """`--value JSON`: what a graph's interrupt() returns in its node."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--value is not JSON ({exc.msg} at character {exc.pos}); quote a text: --value '\"yes\"'") from None


async def cmd_reject(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import reject

    validate_id("run", args.run)
    if not args.reason.strip():
        raise UsageError("--reason must say why: the model receives it as the tool result")
    client = await client_for(settings)
    record = await reject(client, args.run, args.call, branch=args.branch, by=args.by, reason=args.reason)
    emit(record.model_dump(mode="json"), args.json, _decision_text(args.run, args.call, record))
    return 0


def pending_lines(p: Any) -> list[str]:
    """How `rewind status` and `rewind pending` show one waiting call."""
    branch = "" if p.branch_id == "main" else f" --branch {p.branch_id}"
    lines = [f"{p.run_id}{'' if p.branch_id == 'main' else f' ({p.branch_id})'} step {p.step}: "
             f"{p.tool_name}({shortened(json.dumps(p.arguments, ensure_ascii=False), 200)}) call {p.tool_call_id}"
             f" key {p.idempotency_key or '-'}",
             f"    waiting since {p.requested_at.isoformat(timespec='seconds')}"
             + (f"; {p.on_timeout} at {p.deadline.isoformat(timespec='seconds')} without a decision" if p.deadline else "")]
    if p.repeat_of is not None:
        where = f"step {p.repeat_of.step} of {p.repeat_of.branch_id}" if p.repeat_of.step is not None else f"before the fork point ({p.repeat_of.branch_id})"
        lines.append(f"    repeats an effect of its lineage: {where}, key {p.repeat_of.idempotency_key}")
    lines.append(f"    rewind approve {p.run_id} {p.tool_call_id}{branch}   |   "
                 f"rewind reject {p.run_id} {p.tool_call_id}{branch} --reason TEXT")
    return lines


async def cmd_pending(args: argparse.Namespace, settings: Settings) -> int:
    # rewind.client's pending_approvals is this one; importing rewind.client would build its models.
    from checkpoint_bridge.branches.decisions import pending_approvals

    client = await connection_for(settings)  # no open run: a list call alone, no SDK Client
    found = await pending_approvals(client)
    if args.json:
        emit({"waiting": [p.model_dump(mode="json") for p in found.waiting], "unanswered": found.unanswered}, True, "")
        return 0
    nothing = ("no tool call is waiting for a decision" if not found.unanswered
               else "no run that answered has a tool call waiting for a decision")
    lines = [line for p in found.waiting for line in pending_lines(p)] or [nothing]
    if found.unanswered:
        lines.append(f"({len(found.unanswered)} open run(s) did not answer, e.g. no worker polls them: "
                     + ", ".join(found.unanswered[:5]) + (" ..." if len(found.unanswered) > 5 else "") + ")")
    print("\n".join(lines))
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("approve", "let a tool call that waits for approval run", handler=cmd_approve)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("call", help="the tool call id (`rewind pending` lists them)")
    p.add_argument("--branch", default="main", help=BRANCH_HELP)
    p.add_argument("--by", help="who decides (default: the OS user)")
    p.add_argument("--reason", help="why, recorded with the decision")
    p.add_argument("--args", metavar="JSON", help="run with these arguments instead (checked against the tool's schema)")
    p.add_argument("--value", metavar="JSON", help="a graph run's interrupt(): the value it returns in the node "
                                                   "(default: true; `rewind reject` resumes it with false)")

    p = command("reject", "refuse a tool call that waits for approval; the model gets the reason", handler=cmd_reject)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("call", help="the tool call id (`rewind pending` lists them)")
    p.add_argument("--reason", required=True, help="why: the model reads it as the tool's answer")
    p.add_argument("--branch", default="main", help=BRANCH_HELP)
    p.add_argument("--by", help="who decides (default: the OS user)")

    command("pending", "every tool call waiting for a decision, across runs", handler=cmd_pending)
