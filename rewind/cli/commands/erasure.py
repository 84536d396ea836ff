"""Erasure: `rewind delete`, `gc`."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from rewind.cli.commands.common import EXIT_NOT_DONE, client_for, emit, open_checkpoints
from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id


def _can_confirm(args: argparse.Namespace, what: str) -> None:
    """Deleting asks first on a terminal; without one only --yes says go."""
    if not args.yes and not sys.stdin.isatty():
        raise UsageError(f"{what} removes data for good and there is no terminal to ask on; pass --yes to go ahead")


def _confirmed(plan_text: str, question: str) -> bool:
    print(plan_text, file=sys.stderr)
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


async def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.erasure import erase, plan_delete, refuse_running, report_text
    from rewind.stores import check_stores

    validate_id("run", args.run)
    _can_confirm(args, f"rewind delete {args.run}")
    await check_stores(settings)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        plan = await plan_delete(client, store, args.run)
        if not args.force:
            refuse_running(plan)
        if not args.yes and not _confirmed(report_text(plan.report()), f"delete run {args.run} everywhere?"):
            print("rewind: nothing deleted", file=sys.stderr)
            return EXIT_NOT_DONE
        report = await erase(client, settings, store, plan, force=args.force)
    emit(report.model_dump(mode="json"), args.json, report_text(report))
    return 0


async def cmd_gc(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.erasure import erase, parse_duration, plan_gc, report_text
    from rewind.stores import check_stores

    older_than = parse_duration(args.older_than)
    if not args.dry_run:
        _can_confirm(args, "rewind gc")
    await check_stores(settings)
    client = await client_for(settings)
    async with open_checkpoints(settings) as store:
        plan = await plan_gc(client, store, older_than)
        if args.dry_run or not plan.runs:
            shown = plan.report()
            emit(shown.model_dump(mode="json"), args.json, report_text(shown))
            return 0
        if not args.yes and not _confirmed(report_text(plan.report()), f"delete these {len(plan.runs)} run(s) everywhere?"):
            print("rewind: nothing deleted", file=sys.stderr)
            return EXIT_NOT_DONE
        report = await erase(client, settings, store, plan)
    emit(report.model_dump(mode="json"), args.json, report_text(report))
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("delete", "erase a run everywhere: Temporal, checkpoints, payloads only it uses", handler=cmd_delete)
    p.add_argument("run", help="the run's id (every branch of it is erased)")
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    p.add_argument("--force", action="store_true", help="terminate the run's running branches first")

    p = command("gc", "erase every finished run whose last checkpoint is older than a duration", handler=cmd_gc)
    p.add_argument("--older-than", required=True, metavar="DURATION", help="30d, 12h, 90m, 45s")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
