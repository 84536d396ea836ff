"""What a tool's durability policy is, and why: the cache, the effect identity, retries and
approval a tool's spec decides (`rewind tools`, `rewind demo --mcp`)."""

from __future__ import annotations

from typing import Any


def policy_of(spec: Any) -> dict[str, Any]:
    """What a tool's spec decides (cache, effect, retry, approval) and the reasons."""
    if spec.agent is not None and spec.agent.pipeline and ":" in spec.name:
        return {"label": "graph", "why": ["a LangGraph graph of a tools module: started with "
                                          "`rewind start --graph MODULE:ATTR --input JSON` (docs/langgraph.md)"]}
    if spec.agent is not None and spec.agent.pipeline:
        return {"label": "pipeline", "why": ["@pipeline: started with `rewind start --pipeline NAME --input JSON`, "
                                             "or from another pipeline with ctx.pipeline(NAME, ...)"]}
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


__all__ = ["policy_of"]
