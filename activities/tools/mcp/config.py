"""What one entry of an `mcpServers` configuration file says, as plain data.

The file is read (and its `${VAR}` references filled in) by rewind/settings/config.py;
these types are what the worker's MCP sessions and tools are built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# What a per-tool override block may set: the @tool options that make sense for a
# tool someone else wrote, plus `idempotent` (the idempotentHint's override).
OVERRIDE_KEYS = ("side_effects", "idempotent", "needs_approval", "on_repeat", "effect_key", "cache_ignore",
                 "timeout_s", "heartbeat_s", "max_attempts", "approval_timeout_s", "on_timeout", "compensate")


@dataclass(frozen=True)
class Compensation:
    """`"compensate": {"tool": TOOL, "arguments": {...}}`: the call of the same server that
    undoes this tool's effect on `rewind rollback --compensate`. String values of
    `arguments` may name the original call: `"{arguments.path}"` (a whole string that is
    one reference keeps the value's JSON type), `"{arguments.edits.0.newText}"`,
    `"{output}"`; `{{` and `}}` are literal braces."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOverride:
    """A `"rewind": {"tools": {TOOL: {...}}}` block: None leaves the annotations' answer."""

    side_effects: bool | None = None
    idempotent: bool | None = None
    needs_approval: bool | None = None
    on_repeat: Literal["reuse", "ask", "run"] | None = None
    effect_key: tuple[str, ...] | None = None
    cache_ignore: tuple[str, ...] = ()
    timeout_s: float | None = None
    heartbeat_s: float | None = None
    max_attempts: int | None = None
    approval_timeout_s: float | None = None
    on_timeout: Literal["reject", "approve"] | None = None
    compensate: Compensation | None = None
    # Where it was written (file and key), for errors found once the tools are listed.
    where: str = ""


@dataclass(frozen=True)
class McpServerConfig:
    """One server: started by the worker (stdio) or reached over Streamable HTTP."""

    name: str
    transport: Literal["stdio", "http"]
    # stdio
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    # Streamable HTTP (header values may hold secrets: never printed)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    overrides: dict[str, ToolOverride] = field(default_factory=dict)
    # Where the entry is (file and key), for errors found after parsing.
    where: str = ""

    def describe(self) -> str:
        """Where the server is, without secrets: `node server.js /data` or the URL."""
        if self.transport == "http":
            return str(self.url)
        return " ".join([str(self.command), *self.args])


__all__ = ["Compensation", "McpServerConfig", "ToolOverride", "OVERRIDE_KEYS"]
