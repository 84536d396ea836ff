"""The Temporal runtime of Rewind's processes: the SDK's core logs through Python logging.

Left to itself, the SDK's Rust core writes its warnings (a gRPC call retried while
the server restarts, a poll that failed) to **stdout**, in colour: into the one JSON
document of `rewind ... --json`, and into the worker's announcement line that
`rewind dev` and `rewind worker --processes N` read. Here they go to the Python
logger `temporalio.core` instead: the worker's log on stderr; the CLI, which says
what failed in its one line, shows them only with REWIND_DEBUG=1.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

CORE_LOGGER = "temporalio.core"


@functools.lru_cache(maxsize=None)
def core_runtime(metrics_bind: str | None = None) -> Any:
    """One Runtime per process (and metrics endpoint): core warnings forwarded to
    CORE_LOGGER, Prometheus metrics on `metrics_bind` ("HOST:PORT") when given."""
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        PrometheusConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    logs = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                         forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)))
    metrics = PrometheusConfig(bind_address=metrics_bind) if metrics_bind else None
    return Runtime(telemetry=TelemetryConfig(logging=logs, metrics=metrics))


def quiet_core_logs() -> None:
    """For the CLI without REWIND_DEBUG: core warnings are not shown (the command's own
    error says what failed)."""
    core = logging.getLogger(CORE_LOGGER)
    core.addHandler(logging.NullHandler())
    core.propagate = False


__all__ = ["core_runtime", "quiet_core_logs", "CORE_LOGGER"]
