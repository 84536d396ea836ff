"""The part of tracing that imports OpenTelemetry: provider, exporter, interceptor.

Imported by rewind/temporal/tracing.py only when tracing is on, so a process with
tracing off never loads the SDK (and runs without the `otel` extra).

- The provider names the service and exports in batches over OTLP; the
  exporter reads its own variables (OTEL_EXPORTER_OTLP_ENDPOINT,
  _TRACES_ENDPOINT, _HEADERS, _TIMEOUT, ...) and the batch processor its own
  (OTEL_BSP_SCHEDULE_DELAY, ...).
- The interceptor is Temporal's TracingInterceptor (temporalio.contrib.
  opentelemetry): client spans (StartWorkflow from `rewind start`, ...), the
  workflow's replay-safe RunWorkflow / StartActivity spans, RunActivity around
  each attempt, and the trace context carried in Temporal headers from the
  CLI to every worker. On top, it registers the extern functions through which
  workflow code hands over Rewind's run and step spans (workflows/loop/tracing.py).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags
from temporalio.contrib.opentelemetry import TracingInterceptor

from workflows.vocabulary.errors import ConfigError
from workflows.loop.tracing import EXTERN_EMIT, EXTERN_ENTER, EXTERN_EXIT, SpanRecord, derived_id

log = logging.getLogger("rewind.temporal.tracing")

# The ids of the span being created, when workflow code derived them.
_PRESET: ContextVar[tuple[int, int] | None] = ContextVar("rewind_preset_span_ids", default=None)


class _DerivedIds(IdGenerator):
    """Random ids, except for a workflow span, whose ids are derived (the same on every worker)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        preset = _PRESET.get()
        return preset[1] if preset is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        preset = _PRESET.get()
        return preset[0] if preset is not None else self._random.generate_trace_id()


class RewindTracingInterceptor(TracingInterceptor):
    """Temporal's TracingInterceptor plus the extern functions of Rewind's workflow spans.

    The externs run outside the workflow sandbox, in the workflow's own task: the
    trace context they attach is the one Temporal's interceptor reads when the
    workflow schedules an activity. They never raise into workflow code."""

    def workflow_interceptor_class(self, input: Any) -> Any:
        input.unsafe_extern_functions.update({
            EXTERN_EMIT: self._emit, EXTERN_ENTER: self._enter, EXTERN_EXIT: self._exit,
        })
        return super().workflow_interceptor_class(input)

    @staticmethod
    def _trace_of(seed: str) -> tuple[int, TraceFlags]:
        """The run's trace: the one its start carried (from the CLI), else one derived from the workflow."""
        current = trace.get_current_span().get_span_context()
        if current.is_valid:
            return current.trace_id, current.trace_flags
        return derived_id(128, "trace", seed), TraceFlags(TraceFlags.SAMPLED)

    @staticmethod
    def _context(trace_id: int, span_id: int, flags: TraceFlags, base: Any = None) -> Any:
        return trace.set_span_in_context(NonRecordingSpan(SpanContext(trace_id, span_id, False, flags)), base)

    def _emit(self, record: SpanRecord) -> None:
        try:
            trace_id, flags = self._trace_of(record.trace_seed)
            parent = (otel_context.get_current() if record.parent_id is None
                      else self._context(trace_id, record.parent_id, flags, otel_context.Context()))
            token = _PRESET.set((trace_id, record.span_id))
            try:
                span = self.tracer.start_span(
                    record.name, context=parent, start_time=record.start_ns,
                    attributes={k: v for k, v in record.attributes.items() if v is not None},
                )
            finally:
                _PRESET.reset(token)
            if record.error:
                span.set_status(Status(StatusCode.ERROR, record.error[:500]))
            span.end(end_time=max(record.end_ns, record.start_ns))
        except Exception:  # noqa: BLE001 - a span must never fail a workflow task
            log.warning("could not emit span %s", record.name, exc_info=True)

    def _enter(self, seed: str, span_id: int) -> Any:
        try:
            trace_id, flags = self._trace_of(seed)
            return otel_context.attach(self._context(trace_id, span_id, flags))
        except Exception:  # noqa: BLE001
            log.warning("could not enter a step's trace context", exc_info=True)
            return None

    @staticmethod
    def _exit(token: Any) -> None:
        if token is None:
            return
        try:
            # What opentelemetry.context.detach does, without its error log for a token
            # of another contextvars.Context (an evicted workflow's; see temporalio's
            # contrib/opentelemetry/_context.py).
            token.var.reset(token)
        except ValueError:
            pass


class Tracing:
    """A process's tracing: its provider, the tracer of Rewind's spans, the interceptor."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("rewind")
        self.interceptor = RewindTracingInterceptor(self.tracer)

    @classmethod
    def build(cls, service_name: str, *, exporter: SpanExporter | None = None,
              processor: SpanProcessor | None = None) -> "Tracing":
        """`processor` (tests: a SimpleSpanProcessor of an InMemorySpanExporter), else a batch of `exporter`."""
        if processor is None:
            if exporter is None:
                raise ValueError("give an exporter or a span processor")
            processor = BatchSpanProcessor(exporter)
        # Resource.create adds OTEL_RESOURCE_ATTRIBUTES, as the SDK reads it.
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}), id_generator=_DerivedIds(),
                                  shutdown_on_exit=False)
        provider.add_span_processor(processor)
        return cls(provider)

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Export what is left (bounded), then stop the exporter."""
        self.provider.force_flush(timeout_ms)
        self.provider.shutdown()


def otlp_exporter(protocol: str) -> SpanExporter:
    """The OTLP exporter of `protocol`; it reads its endpoint, headers and timeout itself."""
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc: "
                              "pip install 'rewind-agents[otel]', or use http/protobuf") from None
        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


def set_global_provider(tracing: Tracing) -> None:
    """The activities' spans use the OpenTelemetry API (activities/record/spans.py): the global provider."""
    trace.set_tracer_provider(tracing.provider)


__all__ = ["Tracing", "RewindTracingInterceptor", "otlp_exporter", "set_global_provider"]
