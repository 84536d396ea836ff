"""Per-model prices, in USD per million tokens, configurable with REWIND_PRICES.

REWIND_PRICES is either a path to a JSON file or inline JSON of the form
{"model-name": {"input": 0.15, "output": 0.60}, ...}; entries override the
defaults. A model is matched by its longest known prefix, so dated snapshots
("gpt-4o-mini-2024-07-18") use their family's price.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workflows.vocabulary.contracts import Usage
from workflows.vocabulary.errors import ConfigError

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o4-mini": (1.10, 4.40),
    "o3": (2.00, 8.00),
    # Scripted test models cost nothing.
    "script:": (0.0, 0.0),
}


@dataclass(frozen=True)
class PriceTable:
    prices: dict[str, tuple[float, float]]

    def lookup(self, model: str) -> tuple[float, float] | None:
        matches = [k for k in self.prices if model == k or model.startswith(k)]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, usage: Usage) -> tuple[float, bool]:
        """(cost in USD, whether the model had a price)."""
        price = self.lookup(model)
        if price is None:
            return 0.0, False
        per_in, per_out = price
        return (usage.prompt_tokens * per_in + usage.completion_tokens * per_out) / 1_000_000, True

    @classmethod
    def parse(cls, raw: str = "") -> "PriceTable":
        """The built-in table, overridden by `raw` (REWIND_PRICES: inline JSON or a path)."""
        prices = dict(DEFAULT_PRICES)
        raw = raw.strip()
        if raw:
            text = raw if raw.startswith("{") else _read(raw)
            try:
                table = json.loads(text)
                for model, entry in table.items():
                    prices[str(model)] = (float(entry["input"]), float(entry["output"]))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ConfigError(
                    f"REWIND_PRICES is not a valid price table ({exc}); expected JSON like "
                    '{"my-model": {"input": 0.5, "output": 1.5}} (USD per million tokens)'
                ) from exc
        return cls(prices)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"REWIND_PRICES points to {path!r}, which cannot be read: {exc}") from exc
