"""OpenTelemetry traces of runs: on when an OTLP endpoint is configured, off otherwise.

`Settings.tracing` is true when OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. Then the first client a process
connects (rewind/client.py) sets up its tracing once: a tracer provider named
OTEL_SERVICE_NAME (default `rewind-worker` for a worker, `rewind-cli` for the
CLI) exporting over OTLP, and Temporal's tracing interceptor on the client,
hence on every worker built from it. `rewind start` / `rewind fork` thus open
the trace, and the worker that runs the workflow continues it.

Off, nothing happens: no interceptor, no provider, no exporter, the SDK not
imported (rewind/temporal/tracing_otel.py holds everything that imports it; the
activities' spans use the API alone, a no-op without a provider).

The spans: `rewind.run` > `rewind.step` > `chat <model>` and `execute_tool
<tool>`, with Temporal's own spans in between (see workflows/loop/tracing.py and
activities/record/spans.py for who emits which, and docs/operations.md, "Traces").
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from rewind.settings.config import Settings
from workflows.vocabulary.errors import ConfigError

_INSTALL_HINT = "pip install 'rewind-agents[otel]'"
_current: Any = None  # the process's Tracing (rewind.temporal.tracing_otel), once set up


def setup(settings: Settings, *, service: str) -> Any:
    """This process's Tracing, set up on first use (None: tracing is off)."""
    global _current
    if not settings.tracing:
        return None
    if _current is not None:
        return _current
    try:
        from rewind.temporal import tracing_otel
    except ImportError as exc:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed ({exc}): {_INSTALL_HINT}, "
            "or unset the OTEL_EXPORTER_OTLP_* endpoint variables"
        ) from None
    if service == "rewind-cli":
        # A collector that does not answer is the exporter's to log, not one more line
        # under a command's own output (the worker logs it, as it logs everything).
        logging.getLogger("opentelemetry").addHandler(logging.NullHandler())
    exporter = tracing_otel.otlp_exporter(settings.otel_protocol)
    return install(tracing_otel.Tracing.build(settings.otel_service_name or service, exporter=exporter))


def install(tracing: Any) -> Any:
    """Make `tracing` (a rewind.temporal.tracing_otel.Tracing) this process's: tests and embedding
    applications build one with their own exporter; `setup` then returns it."""
    global _current
    from rewind.temporal import tracing_otel

    tracing_otel.set_global_provider(tracing)
    _current = tracing
    return tracing


def current() -> Any:
    """This process's Tracing, or None (not set up, or off)."""
    return _current


def interceptors(settings: Settings, *, service: str) -> list[Any]:
    """What a Temporal client gets: the tracing interceptor when tracing is on, else nothing."""
    tracing = setup(settings, service=service)
    return [tracing.interceptor] if tracing is not None else []


def shutdown(timeout_s: float = 2.0) -> None:
    """Export the spans still buffered (the CLI and the worker, before they exit). A
    collector that does not answer delays the exit by `timeout_s` at most: the
    exporter's own retries would take up to OTEL_EXPORTER_OTLP_TIMEOUT and more."""
    global _current
    if _current is not None:
        tracing, _current = _current, None
        export = threading.Thread(target=tracing.shutdown, args=(int(timeout_s * 1000),),
                                  name="rewind-trace-export", daemon=True)
        export.start()
        export.join(timeout_s)


__all__ = ["setup", "install", "current", "interceptors", "shutdown"]
