"""Recovering after a fix: `rewind resume RUN`, or in bulk `rewind resume --failed | --tool-errors`."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from rewind.cli.commands.arguments import RUN_HELP, SIDE_EFFECT_MODES, STEPS, WAIT_HELP
from rewind.cli.commands.common import EXIT_ERROR, client_for, emit, interactive, open_checkpoints, wait_and_report
from rewind.cli.commands.runs import add_run_filters
from rewind.settings.config import Settings
from workflows.vocabulary.ids import validate_id

DEFAULT_CONCURRENCY = 4


async def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    from workflows.vocabulary.errors import UsageError

    bulk = args.failed or args.tool_errors
    if bulk and args.run:
        raise UsageError(f"give one RUN ({args.run}) or --failed / --tool-errors, not both")
    if not bulk and not args.run:
        raise UsageError("say what to resume: a RUN, or --failed / --tool-errors (with --since, --agent) for many")
    if args.failed and args.tool_errors:
        raise UsageError("--failed and --tool-errors select differently: give one of them (run the command twice)")
    if not bulk:
        for flag, value in (("--since", args.since), ("--until", args.until), ("--agent", args.agent),
                            ("--dry-run", args.dry_run), ("--yes", args.yes)):
            if value:
                raise UsageError(f"{flag} selects runs for --failed or --tool-errors; with one RUN leave it out")
        return await _one(args, settings)
    return await _many(args, settings)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {"model": args.model, "system_prompt": args.system_prompt, "side_effects": args.side_effects}


async def _one(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.resuming import plan_text, resume

    validate_id("run", args.run)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        result = await resume(client, settings, store, args.run, branch=args.branch, **_options(args))
    info = {"run_id": result.plan.run_id, "branch": result.plan.branch, "revision": result.continued.storage_branch,
            "workflow_id": result.continued.workflow_id, "from_step": result.plan.from_step,
            "failed_calls": result.plan.failed_calls, "invalidated": result.invalidated}
    said = (f"resuming run {args.run} in {result.continued.storage_branch}: {plan_text(result.plan)} "
            f"(every completed call answered from the record)")
    if args.wait:
        if not args.json:
            print(said + ("; progress:" if interactive(args) else ""), flush=True)
        return await wait_and_report(args, client, result.continued.handle, args.run, args.branch, info)
    emit(info, args.json, f"{said}; workflow {result.continued.workflow_id}")
    return 0


async def _many(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.resuming import ResumeSelection, report_text, resume_runs, select_runs
    from workflows.vocabulary.errors import UsageError

    client = await client_for(settings)
    selection = ResumeSelection(failed=args.failed, tool_errors=args.tool_errors, since=args.since, until=args.until,
                                agent=args.agent)
    async with open_checkpoints(settings) as store:
        run_ids = await select_runs(client, store, selection)
        if run_ids and not (args.yes or args.dry_run):
            if not sys.stdin.isatty():
                raise UsageError(f"{len(run_ids)} run(s) to resume ({', '.join(run_ids[:5])}"
                                 f"{', ...' if len(run_ids) > 5 else ''}): add --yes to resume them, or --dry-run "
                                 "to see what would run again")
            answer = input(f"resume {len(run_ids)} run(s): {', '.join(run_ids[:10])}"
                           f"{', ...' if len(run_ids) > 10 else ''}? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing resumed", file=sys.stderr)
                return EXIT_ERROR
        bar = _Bar(len(run_ids), "checking" if args.dry_run else "resuming", show=not args.json and sys.stderr.isatty())
        report = await resume_runs(client, settings, store, run_ids, dry_run=args.dry_run,
                                   concurrency=args.concurrency, wait=args.wait, on_done=bar.step,
                                   branch="main", **_options(args))
        bar.close()
    emit(report.model_dump(mode="json"), args.json, report_text(report))
    failed = [o for o in report.outcomes if o.ended and o.ended != "completed"]
    return EXIT_ERROR if failed else 0


class _Bar:
    """`resuming [#####.....] 3/10` on stderr, redrawn in place on a terminal."""

    def __init__(self, total: int, what: str, *, show: bool) -> None:
        self.total, self.done, self.what, self.show = total, 0, what, show and total > 0
        self._draw()

    def step(self, _outcome: Any) -> None:
        self.done += 1
        self._draw()

    def _draw(self) -> None:
        if not self.show:
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        sys.stderr.write(f"\r{self.what} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.show:
            sys.stderr.write("\n")
            sys.stderr.flush()


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("resume", "continue a run (or every failed run) from just before its first failed call, after a "
                          "fix: the failed calls run again, every completed call is answered from the record",
                handler=cmd_resume)
    p.add_argument("run", nargs="?", help=RUN_HELP + "; leave it out with --failed or --tool-errors")
    p.add_argument("--branch", default="main", help="the branch to resume (its newest revision); default main")
    p.add_argument("--failed", action="store_true",
                   help="resume every run that failed, was terminated, timed out or was cancelled (with the filters)")
    p.add_argument("--tool-errors", action="store_true",
                   help="resume every run with a tool call that failed after its retries, whatever its state")
    add_run_filters(p)
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs --failed / --tool-errors would resume, from which step, and what would run "
                        "again; start nothing")
    p.add_argument("--concurrency", type=STEPS, default=DEFAULT_CONCURRENCY, metavar="N",
                   help=f"resume at most N runs at a time (default {DEFAULT_CONCURRENCY}; with --wait, N running)")
    p.add_argument("--yes", action="store_true", help="resume the selected runs without asking")
    p.add_argument("--model", help="the resumed revision's model (default: the run's)")
    p.add_argument("--system-prompt", help="the resumed revision's system prompt (default: the run's)")
    p.add_argument("--side-effects", choices=SIDE_EFFECT_MODES, default="reuse",
                   help="what side-effecting calls do: reuse (default: an effect the branch caused returns its "
                        "recorded result, a new one runs), run (a repeat follows the tool's on_repeat) or dry-run")
    p.add_argument("--wait", action="store_true",
                   help=WAIT_HELP + "; in bulk, wait for every resumed run and show how each ended")
