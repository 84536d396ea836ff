"""Spans of the model-call and tool-call activities, through the OpenTelemetry API only.

The API records nothing by itself: with tracing off there is no tracer
provider (rewind/temporal/tracing.py sets one only when an OTLP endpoint is
configured) and every span is a no-op; without the package installed this
module is a no-op of its own. With tracing on, a span is a child of the
activity's `RunActivity` span (Temporal's TracingInterceptor), itself under
the step span the workflow made current when it scheduled the call
(workflows/loop/tracing.py). An activity runs once per attempt, so its span is
naturally once per attempt: a retry is a second span with `rewind.attempt` 2.

Attributes are counts, names and ids only, never arguments, outputs or
messages; an error's text is redacted like everything else an activity emits.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from temporalio.exceptions import ApplicationError

from workflows.loop.tracing import ERROR_TYPE

try:
    from opentelemetry import trace as _trace
except ImportError:  # the `otel` extra is not installed: no spans
    _trace = None  # type: ignore[assignment]

TRACER_NAME = "rewind"
_ERROR_CHARS = 500


class ActivitySpan:
    """The span of one attempt (or nothing, with OpenTelemetry absent)."""

    def __init__(self, span: Any, redact: Callable[[str], str]) -> None:
        self._span = span
        self._redact = redact

    def set(self, attributes: dict[str, Any]) -> None:
        if self._span is not None:
            self._span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def fail(self, error_type: str, message: str) -> None:
        """Mark the attempt failed (ERROR status, `error.type`), with the message redacted."""
        if self._span is None:
            return
        self._span.set_attribute(ERROR_TYPE, error_type)
        self._span.set_status(_trace.Status(_trace.StatusCode.ERROR, self._redact(message)[:_ERROR_CHARS]))


@contextmanager
def activity_span(name: str, attributes: dict[str, Any], *, redact: Callable[[str], str],
                  client: bool = False) -> Iterator[ActivitySpan]:
    """A span around one attempt; an exception marks it failed (and is raised on)."""
    if _trace is None or isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider):
        # No provider set (tracing off, the default): every span would be a no-op, but
        # making one (a tracer, a context, a non-recording span) cost every model and tool
        # call ~0.1 ms of the worker's CPU. A provider set later is used from the next call.
        yield ActivitySpan(None, redact)
        return
    kind = _trace.SpanKind.CLIENT if client else _trace.SpanKind.INTERNAL
    # Exceptions are not recorded as events: their text and traceback would
    # reach the trace backend unredacted. `fail` records a redacted reason.
    with _trace.get_tracer(TRACER_NAME).start_as_current_span(
        name, kind=kind, attributes={k: v for k, v in attributes.items() if v is not None},
        record_exception=False, set_status_on_exception=False,
    ) as span:
        handle = ActivitySpan(span, redact)
        try:
            yield handle
        except BaseException as exc:
            kind_name = exc.type if isinstance(exc, ApplicationError) and exc.type else type(exc).__name__
            handle.fail(kind_name, f"{type(exc).__name__}: {exc}")
            raise


__all__ = ["activity_span", "ActivitySpan", "TRACER_NAME"]
