"""What every command group shares: printing, the store and the client, waiting for a run."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator

from rewind.settings.config import Settings
from workflows.vocabulary.text import usd

if TYPE_CHECKING:
    from checkpoint_bridge.checkpoints.store import CheckpointStore


# Exit codes: 0 done, 1 an error (one line on stderr), 2 a usage error (a bad
# argument), 3 `--wait` saw the run stop without completing (paused for its
# budget, cancelled).
EXIT_DONE, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_DONE = 0, 1, 2, 3


def emit(doc: Any, as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
    elif text:
        print(text)


def names(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


@asynccontextmanager
async def open_checkpoints(settings: Settings, *, deferred: bool = False) -> AsyncIterator[CheckpointStore]:
    """The checkpoint store, checked first: a store that cannot work is one line naming REWIND_STORE.
    `deferred`: the store itself is built when first used (rewind.stores.DeferredCheckpointStore)."""
    from rewind.stores import check_store, checkpoint_store

    store: Any = checkpoint_store(settings, deferred=deferred)
    try:
        await check_store(store.objects, "REWIND_STORE")
        yield store
    finally:
        await store.aclose()


async def client_for(settings: Settings) -> Any:
    from rewind.client import connect

    return await connect(settings)


async def connection_for(settings: Settings) -> Any:
    """`client_for` whose SDK Client is built on first use (rewind/temporal/connect.py,
    `Connection`): for a command that may answer from plain service calls."""
    from rewind.temporal.connect import open_connection

    return await open_connection(settings)


def interactive(args: argparse.Namespace) -> bool:
    """Live progress only for a person watching: a terminal, and not --json."""
    return not args.json and sys.stdout.isatty()


def one_line(text: str, limit: int = 2000) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def wait_and_report(
    args: argparse.Namespace, client: Any, handle: Any, run_id: str, branch: str, extra: dict[str, Any],
    *, workers_checked: bool = False,
) -> int:
    """Wait for the run and print how it ended. A run no worker polls for is said at once on
    stderr (unless `workers_checked`: the command said it already), and on a terminal the
    progress says it while it waits."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import CancelledError

    from rewind.client import wait_for_outcome
    from rewind.progress import follow

    async def wait() -> Any:
        if not workers_checked:
            await say_if_no_worker(client, handle, waiting=True)
        if interactive(args):
            return await follow(client, run_id, handle, sys.stdout, branch)
        return await wait_for_outcome(handle)

    stopped = f"rewind: stopped waiting; run {run_id} ({branch}) goes on (`rewind status {run_id}`)"
    try:
        result = await _until_ctrl_c(wait(), stopped)
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, CancelledError):
            # `rewind cancel` (or a rollback of this branch) stopped it: not a failure.
            emit({**extra, "state": "cancelled"}, args.json,
                  f"run {run_id} ({branch}): cancelled; its checkpoints stay (`rewind tree {run_id}`)")
            return EXIT_NOT_DONE
        reason = str(exc.cause or exc)
        if args.json:
            emit({**extra, "state": "failed", "error": reason}, True, "")
        else:  # on stderr, as every error the command reports: a script sees why the exit code is 1
            print(f"run {run_id} ({branch}) failed: {reason}", file=sys.stderr)
        return EXIT_ERROR
    except asyncio.CancelledError:
        # Ctrl-C while waiting where no signal handler could be set: only the waiting stops.
        print(stopped, file=sys.stderr)
        raise
    doc = {**extra, **result.model_dump(mode="json")}
    text = f"run {run_id} ({result.status.branch_id}): {result.status.state}"
    if result.status.budget_reason:
        text += f" ({result.status.budget_reason}; {continue_hint(run_id, result.status)})"
    emit(doc, args.json, text + (f"\n{result.final_answer}" if result.final_answer else ""))
    return EXIT_DONE if result.status.state == "completed" else EXIT_NOT_DONE


async def _until_ctrl_c(waiting: Any, said: str) -> Any:
    """`waiting`'s result; on Ctrl-C, `said` on stderr and exit 130 at once. Only waiting
    stops, so nothing is left to clean up, and the exit does not depend on the Temporal
    client's calls in flight ending when cancelled: under load, a cancelled wait once
    kept `rewind start --wait` alive past 30 s."""
    loop = asyncio.get_running_loop()

    def interrupted() -> None:
        print(said, file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(130)

    try:
        loop.add_signal_handler(signal.SIGINT, interrupted)
    except (NotImplementedError, RuntimeError, ValueError):  # no signal handlers here: KeyboardInterrupt as before
        return await waiting
    try:
        return await waiting
    finally:
        loop.remove_signal_handler(signal.SIGINT)


# What a command adds to the no-worker line (checkpoint_bridge.temporal.runs.no_worker_line).
WAITING_FOR_WORKER = "waiting for one (Ctrl-C stops the waiting, not the run)"


def say_no_worker(line: str, *then: str) -> None:
    """The no-worker line on stderr, with what the command adds to it."""
    print("; ".join(["rewind: " + line, *then]), file=sys.stderr, flush=True)


async def say_if_no_worker(client: Any, handle: Any, *, waiting: bool) -> None:
    """A run no worker polls for does nothing: waiting on it quietly would look like a hang,
    and starting it without a word would look like it runs. Say so once, on stderr, in the
    words of `rewind status`."""
    from checkpoint_bridge.temporal.runs import no_worker

    queue = (await handle.describe()).raw_description.execution_config.task_queue.name
    line = await no_worker(client, queue) if queue else None
    if line:
        say_no_worker(line, *([WAITING_FOR_WORKER] if waiting else []))


def continue_hint(run_id: str, status: Any) -> str:
    """A `rewind continue` command that raises the budget the run is paused on, ready to paste."""
    reason = status.budget_reason or ""
    branch = "" if status.branch_id == "main" else f" --branch {status.branch_id}"
    limits = status.limits
    if reason.startswith("max_cost") and limits.max_cost_usd is not None:
        flag = f"--max-cost {usd(max(limits.max_cost_usd * 2, limits.max_cost_usd + 0.01))[1:]}"
    elif reason.startswith("max_tokens") and limits.max_tokens is not None:
        flag = f"--max-tokens {max(limits.max_tokens * 2, limits.max_tokens + 1000)}"
    else:
        flag = f"--max-steps {limits.max_steps * 2}"
    return f"raise it with `rewind continue {run_id}{branch} {flag}` (the number is the new total)"
