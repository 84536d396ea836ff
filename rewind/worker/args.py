"""The worker's command line (`rewind worker`, `python worker.py`), kept light:
`rewind --help` must not import the worker's dependencies."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from rewind.settings.config import Settings
from workflows.vocabulary.errors import ConfigError

# Runs this process's worker (rewind.worker.main.run_supervised_or_single): passed in, so that
# this module never imports the worker and the supervisor of --processes N stays light.
RunWorker = Callable[[Settings, list[str], argparse.Namespace], int]


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tool-modules", metavar="MODULES",
                        help="comma-separated tool modules to load (default: REWIND_TOOL_MODULES)")
    parser.add_argument("--tools", dest="tools_deprecated", metavar="MODULES", help=argparse.SUPPRESS)
    parser.add_argument("--task-queue", help="main task queue (default: REWIND_TASK_QUEUE or 'rewind')")
    parser.add_argument("--mcp-config", metavar="FILE",
                        help="an mcpServers JSON file whose servers' tools this worker offers as SERVER__TOOL "
                             "(default: REWIND_MCP_CONFIG)")
    parser.add_argument("--scripts", metavar="FILE", help=SCRIPTS_HELP)
    parser.add_argument("--approve-destructive", action="store_true", default=None,
                        help="MCP tools the server marks destructive (or does not mark) wait for `rewind approve` "
                             "(default: REWIND_APPROVE_DESTRUCTIVE)")
    parser.add_argument("--processes", type=_positive, metavar="N",
                        help="worker processes on this machine, polling as one worker (default: "
                             "REWIND_WORKER_PROCESSES, else the machine's cores)")
    # Set by the supervisor of --processes N on the processes it starts (rewind/worker/pool.py).
    parser.add_argument("--supervised-by", type=int, metavar="PID", help=argparse.SUPPRESS)
    parser.add_argument("--slot", type=int, default=0, help=argparse.SUPPRESS)


SCRIPTS_HELP = ("scripts for the offline model (no OPENAI_API_KEY), a JSON file {\"NAME\": [turns...]}; run one "
                "with --model script:NAME (default: REWIND_SCRIPTS)")


def existing_file(flag: str, value: str | None) -> str | None:
    """The absolute path of the file an option names (a worker started elsewhere finds it too)."""
    if value is None:
        return None
    path = Path(value).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{flag} {value}: no such file; give the path of an existing file")
    return str(path)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def worker_settings(args: argparse.Namespace, settings: Settings, warn: Any) -> tuple[Settings, list[str]]:
    """The settings and tool modules a `rewind worker` / `python worker.py` command line asks for."""
    if args.task_queue:
        settings.task_queue = args.task_queue
    if getattr(args, "mcp_config", None):
        settings.mcp_config, settings.mcp_config_source = args.mcp_config, "--mcp-config"
    if getattr(args, "approve_destructive", None):
        settings.approve_destructive = True
    if getattr(args, "scripts", None):
        settings.scripts_file, settings.scripts_source = existing_file("--scripts", args.scripts), "--scripts"
        if not settings.offline_model:
            warn("--scripts is for the offline model, and OPENAI_API_KEY is set: model calls go to "
                 f"{settings.model_endpoint_url} and the scripts are not loaded")
    text = args.tool_modules
    if args.tools_deprecated is not None:
        warn("--tools on the worker is deprecated: use --tool-modules (on `rewind start`, --tools names tools)")
        text = text or args.tools_deprecated
    if settings.tool_modules_source == "REWIND_TOOLS":
        warn("REWIND_TOOLS is deprecated: use REWIND_TOOL_MODULES")
    modules = [m.strip() for m in text.split(",") if m.strip()] if text else settings.tool_modules
    return settings, modules


def worker_command(args: argparse.Namespace, run_worker: RunWorker) -> int:
    """`rewind worker` / `python worker.py`: run until SIGINT/SIGTERM, as one process or as the
    supervisor of --processes N (rewind/worker/pool.py); a configuration error is one line on
    stderr and exit 1."""
    import logging
    import sys

    from rewind.settings.config import drop_empty_library_variables
    from workflows.vocabulary.errors import RewindError

    drop_empty_library_variables()
    supervised = getattr(args, "supervised_by", None) is not None

    def warn(text: str) -> None:
        if not supervised:  # the supervisor warned already
            print(f"rewind: {text}", file=sys.stderr, flush=True)

    try:
        settings, modules = worker_settings(args, Settings.from_env(), warn)
        processes = getattr(args, "processes", None) or settings.worker_processes
        if processes is None:
            from rewind.worker.pool import machine_cores

            processes = machine_cores()
        if processes > 1 and not supervised:
            from rewind.worker.pool import supervise

            return supervise(_child_argv(args, settings, modules), processes, settings.worker_health_file,
                             announce_json=getattr(args, "json", False))
        logging.basicConfig(level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        if settings.log_level != "DEBUG":
            # botocore's INFO chatter ("Found credentials in environment variables.") is not
            # the worker's to report: a configuration error stays one line on stderr.
            for name in ("botocore", "aiobotocore", "boto3", "aioboto3"):
                logging.getLogger(name).setLevel(logging.WARNING)
        return run_worker(settings, modules, args)
    except RewindError as exc:
        print(f"rewind: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


def _child_argv(args: argparse.Namespace, settings: Settings, modules: list[str]) -> list[str]:
    """What each process of the group is told: what this command line resolved to."""
    argv = ["--task-queue", settings.task_queue]
    if modules:
        argv += ["--tool-modules", ",".join(modules)]
    if settings.mcp_config and settings.mcp_config_source == "--mcp-config":
        argv += ["--mcp-config", settings.mcp_config]
    if settings.scripts_file and settings.scripts_source == "--scripts":
        argv += ["--scripts", settings.scripts_file]
    if getattr(args, "approve_destructive", None):
        argv.append("--approve-destructive")
    return argv
