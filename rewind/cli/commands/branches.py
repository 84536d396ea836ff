"""Branches: `rewind fork`, `rollback`, `diff`."""

from __future__ import annotations

import argparse
import json
from typing import Callable

from rewind.cli.commands.arguments import COUNT, RUN_HELP, SIDE_EFFECT_MODES, STEPS, WAIT_HELP, parse_set
from rewind.cli.commands.common import (
    client_for,
    emit,
    interactive,
    names,
    open_checkpoints,
    say_if_no_worker,
    wait_and_report,
)
from rewind.settings.config import Settings
from workflows.vocabulary.ids import validate_id


async def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import fork
    from workflows.vocabulary.contracts import RunLimits

    validate_id("run", args.run)
    validate_id("branch", args.from_branch)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        limits = RunLimits(max_steps=args.max_steps) if args.max_steps else None
        model, models = by_label(args.model, "--model", "M")
        _, prompts = by_label(args.prompt, "--prompt", "TEXT", plain=False)
        result = await fork(
            client, settings, store, args.run, args.step, branch=args.branch, from_branch=args.from_branch,
            system_prompt=args.system_prompt, model=model, limits=limits,
            tools=names(args.tools), variables=parse_set(args.set, args.set_text),
            subagent_overrides=_subagent_overrides(args.subagent), side_effects=args.side_effects,
            prompts=prompts or None, models=models or None,
        )
    info = {"run_id": result.run_id, "branch": result.branch, "workflow_id": result.workflow_id, "fork_point": result.fork_point}
    if args.wait:
        if not args.json:  # which checkpoint it started from: after a rollback, a revision's
            print(f"forked {result.fork_point} into branch {result.branch}" + ("; progress:" if interactive(args) else ""),
                  flush=True)
        return await wait_and_report(args, client, result.handle, result.run_id, result.branch, info)
    emit(info, args.json, f"forked {result.fork_point} into branch {result.branch} of run {result.run_id} (workflow {result.workflow_id})")
    await say_if_no_worker(client, result.handle, waiting=False)
    return 0


def by_label(values: list[str] | None, flag: str, what: str, *, plain: bool = True) -> tuple[str | None, dict[str, str]]:
    """`--model M` (one, for the whole branch) and `--model LABEL=M` / `--prompt LABEL=TEXT`
    (a pipeline's calls of that label; repeatable): (the plain value, {label: value})."""
    from workflows.vocabulary.errors import UsageError

    single: str | None = None
    found: dict[str, str] = {}
    for value in values or []:
        label, eq, rest = value.partition("=")
        if eq and label.strip() and rest:
            found[label.strip()] = rest
        elif plain and not eq and value.strip() and single is None:
            single = value
        else:
            raise UsageError(f"{flag} {value!r:.60}: give LABEL={what}" + (f" (or one {what} for every call)" if plain else ""))
    return single, found


def _subagent_overrides(pairs: list[str] | None) -> dict[str, dict[str, str]] | None:
    """`--subagent research_company.model=m2` (repeatable) -> {"research_company": {"model": "m2"}}."""
    from rewind.experiments import parse_subagent_key
    from workflows.vocabulary.errors import UsageError

    found: dict[str, dict[str, str]] = {}
    for pair in pairs or []:
        key, eq, value = pair.partition("=")
        if not eq or not value:
            raise UsageError(f"--subagent {pair!r:.60} is not AGENT.model=M or AGENT.system_prompt=TEXT")
        agent, name = parse_subagent_key(key.strip(), "--subagent", prefix="")
        found.setdefault(agent, {})[name] = value
    return found or None


