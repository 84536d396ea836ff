"""Side effects a branch's lineage already caused (workflow code: deterministic).

A fork or a rollback starts a new workflow whose model may ask again for an
effect that already happened: the invoice the discarded step 4 sent, the
e-mail a parent branch sent before the fork point. Such a call gets a new
tool-call id, so its idempotency key is new too, and the key alone would
let it run twice. Effects are therefore also compared by identity: the tool
and its canonical arguments (or only the ones the tool names in
`effect_key`). A call whose identity matches an effect of its lineage
follows the tool's `on_repeat`: reuse the recorded result, ask a person, or
run again on purpose. Sibling branches are not lineage: a fork inherits the
effects before its fork point and those its source branch inherited, never
what another branch did after that point.
"""

from __future__ import annotations

from typing import Any

from workflows.vocabulary.canonical import cache_key
from workflows.vocabulary.contracts import EffectRef, LineageEffect, ToolSpec
from workflows.vocabulary.tool_calls import canonical_arguments


def effect_identity(spec: ToolSpec, arguments: dict[str, Any]) -> str:
    """Same for two calls that cause the same effect; names missing from the
    arguments count as absent (so a call without them matches only its like)."""
    canonical = canonical_arguments(arguments, spec)
    if spec.effect_key is not None:
        canonical = {name: canonical[name] for name in spec.effect_key if name in canonical}
    return "effect-" + cache_key(spec.name, canonical)


class LineageEffects:
    """The lineage's effects by identity, as the tools of this run define it."""

    def __init__(self, effects: list[LineageEffect], specs: dict[str, ToolSpec]) -> None:
        self._by_identity: dict[str, LineageEffect] = {}
        self._by_tool: dict[str, list[LineageEffect]] = {}
        for effect in effects:
            spec = specs.get(effect.tool_name)
            if spec is not None and spec.side_effects:
                # The first one wins: the earliest record of the effect.
                self._by_identity.setdefault(effect_identity(spec, effect.arguments), effect)
                self._by_tool.setdefault(effect.tool_name, []).append(effect)

    def __len__(self) -> int:
        return len(self._by_identity)

    def of_tool(self, name: str) -> list[LineageEffect]:
        """The lineage's effects of one tool, earliest first (compared on validated
        values by a worker when the arguments as sent match none of them)."""
        return self._by_tool.get(name, [])

    def repeat_of(self, spec: ToolSpec, arguments: dict[str, Any]) -> LineageEffect | None:
        if not self._by_identity:
            return None
        return self._by_identity.get(effect_identity(spec, arguments))


def reference(effect: LineageEffect) -> EffectRef:
    return EffectRef.model_validate(effect.model_dump(exclude={"output"}))


__all__ = ["effect_identity", "LineageEffects", "reference"]
