"""The worker's command line (`rewind worker`, `python worker.py`), kept light:
`rewind --help` must not import the worker's dependencies."""

from __future__ import annotations

import argparse
from typing import Any

from rewind.config import Settings


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tool-modules", metavar="MODULES",
                        help="comma-separated tool modules to load (default: REWIND_TOOL_MODULES)")
    parser.add_argument("--tools", dest="tools_deprecated", metavar="MODULES", help=argparse.SUPPRESS)
    parser.add_argument("--task-queue", help="main task queue (default: REWIND_TASK_QUEUE or 'rewind')")
    parser.add_argument("--mcp-config", metavar="FILE",
                        help="an mcpServers JSON file whose servers' tools this worker offers as SERVER__TOOL "
                             "(default: REWIND_MCP_CONFIG)")
    parser.add_argument("--approve-destructive", action="store_true", default=None,
                        help="MCP tools the server marks destructive (or does not mark) wait for `rewind approve` "
                             "(default: REWIND_APPROVE_DESTRUCTIVE)")


def worker_settings(args: argparse.Namespace, settings: Settings, warn: Any) -> tuple[Settings, list[str]]:
    """The settings and tool modules a `rewind worker` / `python worker.py` command line asks for."""
    if args.task_queue:
        settings.task_queue = args.task_queue
    if getattr(args, "mcp_config", None):
        settings.mcp_config, settings.mcp_config_source = args.mcp_config, "--mcp-config"
    if getattr(args, "approve_destructive", None):
        settings.approve_destructive = True
    text = args.tool_modules
    if args.tools_deprecated is not None:
        warn("--tools on the worker is deprecated: use --tool-modules (on `rewind start`, --tools names tools)")
        text = text or args.tools_deprecated
    if settings.tool_modules_source == "REWIND_TOOLS":
        warn("REWIND_TOOLS is deprecated: use REWIND_TOOL_MODULES")
    modules = [m.strip() for m in text.split(",") if m.strip()] if text else settings.tool_modules
    return settings, modules
