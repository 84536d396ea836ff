"""The `rewind` command line: a thin shell over the Python API.

Errors: non-zero exit and one clear line on stderr, never a traceback (any
exception, ours or a library's, ends as one line; REWIND_DEBUG=1 adds the
traceback). Every command takes `--json` and then prints one JSON document on
stdout. Every id a command takes is validated before it is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import traceback
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from rewind.config import Settings, drop_empty_library_variables
from workflows.errors import RewindError, UsageError
from workflows.ids import echo, parse_checkpoint_id, validate_id
from workflows.text import usd

if TYPE_CHECKING:
    from checkpoint_bridge.store import CheckpointStore


# Exit codes: 0 done, 1 an error (one line on stderr), 2 a usage error (a bad
# argument), 3 `--wait` saw the run stop without completing (paused for its
# budget, cancelled).
EXIT_DONE, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_DONE = 0, 1, 2, 3


def _emit(doc: Any, as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
    elif text:
        print(text)


def _names(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


@asynccontextmanager
async def _checkpoints(settings: Settings) -> AsyncIterator[CheckpointStore]:
    """The checkpoint store, checked first: a store that cannot work is one line naming REWIND_STORE."""
    from rewind.stores import check_store, checkpoint_store

    store = checkpoint_store(settings)
    try:
        await check_store(store.objects, "REWIND_STORE")
        yield store
    finally:
        await store.aclose()


async def _client(settings: Settings) -> Any:
    from rewind.client import connect

    return await connect(settings)


def _interactive(args: argparse.Namespace) -> bool:
    """Live progress only for a person watching: a terminal, and not --json."""
    return not args.json and sys.stdout.isatty()


# -- running ------------------------------------------------------------------

async def cmd_start(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.runs import pollers
    from rewind.client import new_run_id, start_run
    from workflows.contracts import AgentInput, RunLimits

    if args.run_id:
        validate_id("run", args.run_id)
    agent_input = AgentInput(
        run_id=args.run_id or new_run_id(),
        task=args.task,
        tools=_names(args.tools) or [],
        model=args.model or settings.model,
        limits=RunLimits(max_steps=args.max_steps, max_cost_usd=args.max_cost, max_tokens=args.max_tokens),
        fast=args.fast,
        **({"system_prompt": args.system_prompt} if args.system_prompt else {}),
    )
    # A store that cannot work is one line naming its variable now, not a run that no worker takes.
    from rewind.stores import check_stores

    await check_stores(settings)
    client = await _client(settings)
    if agent_input.tools and not await pollers(client, settings.task_queue, workflows=True):
        print(f"rewind: no worker polls task queue {settings.task_queue!r} yet, so --tools could not be checked; "
              f"the run waits for a worker ({agent_input.tool_wait_s:g} s for each named tool)", file=sys.stderr)
    handle = await start_run(client, settings, agent_input)
    info = {"run_id": agent_input.run_id, "workflow_id": handle.id}
    if not args.wait:
        _emit(info, args.json, agent_input.run_id)
        return 0
    if _interactive(args):
        print(f"run {agent_input.run_id} started; progress:", flush=True)
    return await _wait_and_report(args, client, handle, agent_input.run_id, "main", info)


async def _wait_and_report(
    args: argparse.Namespace, client: Any, handle: Any, run_id: str, branch: str, extra: dict[str, Any],
) -> int:
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import CancelledError

    from rewind.client import wait_for_outcome
    from rewind.progress import follow

    try:
        if _interactive(args):
            result = await follow(client, run_id, handle, sys.stdout, branch)
        else:
            await _say_if_nobody_runs_it(client, handle)
            result = await wait_for_outcome(handle)
    except WorkflowFailureError as exc:
        if isinstance(exc.cause, CancelledError):
            # `rewind cancel` (or a rollback of this branch) stopped it: not a failure.
            _emit({**extra, "state": "cancelled"}, args.json,
                  f"run {run_id} ({branch}): cancelled; its checkpoints stay (`rewind tree {run_id}`)")
            return EXIT_NOT_DONE
        reason = str(exc.cause or exc)
        _emit({**extra, "state": "failed", "error": reason}, args.json, f"run {run_id} ({branch}) failed: {reason}")
        return EXIT_ERROR
    except asyncio.CancelledError:
        # Ctrl-C while waiting: only the waiting stops, the run goes on.
        print(f"rewind: stopped waiting; run {run_id} ({branch}) goes on (`rewind status {run_id}`)", file=sys.stderr)
        raise
    doc = {**extra, **result.model_dump(mode="json")}
    text = f"run {run_id} ({result.status.branch_id}): {result.status.state}"
    if result.status.budget_reason:
        text += f" ({result.status.budget_reason}; {continue_hint(run_id, result.status)})"
    _emit(doc, args.json, text + (f"\n{result.final_answer}" if result.final_answer else ""))
    return EXIT_DONE if result.status.state == "completed" else EXIT_NOT_DONE


async def _say_if_nobody_runs_it(client: Any, handle: Any) -> None:
    """Waiting quietly (no terminal) on a run no worker polls for would look like a hang: say so once."""
    from checkpoint_bridge.runs import pollers

    queue = (await handle.describe()).raw_description.execution_config.task_queue.name
    if queue and not await pollers(client, queue, workflows=True):
        print(f"rewind: no worker is polling task queue {queue!r} yet; waiting for one "
              "(Ctrl-C stops the waiting, not the run)", file=sys.stderr, flush=True)


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


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import run_view

    from rewind.client import view_from_store
    from workflows.errors import ConfigError, RunNotFoundError, TemporalUnreachableError

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    try:
        client = await _client(settings)
    except TemporalUnreachableError as unreachable:  # Temporal is down or gone: the checkpoints still answer
        async with _checkpoints(settings) as store:
            view = await view_from_store(store, args.run, args.branch)
        if view is None:
            raise unreachable
        view.workflow_status = "unknown"
        view.note = f"Temporal is not reachable ({settings.temporal_address}): shown from the newest checkpoint"
    else:
        # A checkpoint store that is down must not hide the live run (whose
        # status then says how far the mirror is behind and why).
        store_error = None
        try:
            async with _checkpoints(settings) as store:
                view = await run_view(client, args.run, args.branch, store=store, task_queue=settings.task_queue)
        except ConfigError as exc:
            store_error = str(exc)
            try:
                view = await run_view(client, args.run, args.branch, task_queue=settings.task_queue)
            except RunNotFoundError:
                raise exc from None  # Temporal does not have it, and the store that might cannot answer
        view.store_error = store_error
    if args.json:
        _emit(view.model_dump(mode="json"), True, "")
        return 0
    lines = [f"run {view.run_id} (branch {view.branch_id}): {view.state}"]
    s = view.status
    if s is not None:
        lines += [
            f"  step         {s.step} (model {s.model or '-'})",
            f"  tokens       {s.total_tokens} ({s.prompt_tokens} in / {s.completion_tokens} out)",
            f"  cost         {usd(s.cost_usd)}" + (f" ({s.unpriced_calls} calls of an unpriced model)" if s.unpriced_calls else ""),
            f"  model calls  {s.llm_calls}",
            f"  tool calls   {s.tool_calls_done} executed, {s.tool_cache_hits} served from cache",
        ]
        if s.budget_reason:
            lines.append(f"  paused       {s.budget_reason}; {continue_hint(view.run_id, s)}")
        for p in s.pending_approvals:
            first, *rest = pending_lines(p)
            lines.append(f"  approval     {first}")
            lines += [f"             {line}" for line in rest]
        if s.last_error:
            lines.append(f"  last error   {s.last_error}")
        if s.mirror_pending or s.mirror_error:
            lines.append(f"  mirror       {s.mirror_pending} step(s) behind" + (f"; {s.mirror_error}" if s.mirror_error else ""))
        if s.final_answer:
            lines.append(f"  final answer {s.final_answer}")
        if view.source == "checkpoint":
            lines.append("  (from the newest checkpoint in the store)")
    if view.no_worker:
        lines.append(f"  waiting      {view.no_worker}")
    for p in view.pending:
        what = f"{p['activity']} {p['detail']}" if p.get("detail") else p["activity"]
        lines.append(f"  running      {what} attempt {p['attempt']}" + (f": {p['last_failure']}" if p.get("last_failure") else ""))
    if view.failure:
        lines.append(f"  failure      {view.failure}")
    if view.note:
        lines.append(f"  note         {view.note}")
    if view.store_error:
        lines.append(f"  store        unreachable: {view.store_error}")
    print("\n".join(lines))
    return 0


async def cmd_continue(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import branch_workflows
    from workflows.contracts import AgentStatus
    from workflows.wire import RAISE_LIMITS_SIGNAL, STATUS_QUERY

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    updates = {k: v for k, v in {"max_steps": args.max_steps, "max_cost_usd": args.max_cost, "max_tokens": args.max_tokens}.items() if v is not None}
    if not updates:
        raise UsageError("say which budget to raise: --max-steps, --max-cost or --max-tokens (each the new total)")
    client = await _client(settings)
    workflows = await branch_workflows(client, args.run, args.branch)
    if not workflows:
        raise RewindError(f"no run {args.run!r} (branch {args.branch!r}) in Temporal")
    handle = workflows[-1][1]
    status = await handle.query(STATUS_QUERY, result_type=AgentStatus)
    if status.state != "budget_exceeded":
        raise RewindError(f"run {args.run!r} is {status.state}, not paused by its budget; nothing to continue")
    used = {"max_steps": status.step, "max_cost_usd": status.cost_usd, "max_tokens": status.total_tokens}
    flags = {"max_steps": "--max-steps", "max_cost_usd": "--max-cost", "max_tokens": "--max-tokens"}
    def shown(name: str, value: float) -> str:
        return usd(value)[1:] if name == "max_cost_usd" else f"{value:g}"

    for name, value in updates.items():
        if value <= used[name]:
            raise UsageError(
                f"{flags[name]} {shown(name, value)} is no raise: the run has used {shown(name, used[name])} already; "
                f"the limit is the new total, so give more than {shown(name, used[name])}"
            )
    limits = status.limits.model_copy(update=updates)
    await handle.signal(RAISE_LIMITS_SIGNAL, limits)
    info = {"run_id": args.run, "branch": args.branch, "limits": limits.model_dump()}
    if args.wait:
        return await _wait_and_report(args, client, handle, args.run, args.branch, info)
    _emit(info, args.json, f"run {args.run} continues with " + ", ".join(f"{flags[k]} {shown(k, v)}" for k, v in updates.items()))
    return 0


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import branch_workflows

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    client = await _client(settings)
    workflows = await branch_workflows(client, args.run, args.branch)
    if not workflows:
        raise RewindError(f"no run {args.run!r} (branch {args.branch!r}) in Temporal; check the id and --branch")
    handle = workflows[-1][1]
    from temporalio.client import WorkflowExecutionStatus

    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        ended = desc.status.name.lower().replace("canceled", "cancelled") if desc.status else "closed"
        raise RewindError(f"run {args.run!r} (branch {args.branch!r}) has already ended ({ended}); nothing to cancel")
    # Cancellation reaches the loop, which ends the run as `cancelled` with its
    # checkpoints kept; a call in flight is cancelled (heartbeating tools see it).
    await handle.cancel()
    from checkpoint_bridge.runs import pollers

    queue = desc.raw_description.execution_config.task_queue.name
    waiting = bool(queue) and not await pollers(client, queue, workflows=True)
    _emit({"run_id": args.run, "branch": args.branch, "workflow_id": handle.id, "cancel_requested": True,
           "no_worker": waiting}, args.json,
          f"cancellation of run {args.run} ({args.branch}) requested; "
          + (f"no worker is polling task queue {queue!r}, so it takes effect when one picks the run up"
             if waiting else f"`rewind status {args.run}` shows when it has stopped"))
    return 0


# -- erasure ----------------------------------------------------------------------

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
    client = await _client(settings)
    async with _checkpoints(settings) as store:
        plan = await plan_delete(client, store, args.run)
        if not args.force:
            refuse_running(plan)
        if not args.yes and not _confirmed(report_text(plan.report()), f"delete run {args.run} everywhere?"):
            print("rewind: nothing deleted", file=sys.stderr)
            return EXIT_NOT_DONE
        report = await erase(client, settings, store, plan, force=args.force)
    _emit(report.model_dump(mode="json"), args.json, report_text(report))
    return 0


async def cmd_gc(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.erasure import erase, parse_duration, plan_gc, report_text
    from rewind.stores import check_stores

    older_than = parse_duration(args.older_than)
    if not args.dry_run:
        _can_confirm(args, "rewind gc")
    await check_stores(settings)
    client = await _client(settings)
    async with _checkpoints(settings) as store:
        plan = await plan_gc(client, store, older_than)
        if args.dry_run or not plan.runs:
            shown = plan.report()
            _emit(shown.model_dump(mode="json"), args.json, report_text(shown))
            return 0
        if not args.yes and not _confirmed(report_text(plan.report()), f"delete these {len(plan.runs)} run(s) everywhere?"):
            print("rewind: nothing deleted", file=sys.stderr)
            return EXIT_NOT_DONE
        report = await erase(client, settings, store, plan)
    _emit(report.model_dump(mode="json"), args.json, report_text(report))
    return 0


# -- approvals ------------------------------------------------------------------

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
    client = await _client(settings)
    record = await approve(client, args.run, args.call, branch=args.branch, by=args.by, reason=args.reason,
                           arguments=edited)
    _emit(record.model_dump(mode="json"), args.json, _decision_text(args.run, args.call, record))
    return 0


async def cmd_reject(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import reject

    validate_id("run", args.run)
    if not args.reason.strip():
        raise UsageError("--reason must say why: the model receives it as the tool result")
    client = await _client(settings)
    record = await reject(client, args.run, args.call, branch=args.branch, by=args.by, reason=args.reason)
    _emit(record.model_dump(mode="json"), args.json, _decision_text(args.run, args.call, record))
    return 0


def _shortened(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pending_lines(p: Any) -> list[str]:
    """How `rewind status` and `rewind pending` show one waiting call."""
    branch = "" if p.branch_id == "main" else f" --branch {p.branch_id}"
    lines = [f"{p.run_id}{'' if p.branch_id == 'main' else f' ({p.branch_id})'} step {p.step}: "
             f"{p.tool_name}({_shortened(json.dumps(p.arguments, ensure_ascii=False), 200)}) call {p.tool_call_id}"
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
    from rewind.client import pending_approvals

    client = await _client(settings)
    found = await pending_approvals(client)
    if args.json:
        _emit({"waiting": [p.model_dump(mode="json") for p in found.waiting], "unanswered": found.unanswered}, True, "")
        return 0
    nothing = ("no tool call is waiting for a decision" if not found.unanswered
               else "no run that answered has a tool call waiting for a decision")
    lines = [line for p in found.waiting for line in pending_lines(p)] or [nothing]
    if found.unanswered:
        lines.append(f"({len(found.unanswered)} open run(s) did not answer, e.g. no worker polls them: "
                     + ", ".join(found.unanswered[:5]) + (" ..." if len(found.unanswered) > 5 else "") + ")")
    print("\n".join(lines))
    return 0


# -- checkpoints ----------------------------------------------------------------

async def cmd_tree(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.inspect import tree, tree_json, tree_text
    from checkpoint_bridge.tree_graph import tree_dot, tree_mermaid

    validate_id("run", args.run)
    if args.json and args.format != "text":
        raise UsageError("--json and --format are two ways to print the tree; choose one")
    async with _checkpoints(settings) as store:
        summaries = await tree(store, args.run)
    text = {"text": tree_text, "mermaid": tree_mermaid, "dot": tree_dot}[args.format]
    _emit(tree_json(summaries), args.json, text(summaries) if not args.json else "")
    return 0


async def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.stats import stats_text, store_stats

    async with _checkpoints(settings) as store:
        stats = await store_stats(store, args.run or None)
    _emit(stats.model_dump(mode="json"), args.json, stats_text(stats) if not args.json else "")
    return 0


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.inspect import checkpoint_text

    parse_checkpoint_id(args.checkpoint)
    async with _checkpoints(settings) as store:
        cp = await store.load(args.checkpoint)
    _emit(cp.model_dump(mode="json"), args.json, checkpoint_text(cp) if not args.json else "")
    return 0


async def _export_langgraph(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.langgraph_interop import close_saver, export_to_thread, open_saver

    if args.thread is None or (args.sqlite is None) == (args.store is None):
        raise UsageError("--format langgraph needs --thread T and one of --sqlite PATH or --store URL "
                         "(where the LangGraph thread goes)")
    async with _checkpoints(settings) as store:
        cp = await store.load(args.checkpoint)
    saver = await asyncio.to_thread(open_saver, sqlite=args.sqlite, store_url=args.store,
                                    endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region, create=True)
    try:
        written = await asyncio.to_thread(export_to_thread, cp, saver, args.thread)
    finally:
        await asyncio.to_thread(close_saver, saver)
    _emit({"checkpoint": args.checkpoint, "thread_id": args.thread, "langgraph_checkpoint_id": written}, args.json,
          f"wrote {args.checkpoint} to LangGraph thread {args.thread} (checkpoint {written}); a graph with a "
          "`messages` state goes on from it with graph.invoke({'messages': [...]}, "
          f"{{'configurable': {{'thread_id': '{args.thread}'}}}})")
    return 0


async def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.langgraph_interop import close_saver, import_thread, open_saver

    validate_id("run", args.run_id)
    saver = await asyncio.to_thread(open_saver, sqlite=args.sqlite, store_url=args.store,
                                    endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region)
    try:
        async with _checkpoints(settings) as store:
            report = await import_thread(store, saver, args.thread, args.run_id)
    finally:
        await asyncio.to_thread(close_saver, saver)
    doc = {"run_id": report.run_id, "thread_id": report.thread_id, "checkpoints": report.checkpoints,
           "branches": report.branches, "skipped_without_messages": report.skipped}
    branches = ", ".join(f"{b} ({n})" for b, n in report.branches.items())
    _emit(doc, args.json, f"imported LangGraph thread {report.thread_id} as run {report.run_id}: "
          f"{report.checkpoints} checkpoint(s) on {branches}; see `rewind tree {report.run_id}`")
    return 0


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    parse_checkpoint_id(args.checkpoint)
    if args.format == "langgraph":
        return await _export_langgraph(args, settings)
    if args.out is None:
        raise UsageError("say where to write the document: --out FILE, or --out - for stdout")
    async with _checkpoints(settings) as store:
        data = await store.export(args.checkpoint)
    if args.out == "-":  # the document itself on stdout (it is JSON already, with or without --json)
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        return 0
    try:
        Path(args.out).write_bytes(data)
    except OSError as exc:
        raise RewindError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    _emit({"checkpoint": args.checkpoint, "out": str(Path(args.out).resolve()), "bytes": len(data)}, args.json,
          f"wrote {args.checkpoint} to {args.out} ({len(data)} bytes)")
    return 0


async def cmd_mirror(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.mirror import mirror_run
    from rewind.client import workflow_id_for

    validate_id("run", args.run)
    if args.branch:
        validate_id("branch", args.branch)
    from checkpoint_bridge.outputs import OutputStore
    from rewind.stores import payload_store

    client = await _client(settings)
    reports = []
    payloads = payload_store(settings)
    try:
        async with _checkpoints(settings) as store:
            branches = [args.branch] if args.branch else sorted({"main", *await store.branches(args.run)})
            for branch in branches:
                reports.append(await mirror_run(client, store, workflow_id_for(args.run, branch), run_id=args.run,
                                                branch_id=branch, outputs=OutputStore(payloads)))
    finally:
        await payloads.aclose()
    docs = [r.model_dump() for r in reports]
    text = "\n".join(
        f"{r.run_id} branch {r.branch_id}: {r.checkpoints} checkpoint{'' if r.checkpoints == 1 else 's'}, "
        f"{r.written} written, {r.already_present} already present"
        + ("" if r.history else " (Temporal no longer has its history: the store's checkpoints are the only copy)")
        for r in reports
    )
    _emit({"run_id": args.run, "branches": docs}, args.json, text)
    return 0


def _parse_set(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {echo(pair)} is not key=value")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


async def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import fork
    from workflows.contracts import RunLimits

    validate_id("run", args.run)
    validate_id("branch", args.from_branch)
    client = await _client(settings)
    async with _checkpoints(settings) as store:
        limits = RunLimits(max_steps=args.max_steps) if args.max_steps else None
        result = await fork(
            client, settings, store, args.run, args.step, branch=args.branch, from_branch=args.from_branch,
            system_prompt=args.system_prompt, model=args.model, limits=limits,
            tools=_names(args.tools), variables=_parse_set(args.set),
        )
    info = {"run_id": result.run_id, "branch": result.branch, "workflow_id": result.workflow_id, "fork_point": result.fork_point}
    if args.wait:
        if not args.json:  # which checkpoint it started from: after a rollback, a revision's
            print(f"forked {result.fork_point} into branch {result.branch}" + ("; progress:" if _interactive(args) else ""),
                  flush=True)
        return await _wait_and_report(args, client, result.handle, result.run_id, result.branch, info)
    _emit(info, args.json, f"forked {result.fork_point} into branch {result.branch} of run {result.run_id} (workflow {result.workflow_id})")
    return 0


async def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from rewind.client import rollback

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    client = await _client(settings)
    async with _checkpoints(settings) as store:
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
        return await _wait_and_report(args, client, result.continued.handle, result.run_id, result.branch, info)
    _emit(info, args.json, "\n".join(lines))
    return 0


async def cmd_diff(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.diff import diff, diff_json, diff_text

    validate_id("run", args.run)
    validate_id("branch", args.branch_a)
    validate_id("branch", args.branch_b)
    async with _checkpoints(settings) as store:
        result = await diff(store, args.run, args.branch_a, args.branch_b)
    _emit(diff_json(result), args.json, "" if args.json else diff_text(result))
    return 0


async def cmd_view(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.viewer import view_page

    validate_id("run", args.run)
    if args.out == "-" and args.json:
        raise UsageError("--out - writes the page on stdout and --json a summary of it; choose one")
    out = Path(args.out or f"{args.run}.html")
    async with _checkpoints(settings) as store:
        data, view = await view_page(store, args.run)
    if args.out == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        return 0
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise RewindError(f"cannot write {out}: {exc.strerror or exc}") from exc
    branches, steps = len(view["branches"]), len(view["checkpoints"])
    _emit({"run": args.run, "out": str(out.resolve()), "bytes": len(data), "branches": branches, "steps": steps},
          args.json, f"wrote {out} ({len(data):,} bytes; {branches} branch(es), {steps} checkpoint(s)): open it in a browser")
    return 0


# -- processes ------------------------------------------------------------------

# -- experiments ---------------------------------------------------------------

_EXPERIMENT_VERBS = ("status", "show", "continue")


def _experiment_summary(status: Any) -> str:
    from workflows.text import usd as dollars

    counts: dict[str, int] = {}
    for b in status.branches:
        counts[b.state] = counts.get(b.state, 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    budget = f", spent {dollars(status.spent_usd)} of {dollars(status.max_cost_usd)}" if status.max_cost_usd else ""
    line = (f"experiment {status.experiment_id} [{status.state}]: run {status.run_id} from step {status.step} of "
            f"{status.from_branch}, {len(status.branches)} branch(es): {states}{budget}")
    if status.state == "budget_exceeded":
        line += f"; raise it with `rewind experiment continue {status.experiment_id} --max-cost USD`"
    return line


async def cmd_experiment(args: argparse.Namespace, settings: Settings) -> int:
    from rewind import experiments as ex

    verb = args.target if args.target in _EXPERIMENT_VERBS else None
    if verb is None:
        if args.ident is not None:
            raise UsageError(f"rewind experiment RUN takes one run id; got {echo(args.ident, 30)} too "
                             f"(or did you mean one of: {', '.join(_EXPERIMENT_VERBS)} ID?)")
        return await _experiment_start(args, settings)
    if args.ident is None:
        raise UsageError(f"rewind experiment {verb} needs the experiment's id")
    validate_id("experiment", args.ident)
    client = await _client(settings)
    if verb == "continue":
        if args.max_cost is None:
            raise UsageError("rewind experiment continue needs --max-cost USD (the new total budget)")
        status = await ex.continue_experiment(client, args.ident, args.max_cost)
        if args.wait:
            status = await ex.wait_for_experiment(client, args.ident)
        _emit(status.model_dump(mode="json"), args.json, _experiment_summary(status))
        return 0 if not args.wait or status.state == "completed" else EXIT_NOT_DONE
    status = await ex.experiment_status(client, args.ident)
    if verb == "status":
        _emit(status.model_dump(mode="json"), args.json, _experiment_summary(status))
        return 0
    from checkpoint_bridge.experiment_table import experiment_table, table_markdown, table_text

    if args.score:
        status = await ex.score_experiment(client, settings, status, args.score)
    async with _checkpoints(settings) as store:
        table = await experiment_table(store, status)
    text = table_markdown(table) if args.markdown else table_text(table)
    _emit(table.model_dump(mode="json"), args.json, text)
    return 0


async def _experiment_start(args: argparse.Namespace, settings: Settings) -> int:
    from rewind import experiments as ex
    from workflows.experiment_contracts import ExperimentInput

    validate_id("run", args.target)
    if args.step is None:
        raise UsageError("rewind experiment RUN needs --step N (the checkpoint every variant forks from)")
    variants = [ex.parse_variant(v) for v in args.variant or []]
    inp = ExperimentInput(
        experiment_id=args.id or ex.new_experiment_id(), run_id=args.target, from_branch=args.from_branch,
        step=args.step, variants=variants, repeat=args.repeat, max_cost_usd=args.max_cost, max_steps=args.max_steps,
        concurrency=args.concurrency, scorer=args.score,
    )
    client = await _client(settings)
    async with _checkpoints(settings) as store:
        await ex.start_experiment(client, settings, store, inp)
    if not args.wait:
        info = {"experiment_id": inp.experiment_id, "run_id": inp.run_id, "step": inp.step,
                "branches": len(variants) * inp.repeat}
        _emit(info, args.json, f"experiment {inp.experiment_id} started: {len(variants)} variant(s) x {inp.repeat} "
              f"from step {inp.step} of {inp.run_id}; see `rewind experiment status {inp.experiment_id}`")
        return 0
    status = await ex.wait_for_experiment(client, inp.experiment_id)
    if args.json:
        _emit(status.model_dump(mode="json"), True, "")
    else:
        from checkpoint_bridge.experiment_table import experiment_table, table_text

        async with _checkpoints(settings) as store:
            print(_experiment_summary(status))
            print(table_text(await experiment_table(store, status)))
    return 0 if status.state == "completed" else EXIT_NOT_DONE


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.demo import run_demo

    result = await run_demo(settings, quiet=args.json, approve=args.approve)
    if args.json:
        _emit(result.model_dump(mode="json"), True, "")
    return EXIT_DONE if result.status.state == "completed" else EXIT_NOT_DONE


def cmd_server(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import time

    from rewind.embedded import DevServer

    port = args.port or int(settings.temporal_address.rsplit(":", 1)[-1])
    server = DevServer.start(settings.home / "temporal.db", port=port, ui_port=args.ui_port,
                             log_file=settings.home / "temporal.log", shared=True)
    _emit({"address": server.address, "ui": f"http://127.0.0.1:{server.ui_port}", "db_file": str(server.db_file),
           "pid": server.process.pid}, args.json,
          f"Temporal dev server on {server.address}, UI http://127.0.0.1:{server.ui_port}, "
          f"state in {server.db_file} (Ctrl-C stops it)")
    sys.stdout.flush()
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not stopping and server.process.poll() is None:
        time.sleep(0.2)
    server.stop()
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.worker import run_from_command_line

    return run_from_command_line(args)


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.health import worker_health

    if args.task_queue:
        validate_id("task queue", args.task_queue)
        settings.task_queue = args.task_queue
    path = settings.worker_health_file
    report = worker_health(path, max_age_s=args.max_age)
    if not path.exists() and settings.health_file is None:
        others = sorted(p.name[len("worker-health."):-len(".json")] for p in path.parent.glob("worker-health.*.json"))
        if others:
            report["reason"] += (f"; this folder has workers of task queue(s) {', '.join(others)}: "
                                 "say which with --task-queue or REWIND_TASK_QUEUE")
    _emit(report, args.json, f"worker {'healthy' if report['healthy'] else 'unhealthy'}: {report['reason']}")
    return 0 if report["healthy"] else 1


# -- argument types ------------------------------------------------------------

def _at_least(minimum: float, kind: Callable[[str], Any], what: str, *, strictly: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not a finite number")
        if strictly and not value > minimum:
            raise argparse.ArgumentTypeError(f"{text} must be more than {minimum:g}")
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not a finite number")
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum:g}")
        return value
    return parse


_STEPS = _at_least(1, int, "a whole number")
_COUNT = _at_least(0, int, "a whole number")
# Budgets of cost and tokens: 0 would still let one paid step run before pausing.
_TOKENS = _at_least(0, int, "a whole number", strictly=True)
_USD = _at_least(0, float, "a number of USD", strictly=True)


def _task(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; say what the agent should do")
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (`rewind start: argument --max-steps: ...`)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        print(f"{self.prog}: {_one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    from rewind.worker_args import add_worker_arguments

    parser = _Parser(prog="rewind", description="Durable, forkable LLM agent runs on Temporal")
    parser.add_argument("--version", action="version", version=f"rewind {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, **handler: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
        p.set_defaults(**handler)
        return p

    p = command("server", "run the embedded Temporal dev server (state under REWIND_HOME, .rewind/)", sync=cmd_server)
    p.add_argument("--port", type=int, help="gRPC port (default: from TEMPORAL_ADDRESS, 7233)")
    p.add_argument("--ui-port", type=int, default=8233)

    p = command("worker", "run a worker (same as python worker.py)", sync=cmd_worker)
    add_worker_arguments(p)

    p = command("health", "exit 0 if the worker on this machine polls Temporal (container health check)", sync=cmd_health)
    p.add_argument("--max-age", type=float, default=30.0, help="seconds (default 30)")
    p.add_argument("--task-queue", help="the worker's task queue (default: REWIND_TASK_QUEUE, rewind)")

    p = command("demo", "whole embedded stack + the research agent, with live progress", handler=cmd_demo)
    p.add_argument("--approve", action="store_true",
                   help="save_report waits for your approval; the demo shows how to give it")

    p = command("start", "start an agent run; prints its run id", handler=cmd_start)
    p.add_argument("--task", required=True, type=_task)
    p.add_argument("--system-prompt")
    p.add_argument("--tools", metavar="NAMES", help="comma-separated tool names (default: all the worker has)")
    p.add_argument("--model")
    p.add_argument("--run-id")
    p.add_argument("--max-steps", type=_STEPS, default=50)
    p.add_argument("--max-cost", type=_USD, help="pause before a step that would pass this many USD")
    p.add_argument("--max-tokens", type=_TOKENS, help="pause before a step that would pass this many tokens")
    p.add_argument("--wait", action="store_true", help="wait for the run to finish (live progress on a terminal)")
    p.add_argument("--fast", action="store_true",
                   help="model calls and read-only tools as local activities, recorded every ~2 s: much less "
                        "overhead per step; a crash re-runs the unrecorded last moments (README: Fast path)")

    p = command("tree", "every checkpoint of a run, all branches", handler=cmd_tree)
    p.add_argument("run")
    p.add_argument("--format", choices=["text", "mermaid", "dot"], default="text",
                   help="text (default), or a graph: Mermaid flowchart or Graphviz DOT")

    p = command("stats", "runs by state, tokens and cost by model and branch, cache hits, step times, retries",
                handler=cmd_stats)
    p.add_argument("--run", action="append", metavar="RUN", help="only this run (repeatable; default: every run in the store)")

    p = command("show", "one full AgentCheckpoint (id RUN:BRANCH:STEP)", handler=cmd_show)
    p.add_argument("checkpoint")

    p = command("export", "write one checkpoint as a standalone JSON document", handler=cmd_export)
    p.add_argument("checkpoint")
    p.add_argument("--out", help="file to write, or - for stdout (the JSON document)")
    p.add_argument("--format", choices=["json", "langgraph"], default="json",
                   help="json (default): a standalone AgentCheckpoint; langgraph: a checkpoint of a LangGraph thread")
    p.add_argument("--thread", help="langgraph: the thread to write the checkpoint to")
    p.add_argument("--sqlite", metavar="PATH", help="langgraph: a SqliteSaver database file (created if missing)")
    p.add_argument("--store", metavar="URL", help="langgraph: a RewindSaver store (folder or s3://bucket/prefix)")

    p = command("import", "bring a LangGraph thread in as a run (its checkpoints, branches, tool calls)",
                handler=cmd_import)
    p.add_argument("source", choices=["langgraph"])
    p.add_argument("--thread", required=True, help="the LangGraph thread id")
    p.add_argument("--sqlite", metavar="PATH", help="a SqliteSaver database file")
    p.add_argument("--store", metavar="URL", help="a RewindSaver store (folder or s3://bucket/prefix)")
    p.add_argument("--run-id", required=True, help="the new run's id")

    p = command("mirror", "rebuild a run's checkpoints from its Temporal history (idempotent)", handler=cmd_mirror)
    p.add_argument("run")
    p.add_argument("--branch", help="only this branch (default: main and every branch in the store)")

    p = command("fork", "start a new branch of a run from one of its checkpoints", handler=cmd_fork)
    p.add_argument("run")
    p.add_argument("--step", type=_COUNT, required=True)
    p.add_argument("--from-branch", default="main")
    p.add_argument("--branch", required=True, help="name of the new branch")
    p.add_argument("--system-prompt")
    p.add_argument("--model")
    p.add_argument("--tools", metavar="NAMES", help="comma-separated tool names for the new branch")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="set an agent variable (JSON or text)")
    p.add_argument("--max-steps", type=_STEPS)
    p.add_argument("--wait", action="store_true")

    p = command("rollback", "roll a branch back to a step in place and continue from there", handler=cmd_rollback)
    p.add_argument("run")
    p.add_argument("--step", type=_COUNT, required=True)
    p.add_argument("--branch", default="main")
    p.add_argument("--compensate", action="store_true", help="run the compensations of side effects after that step")
    p.add_argument("--wait", action="store_true")

    p = command("diff", "compare two branches of a run side by side", handler=cmd_diff)
    p.add_argument("run")
    p.add_argument("branch_a")
    p.add_argument("branch_b")

    p = command("view", "write a run as one self-contained HTML page (tree, steps, diffs), from the store alone",
                handler=cmd_view)
    p.add_argument("run")
    p.add_argument("--out", help="file to write (default: RUN.html here), or - for stdout")

    p = command("experiment", "fork a checkpoint N ways x K repetitions and compare (also: status|show|continue ID)",
                handler=cmd_experiment)
    p.add_argument("target", metavar="RUN|status|show|continue", help="the run to experiment on, or what to do")
    p.add_argument("ident", nargs="?", metavar="ID", help="the experiment's id (with status, show, continue)")
    p.add_argument("--step", type=_COUNT, help="the checkpoint every variant forks from")
    p.add_argument("--from-branch", default="main")
    p.add_argument("--variant", action="append", metavar="NAME:key=value,...",
                   help="model=M, system_prompt=TEXT or @file, tools=a+b, temperature=T, seed=S, or an agent "
                        "variable; repeatable")
    p.add_argument("--repeat", type=_STEPS, default=1, help="repetitions of each variant (default 1)")
    p.add_argument("--max-cost", type=_USD, help="the whole experiment's budget in USD (continue: the new total)")
    p.add_argument("--max-steps", type=_STEPS, help="each branch's step budget")
    p.add_argument("--concurrency", type=_STEPS, help="branches running at once (default: all)")
    p.add_argument("--score", metavar="MODULE:FUNCTION", help="a scorer of each branch's final checkpoint")
    p.add_argument("--id", help="the experiment's id (default: a new one)")
    p.add_argument("--markdown", action="store_true", help="show: the table as Markdown")
    p.add_argument("--wait", action="store_true", help="wait until it completes or waits for a raised budget")

    p = command("continue", "continue a run paused by its budget, with a raised budget", handler=cmd_continue)
    p.add_argument("run")
    p.add_argument("--branch", default="main")
    p.add_argument("--max-steps", type=_STEPS)
    p.add_argument("--max-cost", type=_USD)
    p.add_argument("--max-tokens", type=_TOKENS)
    p.add_argument("--wait", action="store_true")

    p = command("cancel", "stop a run (it ends as cancelled; its checkpoints stay)", handler=cmd_cancel)
    p.add_argument("run")
    p.add_argument("--branch", default="main")

    p = command("delete", "erase a run everywhere: Temporal, checkpoints, payloads only it uses", handler=cmd_delete)
    p.add_argument("run")
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")
    p.add_argument("--force", action="store_true", help="terminate the run's running branches first")

    p = command("gc", "erase every finished run whose last checkpoint is older than a duration", handler=cmd_gc)
    p.add_argument("--older-than", required=True, metavar="DURATION", help="30d, 12h, 90m, 45s")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    p.add_argument("--yes", action="store_true", help="do not ask (needed without a terminal)")

    p = command("approve", "let a tool call that waits for approval run", handler=cmd_approve)
    p.add_argument("run")
    p.add_argument("call", help="the tool call id (`rewind pending` lists them)")
    p.add_argument("--branch", default="main")
    p.add_argument("--by", help="who decides (default: the OS user)")
    p.add_argument("--reason")
    p.add_argument("--args", metavar="JSON", help="run with these arguments instead (checked against the tool's schema)")

    p = command("reject", "refuse a tool call that waits for approval; the model gets the reason", handler=cmd_reject)
    p.add_argument("run")
    p.add_argument("call", help="the tool call id (`rewind pending` lists them)")
    p.add_argument("--reason", required=True)
    p.add_argument("--branch", default="main")
    p.add_argument("--by", help="who decides (default: the OS user)")

    command("pending", "every tool call waiting for a decision, across runs", handler=cmd_pending)

    p = command("status", "state of a run: live while it runs, from its result or checkpoints after", handler=cmd_status)
    p.add_argument("run")
    p.add_argument("--branch", default="main")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rewind-agents")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def _one_line(text: str, limit: int = 2000) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code. Nothing but one line reaches stderr on failure."""
    from temporalio.service import RPCError

    drop_empty_library_variables()
    args = build_parser().parse_args(argv)
    debug = False
    try:
        settings = Settings.from_env()
        debug = settings.debug
        if hasattr(args, "sync"):
            return args.sync(args, settings)
        handler: Callable[[argparse.Namespace, Settings], Awaitable[int]] = args.handler
        return asyncio.run(handler(args, settings))
    except RewindError as exc:
        print(f"rewind: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_ERROR
    except RPCError as exc:
        print(f"rewind: Temporal refused the request: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`rewind show ... --json | head -1`): not an error.
        _silence_stdout()
        return 0
    except Exception as exc:  # noqa: BLE001 - no traceback reaches a user
        if debug:
            traceback.print_exc()
        print(f"rewind: unexpected {type(exc).__name__}: {_one_line(str(exc), 500)} "
              "(this is a bug; REWIND_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    # Further writes (the final flush) to the closed pipe must not raise again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> None:
    code = run(argv)
    from rewind.tracing import shutdown

    shutdown()  # export the command's spans (os._exit below skips every exit hook)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    sys.stderr.flush()
    # os._exit, not sys.exit: the Temporal client's native runtime threads can
    # call into Python while the interpreter finalizes and abort the process
    # (SIGABRT, "PyGILState_Release ... finalizing") after the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
