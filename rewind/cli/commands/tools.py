"""`rewind tools`: every tool a worker on the task queue offers, with its durability policy and why."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from checkpoint_bridge.views.tool_policy import policy_of
from rewind.cli.commands.common import client_for, emit
from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError


async def cmd_tools(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.temporal.runs import describe_tools, pollers

    client = await client_for(settings)
    if not await pollers(client, settings.task_queue, workflows=True):
        raise UsageError(f"no worker polls task queue {settings.task_queue!r}; start one (`rewind worker "
                         "[--tool-modules MODULES] [--mcp-config FILE]`) and ask again")
    described = await describe_tools(client, settings.task_queue, [])
    rows = []
    for spec in [*sorted(described.tools, key=lambda s: s.name), *sorted(described.pipelines, key=lambda s: s.name)]:
        row: dict[str, Any] = {"name": spec.name, "description": spec.description, "policy": policy_of(spec)}
        if spec.mcp is not None:
            row["mcp"] = {"server": spec.mcp.server, "tool": spec.mcp.tool, "server_version": spec.mcp.server_version,
                          "annotations": spec.mcp.annotations}
        rows.append(row)
    lines = []
    for row in rows:
        source = f"  (MCP {row['mcp']['server']}: {row['mcp']['server_version'] or 'no version'})" if "mcp" in row else ""
        lines.append(f"{row['name']:<32} {row['policy']['label']}{source}")
        lines.extend(f"    {why}" for why in row["policy"]["why"])
    emit({"task_queue": settings.task_queue, "tools": rows}, args.json,
         "\n".join(lines) or f"the worker on {settings.task_queue!r} offers no tools")
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    command("tools", "the tools a worker offers (@tool functions, MCP servers' tools) with their durability policy "
                     "and why, then its @pipeline functions", handler=cmd_tools)


__all__ = ["register"]