async def cmd_redo(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import redo

    validate_id("run", args.run)
    validate_id("branch", args.from_branch)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        result = await redo(client, settings, store, args.run, args.step, args.call, branch=args.branch,
                            from_branch=args.from_branch, system_prompt=args.system_prompt, model=args.model,
                            side_effects=args.side_effects)
    info = {"run_id": result.run_id, "branch": result.branch, "workflow_id": result.workflow_id,
            "redone": f"{args.run}:{args.from_branch}:{args.step}", "call": args.call, "fork_point": result.fork_point}
    said = (f"redoing call {args.call} of step {args.step} of {args.from_branch} in branch {result.branch} "
            f"(the step's other calls keep their answers)" if args.call else
            f"redoing the call of step {args.step} of {args.from_branch} in branch {result.branch} (every other "
            "call of the pipeline keeps its recorded answer unless it depends on this one's)")
    if args.wait:
        if not args.json:
            print(said + ("; progress:" if interactive(args) else ""), flush=True)
        return await wait_and_report(args, client, result.handle, result.run_id, result.branch, info)
    emit(info, args.json, f"{said}; workflow {result.workflow_id}")
    return 0


async def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from rewind.client import rollback

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        result = await rollback(client, settings, store, args.run, args.step, branch=args.branch, compensate=args.compensate)
    info = {
        "run_id": result.run_id, "branch": result.branch, "step": result.step,
        "stopped_workflow": result.stopped_workflow, "invalidated": result.invalidated_steps,
        "side_effects": [asdict(e) for e in result.side_effects], "compensations": result.compensations,
        "workflow_id": result.continued.workflow_id,
    }
    lines = [f"rolled branch {result.branch} of run {result.run_id} back to step {result.step}"]
    if result.stopped_workflow:
        lines.append(f"  stopped running workflow {result.stopped_workflow}")
    lines.append(f"  invalidated {len(result.invalidated_steps)} checkpoint(s) (kept; shown as invalidated in `rewind tree`)")
    if result.side_effects:
        lines.append("  side effects after that step (rewinding does not undo them; their compensations ran, below):"
                     if args.compensate else
                     "  side effects after that step (rewinding does not undo them; --compensate runs their compensations):")
        for e in result.side_effects:
            lines.append(f"    step {e.step}: {e.tool_name}({json.dumps(e.arguments)[:80]}) key {e.idempotency_key}")
    for c in result.compensations:
        lines.append(f"  compensation of {c['tool_name']} ({c['original_key']}): {c['status']}" + (f" - {c['error']}" if c.get("error") else ""))
    lines.append(f"  continuing from step {result.step} in workflow {result.continued.workflow_id}")
    if args.wait:
        if not args.json:
            print("\n".join(lines), flush=True)
        return await wait_and_report(args, client, result.continued.handle, result.run_id, result.branch, info)
    emit(info, args.json, "\n".join(lines))
    return 0


def terminal_width() -> int:
    """The terminal's width (COLUMNS when set, as for any program), at least the 60 columns
    two sides need; 100 when the output is not a terminal and COLUMNS is unset."""
    import shutil

    return max(shutil.get_terminal_size((100, 24)).columns, 60)


async def cmd_diff(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.diff import diff, diff_json, diff_text

    validate_id("run", args.run)
    validate_id("branch", args.branch_a)
    validate_id("branch", args.branch_b)
    async with open_checkpoints(settings) as store:
        result = await diff(store, args.run, args.branch_a, args.branch_b)
    emit(diff_json(result), args.json, "" if args.json else diff_text(result, terminal_width()))
    return 0


def _side_effects_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--side-effects", choices=SIDE_EFFECT_MODES, default="run",
                   help="what the new branch's side-effecting tool calls do: run (default: as any run; a repeat of "
                        "an effect of its lineage follows the tool's on_repeat), reuse (a repeat of an effect of its "
                        "lineage or of any other branch of the run returns the recorded result) or dry-run (none runs: the tool's dry_run answers, or a stub)")


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("fork", "start a new branch of a run from one of its checkpoints", handler=cmd_fork)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--step", type=COUNT, required=True,
                   help="the checkpoint to fork from (the step column of `rewind tree`); the new branch's first "
                        "step is the next one")
    p.add_argument("--from-branch", default="main",
                   help="the branch whose checkpoint it is, as it is now (after a rollback: its newest revision)")
    p.add_argument("--branch", required=True, help="name of the new branch")
    p.add_argument("--system-prompt", help="the new branch's system prompt (an agent run)")
    p.add_argument("--model", action="append", metavar="M | LABEL=M",
                   help="the new branch's model; for a pipeline, LABEL=M for that label's model calls (repeatable)")
    p.add_argument("--prompt", action="append", metavar="LABEL=TEXT",
                   help="a pipeline's model calls labelled LABEL get this system prompt (repeatable)")
    p.add_argument("--tools", metavar="NAMES", help="comma-separated tool names for the new branch")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set an agent variable (a pipeline's ctx.state key, at the fork point): JSON, or text when "
                        "it does not start with { [ or \"")
    p.add_argument("--set-text", action="append", metavar="KEY=TEXT", help="set an agent variable to this text as given")
    p.add_argument("--subagent", action="append", metavar="AGENT.model=M",
                   help="what a sub-agent runs with on the new branch: AGENT.model=M or AGENT.system_prompt=TEXT")
    p.add_argument("--max-steps", type=STEPS,
                   help="steps at most, counted from step 0 as the source's were (default: the source's limits)")
    _side_effects_argument(p)
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)

    p = command("redo", "a new branch from a step on which one of its tool calls (a sub-agent) runs again and "
                        "the others keep their answers", handler=cmd_redo)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--step", type=COUNT, required=True, help="the step whose model call asked for the tool calls")
    p.add_argument("--call", metavar="CALL_ID", help="the tool call to run again (`rewind show` lists them); a "
                                                     "pipeline's step is one call, a graph's step its super-step "
                                                     "(one send of a fan-out): --step alone says which")
    p.add_argument("--from-branch", default="main", help="the branch the step is on")
    p.add_argument("--branch", help="name of the new branch (default: redo-STEP-CALL)")
    p.add_argument("--system-prompt", help="the redone sub-agent's system prompt instead of its declaration's")
    p.add_argument("--model", help="the redone sub-agent's model instead of its declaration's (a graph's step: "
                                   "its nodes' model calls')")
    _side_effects_argument(p)
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)

    p = command("rollback", "roll a branch back to a step in place and continue from there", handler=cmd_rollback)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--step", type=COUNT, required=True,
                   help="the last step to keep; the steps after it are marked invalidated and run again")
    p.add_argument("--branch", default="main", help="the branch to roll back (its newest revision)")
    p.add_argument("--compensate", action="store_true", help="run the compensations of side effects after that step")
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)

    p = command("diff", "compare two branches of a run side by side", handler=cmd_diff)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("branch_a", help="a branch (main, a fork's name, or a revision such as main.r0)")
    p.add_argument("branch_b", help="the branch to compare it with")
