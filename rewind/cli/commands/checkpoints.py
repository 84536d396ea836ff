"""Reading the checkpoint store: `rewind tree`, `stats`, `show`, `export`, `import`, `mirror`, `view`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Callable

from rewind.cli.commands.arguments import RUN_HELP
from rewind.cli.commands.common import client_for, emit, open_checkpoints
from rewind.cli.commands.runs import add_filters, moment
from rewind.settings.config import Settings
from workflows.vocabulary.errors import InvalidIdError, RewindError, UsageError
from workflows.vocabulary.ids import parse_checkpoint_id, validate_id


async def cmd_tree(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.inspect import subagent_info, tree, tree_json, tree_text
    from checkpoint_bridge.views.tree_graph import tree_dot, tree_mermaid

    validate_id("run", args.run)
    if args.json and args.format != "text":
        raise UsageError("--json and --format are two ways to print the tree; choose one")
    async with open_checkpoints(settings) as store:
        summaries = await tree(store, args.run)
        subagents = await subagent_info(store, summaries)
    if args.json:
        emit(tree_json(summaries, subagents), True, "")
    elif args.format == "text":
        print(tree_text(summaries, subagents))
    else:
        print({"mermaid": tree_mermaid, "dot": tree_dot}[args.format](summaries))
    return 0


async def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.stats import stats_text, store_stats

    async with open_checkpoints(settings) as store:
        stats = await store_stats(store, args.run or None, since=args.since, by=args.by)
    doc, text = stats.model_dump(mode="json"), stats_text(stats) if not args.json else ""
    if args.metrics:
        # The store keeps no write timing (checkpoints are projections of history): the workers measure it.
        from rewind.write_latency import latency_text, write_latency

        latency = await write_latency(args.metrics)
        doc["write_latency"] = latency.model_dump(mode="json")
        text = text and f"{text}\n{latency_text(latency)}"
    emit(doc, args.json, text)
    return 0


CHECKPOINT_HELP = "a checkpoint's id, RUN:BRANCH:STEP (the id column of `rewind tree RUN`), e.g. run-1:main:2"


def checkpoint_id(text: str) -> str:
    """A checkpoint id as `rewind tree RUN` prints it in its id column (RUN:BRANCH:STEP)."""
    try:
        parse_checkpoint_id(text)
    except InvalidIdError as exc:
        raise InvalidIdError(f"{exc} (the id column of `rewind tree RUN`)") from None
    return text


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.inspect import checkpoint_text

    checkpoint_id(args.checkpoint)
    async with open_checkpoints(settings) as store:
        cp = await store.load(args.checkpoint)
    emit(cp.model_dump(mode="json"), args.json, checkpoint_text(cp) if not args.json else "")
    return 0


async def _export_langgraph(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.langgraph.interop import (
        close_saver,
        export_to_thread,
        open_saver,
    )

    if args.thread is None or (args.sqlite is None) == (args.store is None):
        raise UsageError("--format langgraph needs --thread T and one of --sqlite PATH or --store URL "
                         "(where the LangGraph thread goes)")
    async with open_checkpoints(settings) as store:
        cp = await store.load(args.checkpoint)
    saver = await asyncio.to_thread(open_saver, sqlite=args.sqlite, store_url=args.store,
                                    endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region, create=True)
    try:
        written = await asyncio.to_thread(export_to_thread, cp, saver, args.thread)
    finally:
        await asyncio.to_thread(close_saver, saver)
    emit({"checkpoint": args.checkpoint, "thread_id": args.thread, "langgraph_checkpoint_id": written}, args.json,
          f"wrote {args.checkpoint} to LangGraph thread {args.thread} (checkpoint {written}); a graph with a "
          "`messages` state goes on from it with graph.invoke({'messages': [...]}, "
          f"{{'configurable': {{'thread_id': '{args.thread}'}}}})")
    return 0


async def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.langgraph.interop import (
        close_saver,
        import_thread,
        open_saver,
    )

    validate_id("run", args.run_id)
    saver = await asyncio.to_thread(open_saver, sqlite=args.sqlite, store_url=args.store,
                                    endpoint_url=settings.s3_endpoint_url, region_name=settings.aws_region)
    try:
        async with open_checkpoints(settings) as store:
            report = await import_thread(store, saver, args.thread, args.run_id)
    finally:
        await asyncio.to_thread(close_saver, saver)
    doc = {"run_id": report.run_id, "thread_id": report.thread_id, "checkpoints": report.checkpoints,
           "branches": report.branches, "skipped_without_messages": report.skipped}
    branches = ", ".join(f"{b} ({n})" for b, n in report.branches.items())
    emit(doc, args.json, f"imported LangGraph thread {report.thread_id} as run {report.run_id}: "
          f"{report.checkpoints} checkpoint(s) on {branches}; see `rewind tree {report.run_id}`")
    return 0


async def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    if args.runs:
        from rewind.cli.commands.run_export import cmd_export_runs

        return await cmd_export_runs(args, settings)
    if args.checkpoint is None:
        raise UsageError("say what to export: a checkpoint id (RUN:BRANCH:STEP), or --runs with the filters of "
                         "`rewind runs`")
    if args.format in ("jsonl", "parquet"):
        raise UsageError(f"--format {args.format} exports runs: add --runs (and the filters of `rewind runs`) in "
                         f"place of checkpoint {args.checkpoint}")
    given = [flag for flag, value in (("--state", args.state), ("--since", args.since), ("--until", args.until),
                                      ("--agent", args.agent), ("--tool-errors", args.tool_errors or None),
                                      ("--min-cost", args.min_cost), ("--limit", args.limit)) if value is not None]
    if given:
        raise UsageError(f"{given[0]} selects runs: add --runs (in place of checkpoint {args.checkpoint})")
    checkpoint_id(args.checkpoint)
    if args.format == "langgraph":
        return await _export_langgraph(args, settings)
    if args.out is None:
        raise UsageError("say where to write the document: --out FILE, or --out - for stdout")
    async with open_checkpoints(settings) as store:
        data = await store.export(args.checkpoint)
    if args.out == "-":  # the document itself on stdout (it is JSON already, with or without --json)
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        return 0
    try:
        Path(args.out).write_bytes(data)
    except OSError as exc:
        raise RewindError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    emit({"checkpoint": args.checkpoint, "out": str(Path(args.out).resolve()), "bytes": len(data)}, args.json,
          f"wrote {args.checkpoint} to {args.out} ({len(data)} bytes)")
    return 0


async def cmd_mirror(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.projection.mirror import mirror_branches, run_branches

    validate_id("run", args.run)
    if args.branch:
        validate_id("branch", args.branch)
    from checkpoint_bridge.checkpoints.outputs import OutputStore
    from rewind.stores import payload_store

    client = await client_for(settings)
    reports = []
    payloads = payload_store(settings)
    try:
        async with open_checkpoints(settings) as store:
            # Every branch Temporal has too, not only those the store has (an empty store after a loss).
            branches = [args.branch] if args.branch else await run_branches(client, store, args.run)
            reports = await mirror_branches(client, store, args.run, branches, outputs=OutputStore(payloads))
    finally:
        await payloads.aclose()
    docs = [r.model_dump() for r in reports]
    text = "\n".join(
        f"{r.run_id} branch {r.branch_id}: {r.checkpoints} checkpoint{'' if r.checkpoints == 1 else 's'}, "
        f"{r.written} written, {r.already_present} already present"
        + ("" if r.history else " (Temporal no longer has its history: the store's checkpoints are the only copy)")
        for r in reports
    )
    emit({"run_id": args.run, "branches": docs}, args.json, text)
    return 0


async def cmd_view(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.views.viewer import view_page

    validate_id("run", args.run)
    if args.out == "-" and args.json:
        raise UsageError("--out - writes the page on stdout and --json a summary of it; choose one")
    out = Path(args.out or f"{args.run}.html")
    async with open_checkpoints(settings) as store:
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
    emit({"run": args.run, "out": str(out.resolve()), "bytes": len(data), "branches": branches, "steps": steps},
          args.json, f"wrote {out} ({len(data):,} bytes; {branches} branch(es), {steps} checkpoint(s)): open it in a browser")
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("tree", "every checkpoint of a run, all branches", handler=cmd_tree, store_only=True)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--format", choices=["text", "mermaid", "dot"], default="text",
                   help="text (default), or a graph: Mermaid flowchart or Graphviz DOT")

    p = command("stats", "runs by state, tokens and cost by model and branch, cost per run, cache hits, step "
                         "times, retries; --by agent, model, tool or day", handler=cmd_stats, store_only=True)
    p.add_argument("--run", action="append", metavar="RUN", help="only this run (repeatable; default: every run in the store)")
    p.add_argument("--since", type=moment, metavar="DURATION",
                   help="only runs started since then (their first checkpoint): 45s, 90m, 12h, 7d, 2w ago, or a "
                        "time (2026-12-06T09:00:00Z)")
    p.add_argument("--by", choices=["agent", "model", "tool", "day", "node"],
                   help="the figures per group too: steps, tokens, cost, cost per run, cache hit rate, retries, "
                        "tool errors, step time (by tool: calls, cache hits, retries, errors, call time; by node: a "
                        "graph run's nodes, with each node's own time)")
    p.add_argument("--metrics", action="append", metavar="URL",
                   help="also the checkpoint write latency and mirror lag the workers measured, read from their "
                        "metrics endpoint (http://HOST:PORT/metrics, REWIND_METRICS_PORT; repeatable: added up)")

    p = command("show", "one full AgentCheckpoint (id RUN:BRANCH:STEP)", handler=cmd_show, store_only=True)
    p.add_argument("checkpoint", help=CHECKPOINT_HELP)

    p = command("export", "write one checkpoint as a standalone JSON document, or (--runs) runs as data: "
                          "conversations (jsonl) or steps (parquet)", handler=cmd_export, store_only=True)
    p.add_argument("checkpoint", nargs="?", help=CHECKPOINT_HELP + " (leave it out with --runs)")
    p.add_argument("--out", help="file to write, or - for stdout (the JSON document); --runs: default stdout for "
                                 "jsonl, runs.parquet for parquet")
    p.add_argument("--format", choices=["json", "langgraph", "jsonl", "parquet"], default=None,
                   help="json (default): a standalone AgentCheckpoint; langgraph: a checkpoint of a LangGraph thread; "
                        "with --runs: jsonl (default), one conversation per branch in the OpenAI chat format with "
                        "tools, or parquet, one row per step (needs pip install 'rewind-agents[export]')")
    p.add_argument("--runs", action="store_true",
                   help="export the runs the filters (those of `rewind runs`) select, every branch of each, in "
                        "place of one checkpoint")
    add_filters(p, limit_default=None, listing=False,
                limit_help="--runs: at most N runs, the newest (default: every run that matches)")
    p.add_argument("--thread", help="langgraph: the thread to write the checkpoint to")
    p.add_argument("--sqlite", metavar="PATH", help="langgraph: a SqliteSaver database file (created if missing)")
    p.add_argument("--store", metavar="URL", help="langgraph: a RewindSaver store (folder or s3://bucket/prefix)")

    p = command("import", "bring a LangGraph thread in as a run (its checkpoints, branches, tool calls)",
                handler=cmd_import, store_only=True)
    p.add_argument("source", choices=["langgraph"], help="where the thread comes from")
    p.add_argument("--thread", required=True, help="the LangGraph thread id")
    p.add_argument("--sqlite", metavar="PATH", help="a SqliteSaver database file")
    p.add_argument("--store", metavar="URL", help="a RewindSaver store (folder or s3://bucket/prefix)")
    p.add_argument("--run-id", required=True, help="the new run's id")

    p = command("mirror", "rebuild a run's checkpoints from its Temporal history (idempotent)", handler=cmd_mirror)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--branch", help="only this branch (default: main and every branch in the store)")

    p = command("view", "write a run as one self-contained HTML page (tree, steps, diffs), from the store alone",
                handler=cmd_view, store_only=True)
    p.add_argument("run", help=RUN_HELP)
    p.add_argument("--out", help="file to write (default: RUN.html here), or - for stdout")
