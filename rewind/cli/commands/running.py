"""Running: `rewind start`, `status`, `continue`, `cancel`."""

from __future__ import annotations

import argparse
from typing import Callable

from rewind.cli.commands.approvals import pending_lines
from rewind.cli.commands.arguments import (
    BRANCH_HELP,
    RUN_HELP,
    SECONDS,
    STEPS,
    TOKENS,
    USD,
    WAIT_HELP,
    pipeline_arguments,
    task_text,
)
from rewind.cli.commands.common import (
    WAITING_FOR_WORKER,
    client_for,
    connection_for,
    continue_hint,
    emit,
    interactive,
    names,
    open_checkpoints,
    say_no_worker,
    wait_and_report,
)
from rewind.settings.config import Settings
from workflows.vocabulary.errors import RewindError, UsageError
from workflows.vocabulary.defaults import PIPELINE_MAX_STEPS
from workflows.vocabulary.ids import validate_id
from workflows.pipeline.ids import parse_activity_id
from workflows.vocabulary.text import usd


async def cmd_start(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.starting import StartRequest, start

    request = StartRequest(task=args.task, pipeline=args.pipeline, graph=args.graph, input=args.input,
                           agent=args.agent, system_prompt=args.system_prompt, tools=names(args.tools),
                           model=args.model, run_id=args.run_id, max_steps=args.max_steps, max_cost=args.max_cost,
                           max_tokens=args.max_tokens, fast=args.fast)
    request.check()  # before connecting: a usage error needs no Temporal
    from rewind.stores import check_stores

    await check_stores(settings)
    client = await client_for(settings)
    started = await start(client, settings, request)
    agent_input, handle = started.agent_input, started.handle
    info = {"run_id": agent_input.run_id, "workflow_id": handle.id}
    if started.no_worker:
        # Said after the start, at once, so a run that does not start is not announced (status says
        # it in the same words).
        then = []
        if agent_input.pipeline is not None:
            then.append("the pipeline run needs one whose --tool-modules define it")
        elif agent_input.tools:
            then.append(f"--tools could not be checked (the run waits {agent_input.tool_wait_s:g} s for a worker "
                        "with each named tool)")
        say_no_worker(started.no_worker, *then, *([WAITING_FOR_WORKER] if args.wait else []))
    if not args.wait:
        emit(info, args.json, agent_input.run_id)
        return 0
    if interactive(args):
        print(f"run {agent_input.run_id} started; progress:", flush=True)
    return await wait_and_report(args, client, handle, agent_input.run_id, "main", info, workers_checked=True)


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import run_status
    from workflows.vocabulary.errors import ConfigError, RunNotFoundError, TemporalUnreachableError

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    try:
        client = await connection_for(settings)  # a finished run needs no more than the service client
    except TemporalUnreachableError as unreachable:  # Temporal is down or gone: the checkpoints still answer
        async with open_checkpoints(settings) as store:
            view = await run_status(None, store, args.run, args.branch, unreachable=unreachable,
                                    temporal_address=settings.temporal_address)
    else:
        # A checkpoint store that is down must not hide the live run (whose
        # status then says how far the mirror is behind and why).
        store_error = None
        try:
            async with open_checkpoints(settings, deferred=True) as store:  # read only when the result cannot answer
                view = await run_status(client, store, args.run, args.branch, task_queue=settings.task_queue,
                                        query_timeout_s=args.query_timeout)
        except ConfigError as exc:
            store_error = str(exc)
            try:
                view = await run_status(client, None, args.run, args.branch, task_queue=settings.task_queue,
                                        query_timeout_s=args.query_timeout)
            except RunNotFoundError:
                raise exc from None  # Temporal does not have it, and the store that might cannot answer
        view.store_error = store_error
    if settings.hot_store_url:  # even with the durable store down: then the backlog is what matters
        view.hot_tier = await hot_tier_lag(settings, args.run)
    if args.json:
        emit(view.model_dump(mode="json"), True, "")
        return 0
    lines = [f"run {view.run_id} (branch {view.branch_id}): {view.state}"]
    s = view.status
    if s is not None:
        lines += [
            f"  step         {s.step} (model {s.model or '-'})" if view.live_step is None or view.live_step == s.step else
            f"  step         {view.live_step} (live, from Temporal; the newest checkpoint is of step {s.step})",
            f"  tokens       {s.total_tokens} ({s.prompt_tokens} in / {s.completion_tokens} out)",
            f"  cost         {usd(s.cost_usd)}" + (f" ({s.unpriced_calls} calls of an unpriced model)" if s.unpriced_calls else ""),
            f"  model calls  {s.llm_calls}",
            f"  tool calls   {s.tool_calls_done} executed, {s.tool_cache_hits} served from cache",
        ]
        if s.branch_ledger != s.ledger:  # a fork's branch: the figures above include what it inherited
            own = s.branch_ledger
            lines.append(f"  this branch  model calls {own.model_calls}, tool calls {own.tool_calls}, "
                         f"tokens {own.total_tokens}, cost {usd(own.cost_usd)} since its fork point "
                         "(the figures above count from step 0 of its line, as `rewind tree` does)")
        if s.budget_reason:
            lines.append(f"  paused       {s.budget_reason}; {continue_hint(view.run_id, s)}")
        for sub in s.subagents:
            lines.append(f"  sub-agent    {sub.agent} call {sub.tool_call_id}: {sub.state} (branch {sub.branch_id}"
                         + (f"; `rewind status {view.run_id} --branch {sub.branch_id}`)" if sub.state not in
                            ("completed", "failed") else ")") + (f": {sub.reason}" if sub.reason else ""))
        ended = [c for c in s.pipeline_calls if c.state != "running"]
        if ended and len(ended) < len(s.pipeline_calls):  # a pipeline's calls that ended while an earlier one still runs (the rest: `running` below)
            lines.append("  ended        " + ", ".join(
                f"call {c.position} {c.label} " + (f"(step {c.step})" if c.state == "completed" else f"({c.state})")
                for c in ended))
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
        call = parse_activity_id(p.get("activity_id") or "")
        if call is not None:  # a pipeline's call: which one of its code
            what = f"call {call['position']} {call['label']} ({what})"
        if p.get("summary"):
            what = f"{p['summary']} ({what})"
        lines.append(f"  running      {what} attempt {p['attempt']}" + (f": {p['last_failure']}" if p.get("last_failure") else ""))
    if view.code_change:
        lines.append(f"  stopped      {view.code_change}")
    elif view.failure:
        lines.append(f"  failure      {view.failure}")
    if view.note:
        lines.append(f"  note         {view.note}")
    if view.store_error:
        lines.append(f"  store        unreachable: {view.store_error}")
    if view.hot_tier:
        lines.append(f"  hot tier     {hot_tier_line(view.hot_tier)}")
    print("\n".join(lines))
    return 0


async def hot_tier_lag(settings: Settings, run_id: str) -> dict[str, object]:
    """How far REWIND_STORE is behind the Redis hot tier of REWIND_HOT_STORE, for this run and in all."""
    from rewind.stores import checkpoint_objects
    from workflows.vocabulary.errors import StoreUnavailableError

    objects = checkpoint_objects(settings)
    durable = objects.durable.url  # type: ignore[attr-defined]
    try:
        found = await objects.lag(f"runs/{run_id}/")  # type: ignore[attr-defined]
    except StoreUnavailableError as exc:
        return {"durable": durable, "error": str(exc)}
    finally:
        await objects.aclose()
    return {"durable": durable, "run_pending": found.matching, "pending": found.pending,
            "oldest_s": None if found.oldest_s is None else round(found.oldest_s, 3)}


def hot_tier_line(hot: dict[str, object]) -> str:
    if hot.get("error"):
        return f"unreachable ({hot['error']}); reads and writes go to {hot['durable']}"
    if not hot["pending"]:
        return f"every object is in {hot['durable']}"
    return (f"{hot['run_pending']} object(s) of this run not yet in {hot['durable']} ({hot['pending']} of all runs, "
            f"the oldest written {hot['oldest_s']:.1f} s ago)")


async def cmd_continue(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import branch_workflows
    from workflows.vocabulary.contracts import AgentStatus
    from workflows.vocabulary.wire import RAISE_LIMITS_SIGNAL, STATUS_QUERY

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    updates = {k: v for k, v in {"max_steps": args.max_steps, "max_cost_usd": args.max_cost, "max_tokens": args.max_tokens}.items() if v is not None}
    if not updates:
        raise UsageError("say which budget to raise: --max-steps, --max-cost or --max-tokens (each the new total)")
    client = await client_for(settings)
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
        return await wait_and_report(args, client, handle, args.run, args.branch, info)
    emit(info, args.json, f"run {args.run} continues with " + ", ".join(f"{flags[k]} {shown(k, v)}" for k, v in updates.items()))
    return 0


async def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import branch_workflows

    validate_id("run", args.run)
    validate_id("branch", args.branch)
    client = await client_for(settings)
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
    from checkpoint_bridge.temporal.runs import pollers

    queue = desc.raw_description.execution_config.task_queue.name
    waiting = bool(queue) and not await pollers(client, queue, workflows=True)
    emit({"run_id": args.run, "branch": args.branch, "workflow_id": handle.id, "cancel_requested": True,
           "no_worker": waiting}, args.json,
          f"cancellation of run {args.run} ({args.branch}) requested; "
          + (f"no worker is polling task queue {queue!r}, so it takes effect when one picks the run up"
             if waiting else f"`rewind status {args.run}` shows when it has stopped"))
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("start", "start an agent run (--task), a pipeline run (--pipeline) or a graph run (--graph); "
                         "prints its run id",
                handler=cmd_start)
    p.add_argument("--task", type=task_text, help="what the agent should do (its first user message)")
    p.add_argument("--pipeline", metavar="NAME",
                   help="run a @pipeline of the worker's tool modules instead of the agent loop (docs/pipelines.md)")
    p.add_argument("--graph", metavar="MODULE:ATTR",
                   help="run a LangGraph graph (a compiled StateGraph or an @entrypoint) that a tools module of the "
                        "worker defines, as a durable run (docs/langgraph.md)")
    p.add_argument("--input", metavar="JSON", type=pipeline_arguments,
                   help="a pipeline's arguments or a graph's input: a JSON object, or @FILE holding one "
                        "(default: {})")
    p.add_argument("--agent", metavar="NAME",
                   help="run a declared agent (subagent(...) in a tools module): its prompt, tools, model and "
                        "max_steps, unless given here")
    p.add_argument("--system-prompt", help="the agent's system prompt (default: a neutral one, or the declared "
                                           "agent's)")
    p.add_argument("--tools", metavar="NAMES", help="comma-separated tool names (default: all the worker has)")
    p.add_argument("--model", help="a model the endpoint serves, or script:NAME for a script of the offline model "
                                   "(default: REWIND_MODEL, else gpt-4o-mini)")
    p.add_argument("--run-id", help="the run's id (default: run-DATE-TIME-XXXXXX); an id names one run forever")
    p.add_argument("--max-steps", type=STEPS, help="steps at most (default 50, or the agent's max_steps; "
                                                  f"a pipeline's steps are its calls: {PIPELINE_MAX_STEPS})")
    p.add_argument("--max-cost", type=USD, help="pause before a step that would pass this many USD")
    p.add_argument("--max-tokens", type=TOKENS, help="pause before a step that would pass this many tokens")
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)
    p.add_argument("--fast", action="store_true",
                   help="model calls and read-only tools as local activities, recorded every ~2 s: much less "
                        "overhead per step; a crash re-runs the unrecorded last moments (docs/operations.md: Fast path)")

    p = command("continue", "continue a run paused by its budget, with a raised budget", handler=cmd_continue)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--branch", default="main", help=BRANCH_HELP)
    p.add_argument("--max-steps", type=STEPS, help="the new limit of steps, in all (more than the run has taken)")
    p.add_argument("--max-cost", type=USD, help="the new limit in USD, in all (more than the run has spent)")
    p.add_argument("--max-tokens", type=TOKENS, help="the new limit of tokens, in all (more than the run has used)")
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)

    p = command("cancel", "stop a run (it ends as cancelled; its checkpoints stay)", handler=cmd_cancel)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--branch", default="main", help=BRANCH_HELP)

    p = command("status", "state of a run: live while it runs, from its result or checkpoints after", handler=cmd_status)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--branch", default="main", help=BRANCH_HELP)
    # A live worker answers in milliseconds; one Temporal still lists after it died never
    # does, and the status should not hang on it (it then comes from history and the store).
    p.add_argument("--query-timeout", type=SECONDS, default=1.5,
                   metavar="SECONDS", help="how long to wait for the worker's live answer (default 1.5)")
