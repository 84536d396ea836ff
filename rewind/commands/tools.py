"""`rewind tools`: every tool a worker on the task queue offers, with its durability policy and why."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from rewind.commands.common import client_for, emit
from rewind.config import Settings
from workflows.errors import UsageError


def policy_of(spec: Any) -> dict[str, Any]:
    """What a tool's spec decides (cache, effect, retry, approval) and the reasons."""
    if spec.agent is not None:
        return {"label": "sub-agent", "why": ["a declared agent: each call runs it as a child run"]}
    approval = {"always": "every call", "by_arguments": "by its arguments' rule", "never": "none"}[spec.approval]
    if spec.mcp is not None:
        why = list(spec.mcp.policy)
        retry = ("retried" if not spec.side_effects or spec.mcp.idempotent else "sent once")
    else:
        why = ["read-only: @tool without side_effects: cached per run, inherited by forks" if not spec.side_effects
               else "side effect: @tool(side_effects=True): idempotency key, effect identity, reused across the lineage"]
        if spec.approval != "never":
            why.append(f"needs approval ({approval}): @tool(needs_approval=...)")
        retry = "retried"
    kind = []
    if spec.mcp is not None and spec.side_effects:
        kind = ["idempotent" if spec.mcp.idempotent else "sent once"]
    label = "read-only" if not spec.side_effects else ", ".join(
        ["side effect", *kind, *(["approval"] if spec.approval != "never" else [])])
    return {"label": label, "cached": not spec.side_effects, "side_effects": spec.side_effects, "retry": retry,
            "approval": approval, "on_repeat": spec.on_repeat if spec.side_effects else None,
            "max_attempts": spec.max_attempts, "timeout_s": spec.timeout_s, "why": why}


async def cmd_tools(args: argparse.Namespace, settings: Settings) -> int:
    from checkpoint_bridge.runs import describe_tools, pollers

    client = await client_for(settings)
    if not await pollers(client, settings.task_queue, workflows=True):
        raise UsageError(f"no worker polls task queue {settings.task_queue!r}; start one (`rewind worker "
                         "[--tool-modules MODULES] [--mcp-config FILE]`) and ask again")
    described = await describe_tools(client, settings.task_queue, [])
    rows = []
    for spec in sorted(described.tools, key=lambda s: s.name):
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
                     "and why", handler=cmd_tools)


__all__ = ["register", "policy_of"]
