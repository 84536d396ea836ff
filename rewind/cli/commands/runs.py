"""Operating many runs: `rewind runs`."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from rewind.cli.commands.arguments import STEPS, USD
from rewind.cli.commands.common import connection_for, emit, open_checkpoints
from rewind.settings.config import Settings
from workflows.vocabulary.ids import echo

if TYPE_CHECKING:
    from checkpoint_bridge.checkpoints.store import CheckpointStore

# `rewind runs --state`, spelled out (checkpoint_bridge.views.runs.STATES: `rewind --help`
# imports no pydantic model; a test checks the two agree).
RUN_STATES = ("running", "waiting", "paused", "completed", "failed", "cancelled", "stuck")
DEFAULT_LIMIT = 50

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def moment(text: str) -> datetime:
    """`--since` / `--until`: a duration back from now (45s, 90m, 12h, 7d, 2w) or a time
    (2026-12-06T09:00:00Z, 2026-12-06 09:00; without a zone: UTC)."""
    match = _DURATION.fullmatch(text.strip())
    if match is not None:
        return datetime.now(timezone.utc) - timedelta(**{_UNITS[match[2]]: float(match[1])})
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{echo(text, 40)} is neither a duration (45s, 90m, 12h, 7d, 2w) nor a time (2026-12-06T09:00:00Z)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def run_query(args: argparse.Namespace, *, limit: int | None = None) -> Any:
    """The RunQuery the filters of `rewind runs` on the command line make (`limit`: in place of --limit)."""
    from checkpoint_bridge.views.runs import RunQuery

    return RunQuery(state=args.state, since=args.since, until=args.until, agent=args.agent,
                    tool_errors=args.tool_errors, min_cost=args.min_cost, limit=limit or args.limit)


async def select_runs(args: argparse.Namespace, settings: Settings, store: CheckpointStore,
                      query: Any) -> tuple[Any, Any | None]:
    """(the runs `query` selects, as `rewind runs` lists them: Temporal's visibility joined with
    the store, or the store alone (saying so in one line on stderr) when Temporal does not answer;
    the Temporal connection, None when it did not answer)."""
    from checkpoint_bridge.views.runs import list_runs
    from workflows.vocabulary.errors import TemporalUnreachableError

    try:
        client = await connection_for(settings)
    except TemporalUnreachableError as exc:
        client = _store_alone(args, settings, exc)
    try:
        return await list_runs(store, client, query), client
    except Exception as exc:
        if client is None or not _gone(exc):
            raise
        return await list_runs(store, _store_alone(args, settings, exc), query), None  # it went away meanwhile


async def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.runs import runs_text

    async with open_checkpoints(settings) as store:
        listed, _ = await select_runs(args, settings, store, run_query(args))
    emit(listed.model_dump(mode="json"), args.json, runs_text(listed, next_page=_next_page(args, listed.next_until)))
    return 0


def _store_alone(args: argparse.Namespace, settings: Settings, cause: Exception) -> None:
    """Temporal does not answer: say so in one line and list from the store, or refuse a
    state only Temporal can tell."""
    from checkpoint_bridge.views.runs import STORE_STATES
    from workflows.vocabulary.errors import TemporalUnreachableError

    if args.state not in (None, *STORE_STATES):
        raise TemporalUnreachableError(
            f"Temporal is not reachable at {settings.temporal_address}, and --state {args.state} needs it: the "
            "checkpoint store alone cannot tell running, waiting, paused, cancelled and stuck runs apart; start "
            "Temporal, or ask the store for --state completed or failed") from cause
    print(f"rewind: Temporal is not reachable at {settings.temporal_address}: listing from the checkpoint "
          "store alone (state is completed, failed or unfinished; no waiting, paused, cancelled or stuck)",
          file=sys.stderr, flush=True)
    return None


def _gone(exc: Exception) -> bool:
    """Whether `exc` is Temporal's service no longer answering (the server stopped mid-listing)."""
    from temporalio.service import RPCError, RPCStatusCode

    return isinstance(exc, RPCError) and exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


def _next_page(args: argparse.Namespace, until: datetime | None) -> str | None:
    """The command that lists the runs after the last one shown: the same filters, an --until."""
    if until is None:
        return None
    words = ["rewind", "runs"]
    for flag, value in (("--state", args.state), ("--agent", args.agent),
                        ("--since", args.since and args.since.isoformat()),
                        ("--min-cost", args.min_cost), ("--limit", args.limit if args.limit != DEFAULT_LIMIT else None)):
        if value is not None:
            words += [flag, str(value)]
    if args.tool_errors:
        words.append("--tool-errors")
    words += ["--until", until.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")]
    return shlex.join(words)


def add_run_filters(p: argparse.ArgumentParser, *, next_page: bool = False) -> None:
    """--since, --until and --agent, as `rewind runs` takes them (`rewind resume` selects with them too)."""
    p.add_argument("--since", type=moment, metavar="DURATION",
                   help="only runs started since then: 45s, 90m, 12h, 7d, 2w ago, or a time (2026-12-06T09:00:00Z)")
    p.add_argument("--until", type=moment, metavar="WHEN",
                   help="only runs started before then (a duration ago or a time)"
                        + ("; the next page is --until the start of the last run shown" if next_page else ""))
    p.add_argument("--agent", metavar="NAME", help="only runs of this declared agent or pipeline")


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("runs", "list runs, newest first: id, agent or pipeline, start, state, steps, cost, why it failed "
                        "or is stuck", handler=cmd_runs)
    add_filters(p, limit_help=f"show at most N runs (default {DEFAULT_LIMIT}); when more match, the last line "
                              "gives the command for the next page")


def add_filters(p: argparse.ArgumentParser, *, limit_help: str, limit_default: int | None = DEFAULT_LIMIT,
                listing: bool = True) -> None:
    """The filters of `rewind runs` (`rewind export --runs` takes them too: `listing` False)."""
    p.add_argument("--state", choices=RUN_STATES,
                   help="only runs in this state: waiting = for an approval, paused = by its budget, stuck = not "
                        "ended and no worker polls its task queue; failed includes terminated and timed out")
    add_run_filters(p, next_page=listing)
    p.add_argument("--tool-errors", action="store_true",
                   help="only runs with a tool call that failed after its retries, whatever their state (the "
                        "model got the error and the run may have completed)"
                        + ("; the reason column shows the first" if listing else ""))
    p.add_argument("--min-cost", type=USD, metavar="USD", help="only runs that cost at least this many USD")
    p.add_argument("--limit", type=STEPS, default=limit_default, metavar="N", help=limit_help)
