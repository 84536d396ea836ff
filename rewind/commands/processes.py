"""Processes: `rewind demo`, `server`, `worker`, `health`."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from rewind.commands.common import EXIT_DONE, EXIT_NOT_DONE, emit
from rewind.config import Settings
from workflows.errors import UsageError
from workflows.ids import validate_id


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.demo import run_demo

    if sum(bool(x) for x in (args.approve, args.fanout, args.mcp)) > 1:
        raise UsageError("--approve, --fanout and --mcp are different demos; choose one")
    result = await run_demo(settings, quiet=args.json, approve=args.approve, fanout=args.fanout, mcp=args.mcp)
    if args.json:
        emit(result.model_dump(mode="json"), True, "")
    return EXIT_DONE if result.status.state == "completed" else EXIT_NOT_DONE


def cmd_server(args: argparse.Namespace, settings: Settings) -> int:
    import signal
    import time

    from rewind.embedded import DevServer

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
    emit(report, args.json, f"worker {'healthy' if report['healthy'] else 'unhealthy'}: {report['reason']}")
    return 0 if report["healthy"] else 1


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    from rewind.worker_args import add_worker_arguments

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
    p.add_argument("--fanout", action="store_true",
                   help="an orchestrator fans out to five researcher sub-agents at once, then synthesizes")
    p.add_argument("--mcp", action="store_true",
                   help="an agent whose tools are the filesystem MCP server's (needs node and "
                        "@modelcontextprotocol/server-filesystem; says so when missing)")
