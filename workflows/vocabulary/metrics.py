"""Rewind's own metrics, next to Temporal's, on the worker's Prometheus endpoint.

With REWIND_METRICS_PORT set, the worker's Temporal runtime serves Prometheus
metrics (the SDK's PrometheusConfig): Temporal's own (task latencies, slots,
polls, ...) and these, recorded through the SDK's metric meter. The workflow's
meter records nothing while a workflow replays, so a replay after a crash
counts nothing twice; without an endpoint the meter is a no-op.

Counters only count up: calls waiting for approval now are
`rewind_approvals_requested - rewind_approvals_decided`.
"""

from __future__ import annotations

from typing import Any

# -- recorded by the workflow (replay-safe) ------------------------------------
STEPS = "rewind_steps"                        # {model}: steps that called the model
TOKENS = "rewind_tokens"                      # {model, kind=prompt|completion}
COST = "rewind_cost_microusd"                 # {model}: cost in millionths of a USD
TOOL_CALLS = "rewind_tool_calls"              # {tool, outcome=ok|error|cached|reused|rejected}
APPROVALS_REQUESTED = "rewind_approvals_requested"  # {tool}
APPROVALS_DECIDED = "rewind_approvals_decided"      # {tool, verdict=approved|rejected, timed_out}

# -- recorded by activities ------------------------------------------------------
CHECKPOINT_WRITE_MS = "rewind_checkpoint_write_ms"  # histogram: one step's checkpoint, written
MIRROR_LAG_MS = "rewind_mirror_lag_ms"              # histogram: step end -> its checkpoint stored
STORE_ERRORS = "rewind_store_errors"                # {store=checkpoints|payloads, kind}

# -- recorded by the hot tier's flusher (checkpoint_bridge/stores/hot.py) ----------
HOT_PENDING = "rewind_hot_store_pending"            # gauge: objects in Redis not yet in the durable store
HOT_LAG_MS = "rewind_hot_store_lag_ms"              # gauge: age of the oldest of them
HOT_FLUSHED = "rewind_hot_store_flushed"            # objects moved to the durable store
HOT_CONFLICTS = "rewind_hot_store_conflicts"        # objects the durable store had with other bytes
HOT_FALLBACKS = "rewind_hot_store_fallbacks"        # {op=read|write|list}: Redis down, the durable store served
HOT_LOST = "rewind_hot_store_lost"                  # Redis lost its data (epoch changed)

DESCRIPTIONS = {
    STEPS: "agent steps that called the model",
    TOKENS: "model tokens",
    COST: "model cost in millionths of a USD (priced models only)",
    TOOL_CALLS: "tool calls by outcome: ok, error, cached (read-only result reused), reused (an effect of the "
                "lineage), rejected (by a person or an approval timeout)",
    APPROVALS_REQUESTED: "tool calls that waited for a decision",
    APPROVALS_DECIDED: "decisions on tool calls",
    CHECKPOINT_WRITE_MS: "time to write one step's checkpoint",
    MIRROR_LAG_MS: "time from a step's end to its checkpoint in the store",
    STORE_ERRORS: "failed requests to the checkpoint or payload store (retried)",
    HOT_PENDING: "checkpoint objects in the Redis hot tier not yet in the durable store",
    HOT_LAG_MS: "age of the oldest checkpoint object not yet in the durable store",
    HOT_FLUSHED: "checkpoint objects moved from the Redis hot tier to the durable store",
    HOT_CONFLICTS: "objects the durable store already had with other bytes (the durable ones stay)",
    HOT_FALLBACKS: "calls the durable store served because Redis was down",
    HOT_LOST: "times Redis was found to have lost its data (restart without persistence, flush)",
}


def count(meter: Any, name: str, value: int = 1, **attributes: str | int | bool) -> None:
    """Add `value` to counter `name` with `attributes` (a no-op for value 0)."""
    if value:
        meter.create_counter(name, DESCRIPTIONS[name]).add(value, attributes or None)


def observe_ms(meter: Any, name: str, value_ms: float, **attributes: str | int | bool) -> None:
    meter.create_histogram_float(name, DESCRIPTIONS[name], "ms").record(max(value_ms, 0.0), attributes or None)


def gauge(meter: Any, name: str, value: int, unit: str = "") -> None:
    meter.create_gauge(name, DESCRIPTIONS[name], unit).set(max(int(value), 0))


__all__ = ["count", "observe_ms", "gauge", "DESCRIPTIONS"]
