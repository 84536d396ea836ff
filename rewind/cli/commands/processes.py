"""Processes: `rewind demo`, `dev`, `server`, `worker`, `health`."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from rewind.cli.commands.common import EXIT_DONE, EXIT_NOT_DONE, emit
from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.local.demo import run_demo

    if sum(bool(x) for x in (args.approve, args.fanout, args.mcp, args.pipeline, args.langgraph)) > 1:
        raise UsageError("--approve, --fanout, --mcp, --pipeline and --langgraph are different demos; choose one")
    if args.keep and args.json:
        raise UsageError("--keep runs until Ctrl-C, --json prints once at the end; choose one")
    if args.keep and args.mcp:
        raise UsageError("--keep keeps the research demo's stack; run the MCP agent's with `rewind dev --mcp-config FILE`")
    result = await run_demo(settings, quiet=args.json, approve=args.approve, fanout=args.fanout, keep=args.keep,
                            mcp=args.mcp, pipeline=args.pipeline, langgraph=args.langgraph)
    if args.json:
        emit(result.model_dump(mode="json"), True, "")
    return EXIT_DONE if result.status.state == "completed" else EXIT_NOT_DONE


def cmd_server(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import time

    from rewind.temporal.dev_server import DevServer

    port = args.port or int(settings.temporal_address.rsplit(":", 1)[-1])
    server = DevServer.start(settings.home / "temporal.db", port=port, ui_port=args.ui_port,
                             log_file=settings.home / "temporal.log", shared=True)
    emit({"address": server.address, "ui": f"http://127.0.0.1:{server.ui_port}", "db_file": str(server.db_file),
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


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.local.dev import DevOptions, run_dev
    from rewind.worker.args import worker_settings

    def warn(text: str) -> None:
        print(f"rewind: {text}", file=sys.stderr, flush=True)

    args.tools_deprecated = None
    settings, modules = worker_settings(args, settings, warn)
    return run_dev(settings, DevOptions(modules, scripts=settings.scripts_file, mcp_config=args.mcp_config,
                                        port=args.port, ui_port=args.ui_port, reload=not args.no_reload))


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    # The worker loads only in the process that runs one: the supervisor of --processes N stays light.
    from rewind.worker.args import worker_command

    return worker_command(args, _run_worker)


def _run_worker(settings: Settings, modules: list[str], args: argparse.Namespace) -> int:
    from rewind.worker.main import run_supervised_or_single

    return run_supervised_or_single(settings, modules, args)


def cmd_health(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.worker.health import worker_health

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
    emit(report, args.json, f"worker {'healthy' if report['healthy'] else 'unhealthy'}: {report['reason']}")
    return 0 if report["healthy"] else 1


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    from rewind.worker.args import SCRIPTS_HELP, add_worker_arguments

    p = command("server", "run the embedded Temporal dev server (state under REWIND_HOME, .rewind/)", sync=cmd_server)
    p.add_argument("--port", type=int, help="gRPC port (default: from TEMPORAL_ADDRESS, 7233)")
    p.add_argument("--ui-port", type=int, default=8233, help="the Temporal UI's port")

    p = command("dev", "the embedded Temporal dev server and a worker for your tools, in the foreground: the worker "
                "starts again when it dies and when a file of your tools changes (Ctrl-C stops both)", sync=cmd_dev)
    p.add_argument("--tool-modules", metavar="MODULES",
                   help="comma-separated tool modules to load, e.g. mytools for mytools.py here "
                        "(default: REWIND_TOOL_MODULES)")
    p.add_argument("--task-queue", help="the worker's task queue (default: REWIND_TASK_QUEUE or 'rewind')")
    p.add_argument("--scripts", metavar="FILE", help=SCRIPTS_HELP)
    p.add_argument("--mcp-config", metavar="FILE", help="MCP servers whose tools the worker offers (REWIND_MCP_CONFIG)")
    p.add_argument("--port", type=int, help="the server's gRPC port (default: from TEMPORAL_ADDRESS, 7233)")
    p.add_argument("--ui-port", type=int, help="the Temporal UI's port (default: 8233 if free, else any free port)")
    p.add_argument("--no-reload", action="store_true",
                   help="do not watch the files of --tool-modules and --scripts: an edit takes a restart of "
                        "rewind dev (a worker that dies is still started again)")

    p = command("worker", "run a worker: --processes N of them (default: one per core; same as python worker.py)",
                sync=cmd_worker)
    add_worker_arguments(p)

    p = command("health", "exit 0 if the worker on this machine polls Temporal (container health check)", sync=cmd_health)
    p.add_argument("--max-age", type=float, default=30.0, help="seconds (default 30)")
    p.add_argument("--task-queue", help="the worker's task queue (default: REWIND_TASK_QUEUE, rewind)")

    p = command("demo", "whole embedded stack + the research agent, with live progress", handler=cmd_demo)
    p.add_argument("--approve", action="store_true",
                   help="save_report waits for your approval; the demo shows how to give it")
    p.add_argument("--fanout", action="store_true",
                   help="an orchestrator fans out to five researcher sub-agents at once, then synthesizes")
    p.add_argument("--pipeline", action="store_true",
                   help="the research as your own code: a @pipeline (examples/competitive_report.py) whose every "
                        "call is a checkpointed step")
    p.add_argument("--langgraph", action="store_true",
                   help="the article's LangGraph research graph, unchanged, as a durable run "
                        "(examples/langgraph_research.py; needs the langgraph extra)")
    p.add_argument("--keep", action="store_true",
                   help="keep the server and the worker running after the run (until Ctrl-C), so `rewind fork` "
                        "and the other commands work from another terminal")
    p.add_argument("--mcp", action="store_true",
                   help="an agent whose tools are the filesystem MCP server's (needs node and "
                        "@modelcontextprotocol/server-filesystem; says so when missing)")
