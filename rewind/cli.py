"""The `rewind` command line: a thin shell over the Python API.

Errors: non-zero exit and one clear line on stderr, never a traceback.
`--json` prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, Awaitable, Callable

from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from rewind.config import Settings
from rewind.errors import RewindError


def _emit(doc: Any, as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True, default=str))
    else:
        print(text)


async def cmd_start(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import connect, new_run_id, start_run
    from workflows.contracts import AgentInput, RunLimits

    agent_input = AgentInput(
        run_id=args.run_id or new_run_id(),
        task=args.task,
        tools=[t.strip() for t in (args.tools or "").split(",") if t.strip()],
        model=args.model or settings.model or "gpt-4o-mini",
        limits=RunLimits(max_steps=args.max_steps, max_cost_usd=args.max_cost, max_tokens=args.max_tokens),
        **({"system_prompt": args.system_prompt} if args.system_prompt else {}),
    )
    client = await connect(settings)
    handle = await start_run(client, settings, agent_input)
    if not args.wait:
        _emit({"run_id": agent_input.run_id, "workflow_id": handle.id}, args.json, agent_input.run_id)
        return 0
    return await _wait_and_report(handle, agent_input.run_id, args.json)


async def _wait_and_report(handle: Any, run_id: str, as_json: bool, extra: dict[str, Any] | None = None) -> int:
    from rewind.client import wait_for_outcome

    try:
        result = await wait_for_outcome(handle)
    except WorkflowFailureError as exc:
        reason = str(exc.cause or exc)
        _emit({"run_id": run_id, **(extra or {}), "state": "failed", "error": reason}, as_json, f"run {run_id} failed: {reason}")
        return 1
    doc = {"run_id": run_id, **(extra or {}), **result.model_dump(mode="json")}
    text = f"run {run_id} ({result.status.branch_id}): {result.status.state}"
    if result.status.budget_reason:
        text += f" ({result.status.budget_reason}; raise it with `rewind continue {run_id}`)"
    _emit(doc, as_json, text + (f"\n{result.final_answer}" if result.final_answer else ""))
    return 0 if result.status.state == "completed" else 2


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import connect, run_view

    client = await connect(settings)
    view = await run_view(client, args.run, args.branch)
    if args.json:
        _emit(view.model_dump(mode="json"), True, "")
        return 0
    lines = [f"run {view.run_id}: workflow {view.workflow_status}"]
    s = view.status
    if s is not None:
        lines += [
            f"  state        {s.state} (step {s.step}, model {s.model})",
            f"  tokens       {s.total_tokens} ({s.prompt_tokens} in / {s.completion_tokens} out)",
            f"  cost         ${s.cost_usd:.6f}" + (f" ({s.unpriced_calls} calls of an unpriced model)" if s.unpriced_calls else ""),
            f"  model calls  {s.llm_calls}",
            f"  tool calls   {s.tool_calls_done} executed, {s.tool_cache_hits} served from cache",
        ]
        if s.last_error:
            lines.append(f"  last error   {s.last_error}")
        if s.mirror_pending or s.mirror_error:
            lines.append(f"  mirror       {s.mirror_pending} step(s) behind" + (f"; {s.mirror_error}" if s.mirror_error else ""))
        if s.final_answer:
            lines.append(f"  final answer {s.final_answer}")
    for p in view.pending:
        lines.append(f"  pending      {p['activity']} attempt {p['attempt']}" + (f": {p['last_failure']}" if p.get("last_failure") else ""))
    if view.failure:
        lines.append(f"  failure      {view.failure}")
    print("\n".join(lines))
    return 0


async def cmd_tree(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.inspect import tree, tree_json, tree_text
    from checkpoint_bridge.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        summaries = await tree(store, args.run)
    _emit(tree_json(summaries), args.json, tree_text(summaries) if not args.json else "")
    return 0


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.inspect import checkpoint_text
    from checkpoint_bridge.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        cp = await store.load(args.checkpoint)
    _emit(cp.model_dump(mode="json"), args.json, checkpoint_text(cp) if not args.json else "")
    return 0


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from checkpoint_bridge.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        data = await store.export(args.checkpoint)
    try:
        Path(args.out).write_bytes(data)
    except OSError as exc:
        raise RewindError(f"cannot write {args.out}: {exc}") from exc
    print(f"wrote {args.checkpoint} to {args.out} ({len(data)} bytes)")
    return 0


async def cmd_mirror(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.ids import validate_id
    from checkpoint_bridge.mirror import mirror_run
    from checkpoint_bridge.store import open_checkpoint_store
    from rewind.client import connect, workflow_id_for

    validate_id("run", args.run)
    client = await connect(settings)
    reports = []
    async with open_checkpoint_store(settings.store_url) as store:
        branches = [args.branch] if args.branch else sorted({"main", *await store.branches(args.run)})
        for branch in branches:
            reports.append(await mirror_run(client, store, workflow_id_for(args.run, branch)))
    docs = [r.model_dump() for r in reports]
    text = "\n".join(
        f"{r.run_id} branch {r.branch_id}: {r.checkpoints} checkpoints, {r.written} written, {r.already_present} already present"
        for r in reports
    )
    _emit({"run_id": args.run, "branches": docs}, args.json, text)
    return 0


def _parse_set(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RewindError(f"--set {pair!r} is not key=value")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


async def cmd_fork(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.branching import fork
    from checkpoint_bridge.store import open_checkpoint_store
    from rewind.client import connect
    from workflows.contracts import RunLimits

    client = await connect(settings)
    async with open_checkpoint_store(settings.store_url) as store:
        limits = RunLimits(max_steps=args.max_steps) if args.max_steps else None
        result = await fork(
            client, settings, store, args.run, args.step, branch=args.branch, from_branch=args.from_branch,
            system_prompt=args.system_prompt, model=args.model, limits=limits,
            tools=[t.strip() for t in args.tools.split(",") if t.strip()] if args.tools else None,
            variables=_parse_set(args.set),
        )
    info = {"run_id": result.run_id, "branch": result.branch, "workflow_id": result.workflow_id, "fork_point": result.fork_point}
    if args.wait:
        return await _wait_and_report(result.handle, result.run_id, args.json, info)
    _emit(info, args.json, f"forked {result.fork_point} into branch {result.branch} of run {result.run_id} (workflow {result.workflow_id})")
    return 0


async def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from checkpoint_bridge.branching import rollback
    from checkpoint_bridge.store import open_checkpoint_store
    from rewind.client import connect

    client = await connect(settings)
    async with open_checkpoint_store(settings.store_url) as store:
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
        lines.append("  side effects after that step (rewinding does not undo them):")
        for e in result.side_effects:
            lines.append(f"    step {e.step}: {e.tool_name}({json.dumps(e.arguments)[:80]}) key {e.idempotency_key}")
    for c in result.compensations:
        lines.append(f"  compensation of {c['tool_name']} ({c['original_key']}): {c['status']}" + (f" - {c['error']}" if c.get("error") else ""))
    lines.append(f"  continuing from step {result.step} in workflow {result.continued.workflow_id}")
    if args.wait:
        print("\n".join(lines)) if not args.json else None
        return await _wait_and_report(result.continued.handle, result.run_id, args.json, info)
    _emit(info, args.json, "\n".join(lines))
    return 0


async def cmd_diff(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.diff import diff, diff_json, diff_text
    from checkpoint_bridge.store import open_checkpoint_store

    async with open_checkpoint_store(settings.store_url) as store:
        result = await diff(store, args.run, args.branch_a, args.branch_b)
    _emit(diff_json(result), args.json, "" if args.json else diff_text(result))
    return 0


async def cmd_continue(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.client import branch_workflows, connect
    from workflows.contracts import AgentStatus

    client = await connect(settings)
    workflows = await branch_workflows(client, args.run, args.branch)
    if not workflows:
        raise RewindError(f"no run {args.run!r} (branch {args.branch!r}) in Temporal")
    handle = workflows[-1][1]
    status = await handle.query("status", result_type=AgentStatus)
    if status.state != "budget_exceeded":
        raise RewindError(f"run {args.run!r} is {status.state}, not paused by its budget; nothing to continue")
    updates = {k: v for k, v in {"max_steps": args.max_steps, "max_cost_usd": args.max_cost, "max_tokens": args.max_tokens}.items() if v is not None}
    if not updates:
        raise RewindError("say which budget to raise: --max-steps, --max-cost or --max-tokens")
    limits = status.limits.model_copy(update=updates)
    await handle.signal("raise_limits", limits)
    if args.wait:
        return await _wait_and_report(handle, args.run, args.json)
    _emit({"run_id": args.run, "limits": limits.model_dump()}, args.json, f"run {args.run} continues with {updates}")
    return 0


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.demo import run_demo

    result = await run_demo(settings)
    return 0 if result.status.state == "completed" else 2


def cmd_server(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import time

    from rewind.embedded import DevServer

    port = args.port or int(settings.temporal_address.rsplit(":", 1)[-1])
    server = DevServer.start(settings.home / "temporal.db", port=port, ui_port=args.ui_port,
                             log_file=settings.home / "temporal.log")
    print(f"Temporal dev server on 127.0.0.1:{server.port}, UI http://127.0.0.1:{server.ui_port}, "
          f"state in {server.db_file} (Ctrl-C stops it)", flush=True)
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
    import worker

    worker.main((["--tools", args.tools] if args.tools else []))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rewind", description="Durable, forkable LLM agent runs on Temporal")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("server", help="run the embedded Temporal dev server (state under .rewind/)")
    p.add_argument("--port", type=int, help="gRPC port (default: from TEMPORAL_ADDRESS, 7233)")
    p.add_argument("--ui-port", type=int, default=8233)
    p.set_defaults(sync=cmd_server)

    p = sub.add_parser("worker", help="run a worker (same as python worker.py)")
    p.add_argument("--tools", help="comma-separated tool modules (default: REWIND_TOOLS)")
    p.set_defaults(sync=cmd_worker)

    p = sub.add_parser("demo", help="whole embedded stack + the research agent, with live progress")
    p.set_defaults(handler=cmd_demo)

    p = sub.add_parser("start", help="start an agent run; prints its run id")
    p.add_argument("--task", required=True)
    p.add_argument("--system-prompt")
    p.add_argument("--tools", help="comma-separated tool names (default: all the worker has)")
    p.add_argument("--model")
    p.add_argument("--run-id")
    p.add_argument("--max-steps", type=int, default=50)
    p.add_argument("--max-cost", type=float, help="pause before a step that would pass this many USD")
    p.add_argument("--max-tokens", type=int, help="pause before a step that would pass this many tokens")
    p.add_argument("--wait", action="store_true", help="wait for the run to finish")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_start)

    p = sub.add_parser("tree", help="every checkpoint of a run, all branches")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_tree)

    p = sub.add_parser("show", help="one full AgentCheckpoint (id RUN:BRANCH:STEP)")
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)

    p = sub.add_parser("export", help="write one checkpoint as a standalone JSON document")
    p.add_argument("checkpoint")
    p.add_argument("--out", required=True)
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("mirror", help="rebuild a run's checkpoints from its Temporal history (idempotent)")
    p.add_argument("run")
    p.add_argument("--branch", help="only this branch (default: main and every branch in the store)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_mirror)

    p = sub.add_parser("fork", help="start a new branch of a run from one of its checkpoints")
    p.add_argument("run")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--from-branch", default="main")
    p.add_argument("--branch", required=True, help="name of the new branch")
    p.add_argument("--system-prompt")
    p.add_argument("--model")
    p.add_argument("--tools", help="comma-separated tool names for the new branch")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="set an agent variable (JSON or text)")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--wait", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_fork)

    p = sub.add_parser("rollback", help="roll a branch back to a step in place and continue from there")
    p.add_argument("run")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--branch", default="main")
    p.add_argument("--compensate", action="store_true", help="run the compensations of side effects after that step")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_rollback)

    p = sub.add_parser("diff", help="compare two branches of a run side by side")
    p.add_argument("run")
    p.add_argument("branch_a")
    p.add_argument("branch_b")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_diff)

    p = sub.add_parser("continue", help="continue a run paused by its budget, with a raised budget")
    p.add_argument("run")
    p.add_argument("--branch", default="main")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--max-cost", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--wait", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_continue)

    p = sub.add_parser("status", help="live status of a run")
    p.add_argument("run")
    p.add_argument("--branch", default="main")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env()
    try:
        if hasattr(args, "sync"):
            code = args.sync(args, settings)
        else:
            handler: Callable[[argparse.Namespace, Settings], Awaitable[int]] = args.handler
            code = asyncio.run(handler(args, settings))
    except RewindError as exc:
        print(f"rewind: {exc}", file=sys.stderr)
        code = 1
    except RPCError as exc:
        print(f"rewind: Temporal refused the request: {exc}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit, not sys.exit: the Temporal client's native runtime threads can
    # call into Python while the interpreter finalizes and abort the process
    # (SIGABRT, "PyGILState_Release ... finalizing") after the work is done.
    os._exit(code)


if __name__ == "__main__":
    main()
