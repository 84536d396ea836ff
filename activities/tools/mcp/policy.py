"""Durability from an MCP tool's annotations; an override block wins.

    readOnlyHint true          read-only: cached per run, inherited by forks, never an effect
    readOnlyHint false/absent  a side effect: idempotency key (sent in `_meta`), effect identity,
                               reuse across the lineage (on_repeat), never served from the cache
    destructiveHint true/absent  waits for approval when the worker runs with --approve-destructive
    idempotentHint false/absent  (side effects) never sent twice: once the request may have
                               reached the server, a lost answer is a tool error saying the
                               effect's state is unknown

Absent hints take the MCP specification's defaults (not read-only, destructive, not
idempotent): a server that says nothing about a tool gets the careful treatment.
Every decision is kept as a line saying what decided it (`rewind tools` prints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from activities.tools.mcp.compensation import references
from activities.tools.mcp.config import Compensation, ToolOverride
from workflows.vocabulary.errors import ConfigError

# The MCP specification's defaults for a tool that does not say.
SPEC_DEFAULTS = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False, "openWorldHint": True}


@dataclass
class Policy:
    side_effects: bool
    idempotent: bool
    needs_approval: bool
    # What @tool options the override also set (on_repeat, effect_key, timeout_s, ...).
    options: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    # The call of the same server that undoes this one on `rollback --compensate`.
    compensate: Compensation | None = None

    @property
    def label(self) -> str:
        if not self.side_effects:
            return "read-only"
        parts = ["side effect", "idempotent" if self.idempotent else "sent once"]
        if self.needs_approval:
            parts.append("approval")
        return ", ".join(parts)


def _hint(annotations: dict[str, Any], name: str) -> tuple[bool, str]:
    value = annotations.get(name)
    if isinstance(value, bool):
        return value, f"{name} {str(value).lower()}"
    return SPEC_DEFAULTS[name], f"no {name} (the MCP default: {str(SPEC_DEFAULTS[name]).lower()})"


def decide(qualified: str, annotations: dict[str, Any], override: ToolOverride | None, *,
           approve_destructive: bool, properties: list[str]) -> Policy:
    """The policy of tool `qualified` (SERVER__TOOL); a contradictory override is a ConfigError."""
    o = override or ToolOverride()
    why: list[str] = []

    read_only, said = _hint(annotations, "readOnlyHint")
    if o.side_effects is not None:
        side_effects = o.side_effects
        why.append(f"{'side effect' if side_effects else 'read-only'}: override side_effects "
                   f"{str(side_effects).lower()} (over {said})")
    else:
        side_effects = not read_only
        why.append(f"read-only: {said}: cached per run, inherited by forks, never an effect" if read_only
                   else f"side effect: {said}: idempotency key in _meta, effect identity, reused across the lineage")

    idempotent = False
    needs_approval = False
    if side_effects:
        hinted, said = _hint(annotations, "idempotentHint")
        if o.idempotent is not None:
            idempotent = o.idempotent
            why.append(f"{'retried' if idempotent else 'sent once'}: override idempotent {str(idempotent).lower()} "
                       f"(over {said})")
        else:
            idempotent = hinted
            why.append(f"retried with the same idempotency key: {said}" if idempotent else
                       f"sent once: {said}: a lost answer after sending is a tool error (state unknown), not a retry")
        destructive, said = _hint(annotations, "destructiveHint")
        if o.needs_approval is not None:
            needs_approval = o.needs_approval
            why.append(f"{'needs approval' if needs_approval else 'no approval'}: override needs_approval "
                       f"{str(needs_approval).lower()}")
        elif destructive and approve_destructive:
            needs_approval = True
            why.append(f"needs approval: {said} and the worker runs with --approve-destructive")
        elif destructive:
            why.append(f"no approval: {said}, but the worker runs without --approve-destructive")
        else:
            why.append(f"no approval: {said}")
    elif o.needs_approval:
        raise ConfigError(f"{o.where}.needs_approval: {qualified} is read-only, and only tools that change the "
                          "world wait for approval; set \"side_effects\": true as well")

    options: dict[str, Any] = {}
    if o.on_repeat is not None:
        options["on_repeat"] = o.on_repeat
        why.append(f"on repeat of a lineage effect: {o.on_repeat} (override)")
    for name in ("effect_key", "cache_ignore"):
        names = getattr(o, name)
        if not names:
            continue
        unknown = [n for n in names if n not in properties]
        if unknown:
            raise ConfigError(f"{o.where}.{name}: {', '.join(map(repr, unknown))} is not an argument of {qualified} "
                              f"(it has {', '.join(properties) or 'none'})")
        if name == "effect_key" and not side_effects:
            raise ConfigError(f"{o.where}.effect_key: {qualified} is read-only; an effect key is for side effects")
        options[name] = list(names)
    for name in ("timeout_s", "heartbeat_s", "max_attempts", "approval_timeout_s", "on_timeout"):
        value = getattr(o, name)
        if value is not None:
            options[name] = value
    if ("approval_timeout_s" in options or "on_timeout" in options) and not needs_approval \
            and options.get("on_repeat") != "ask":
        raise ConfigError(f"{o.where}: approval_timeout_s / on_timeout apply to calls that wait for approval; "
                          "set needs_approval (or on_repeat \"ask\")")
    if o.compensate is not None:
        if not side_effects:
            raise ConfigError(f"{o.where}.compensate: {qualified} is read-only, so there is nothing to undo; "
                              "set \"side_effects\": true as well, or drop compensate")
        unknown = sorted({p[1] for p in references(o.compensate.arguments)
                          if p[0] == "arguments" and len(p) > 1 and p[1] not in properties})
        if unknown:
            raise ConfigError(f"{o.where}.compensate.arguments: {{arguments.{unknown[0]}}} is not an argument of "
                              f"{qualified} (it has {', '.join(properties) or 'none'})")
        server = qualified.split("__", 1)[0]
        why.append(f"compensated on rollback --compensate by {server}__{o.compensate.tool} (override)")
    return Policy(side_effects=side_effects, idempotent=idempotent, needs_approval=needs_approval,
                  options=options, reasons=why, compensate=o.compensate)


__all__ = ["decide", "Policy", "SPEC_DEFAULTS"]
