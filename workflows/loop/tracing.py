"""Rewind's trace spans from workflow code: the run, its steps, and the tool calls the
workflow answers itself (deterministic, no I/O, no OpenTelemetry import).

Workflow code cannot hold a span open (a replay would open it again) and must
not export anything. So it only describes its spans, once they have ended:
ids derived from the workflow's identity, times from `workflow.time_ns()`,
attributes from the step's record. The description goes, only when the
workflow is not replaying, to an extern function that the tracing interceptor
(rewind/temporal/tracing_otel.py) registers on the worker; it turns it into a real
span. Without that interceptor (tracing off) the extern is absent and every
method here returns at once.

Replay-safe like the metrics (workflows/vocabulary/metrics.py): a worker that takes a run
over replays its completed steps without emitting them again, and emits the
steps it runs live. Because ids are derived, not drawn, a child can name its
parent before the parent is emitted: while a step runs, its span is made the
current trace context (`__rewind_tracing_enter`), so the model and tool
activities it schedules, and their retries on any worker, are its children;
the step span itself is emitted when the step ends, with its real duration.
A workflow task that fails after emitting and is retried can emit a span
again; it then has the same ids, so a backend sees one span twice, not two.

The names below are shared with the activities' spans (activities/record/spans.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow

from workflows.vocabulary.contracts import AgentStatus, Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.tool_calls import NOT_EXECUTED

# -- span names ----------------------------------------------------------------
RUN_SPAN = "rewind.run"
STEP_SPAN = "rewind.step"


def model_span_name(model: str) -> str:
    """The GenAI semantic conventions' inference span name: `chat gpt-4o-mini`."""
    return f"chat {model}"


def tool_span_name(tool: str) -> str:
    """The GenAI semantic conventions' tool span name: `execute_tool search_web`."""
    return f"execute_tool {tool}"


# -- attribute names: the GenAI semantic conventions where they fit, rewind.* otherwise --
GEN_AI_OPERATION = "gen_ai.operation.name"      # chat | execute_tool
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
ERROR_TYPE = "error.type"
RUN_ID = "rewind.run_id"
BRANCH = "rewind.branch"
STEP = "rewind.step"
STEP_LABEL = "rewind.step_label"
ATTEMPT = "rewind.attempt"
COST_USD = "rewind.cost_usd"
PRICED = "rewind.priced"
CACHE_HIT = "rewind.cache_hit"
OUTCOME = "rewind.outcome"         # tool calls: ok, error, cached, reused, rejected, recorded
SIDE_EFFECTS = "rewind.side_effects"
STATE = "rewind.state"             # the run's state when its span ended
STEPS = "rewind.steps"
MODEL_CALLS = "rewind.model_calls"
TOOL_CALLS = "rewind.tool_calls"
CACHE_HITS = "rewind.cache_hits"
CONTINUED_AS_NEW = "rewind.continued_as_new"
CONTEXT_COMPRESSED = "rewind.context_compressed"
SUBAGENT_BRANCH = "rewind.subagent.branch"  # a sub-agent call: the branch its run is
SUBAGENT_STATE = "rewind.subagent.state"

# -- extern functions the tracing interceptor registers (absent: tracing is off) --
EXTERN_EMIT = "__rewind_tracing_emit"    # (SpanRecord) -> None
EXTERN_ENTER = "__rewind_tracing_enter"  # (trace_seed, span_id) -> token: the span becomes the current context
EXTERN_EXIT = "__rewind_tracing_exit"    # (token) -> None


@dataclass(frozen=True)
class SpanRecord:
    """One ended span, as workflow code describes it."""

    name: str
    span_id: int
    # The run's trace id when no trace came with the workflow's start (a run started
    # by a client without tracing) is derived from this; otherwise the propagated one is used.
    trace_seed: str
    parent_id: int | None  # None: a child of the trace context the workflow was started with
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def derived_id(bits: int, *parts: object) -> int:
    """A non-zero id of `bits` bits, the same for the same parts on every worker and replay."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1


def _usage(ledger: Ledger) -> dict[str, Any]:
    return {GEN_AI_INPUT_TOKENS: ledger.prompt_tokens, GEN_AI_OUTPUT_TOKENS: ledger.completion_tokens,
            COST_USD: ledger.cost_usd}


def answered_in_workflow(log: ToolCallLog) -> str | None:
    """How a tool call was answered without running the tool (None: an activity ran it)."""
    if log.subagent is not None:
        return "subagent"  # a child workflow answered it: its run's spans nest under this one
    if log.answered_from is not None:
        return "recorded"
    if log.reused is not None:
        return "reused"
    if log.approval is not None and log.approval.verdict == "rejected":
        return "rejected"
    if log.served_from_cache:
        return "cached"
    if log.error is not None and log.error.startswith(NOT_EXECUTED):
        return "error"
    return None


class RunTrace:
    """The spans of one workflow run (a continue-as-new starts another run span in the same trace)."""

    def __init__(self) -> None:
        self._on = False
        self._ended = False
        self._run_start_ns = 0
        self._run_span = 0
        self._trace_seed = ""
        self._where = ""
        self._base: dict[str, Any] = {}
        self._model = ""
        self._step: int | None = None
        self._step_start_ns = 0
        self._step_token: Any = None

    def _extern(self, name: str) -> Any:
        return workflow.extern_functions()[name]

    def _emit(self, record: SpanRecord) -> None:
        if not workflow.unsafe.is_replaying():
            self._extern(EXTERN_EMIT)(record)

    def _span_id(self, *parts: object) -> int:
        return derived_id(64, self._where, *parts)

    def run_started(self, run_id: str, branch_id: str, model: str) -> None:
        self._on = EXTERN_EMIT in workflow.extern_functions()
        if not self._on:
            return
        info = workflow.info()
        self._where = f"{info.workflow_id}\x1f{info.run_id}"
        self._trace_seed = f"{info.workflow_id}\x1f{info.first_execution_run_id}"
        self._run_span = self._span_id("run")
        self._run_start_ns = workflow.time_ns()
        self._base = {RUN_ID: run_id, BRANCH: branch_id}
        self._model = model

    def step_started(self, step: int) -> None:
        """From here to `step_ended`, activities the workflow schedules are children of this step."""
        if not self._on:
            return
        self._step, self._step_start_ns = step, workflow.time_ns()
        # Entered on replay too: the live part of a step that a new worker finishes
        # must schedule its calls under the same step span.
        self._step_token = self._extern(EXTERN_ENTER)(self._trace_seed, self._span_id("step", step))

    def call_started(self, step: int, tool_call_id: str) -> Any:
        """A call the workflow answers over time (a sub-agent): until `call_ended`, what it starts
        (the sub-agent's child workflow and every span of its run) is a child of the call's span."""
        if not self._on:
            return None
        return self._extern(EXTERN_ENTER)(self._trace_seed, self._span_id("call", step, tool_call_id))

    def call_ended(self, token: Any) -> None:
        if self._on and token is not None:
            self._extern(EXTERN_EXIT)(token)

    def step_ended(self, record: StepRecord) -> None:
        if not self._on or self._step is None or self._step != record.step_index:
            return
        step, self._step = self._step, None
        self._extern(EXTERN_EXIT)(self._step_token)
        self._step_token = None
        self._emit_step(record, self._span_id("step", step), self._step_start_ns)

    def pipeline_call_started(self, position: int, attempt: int) -> Any:
        """A pipeline's call (its calls overlap, so each has its own step span, named by its position
        until it completes and gets its step): until `pipeline_call_ended`, the activities this task
        schedules are children of that span (each asyncio task has its own context)."""
        if not self._on:
            return None
        span = self._span_id("call", position, attempt)
        return span, workflow.time_ns(), self._extern(EXTERN_ENTER)(self._trace_seed, span)

    def pipeline_call_ended(self, token: Any, record: StepRecord | None) -> None:
        """The call's span ends: as the step that records it, or (None: it failed) not at all."""
        if not self._on or token is None:
            return
        span, start_ns, entered = token
        self._extern(EXTERN_EXIT)(entered)
        if record is not None:
            self._emit_step(record, span, start_ns)

    def _emit_step(self, record: StepRecord, span: int, start_ns: int) -> None:
        step, now = record.step_index, workflow.time_ns()
        ledger = record.step_ledger
        error = (record.error_info or {}).get("reason") if record.status == "failed" else None
        self._emit(SpanRecord(
            name=STEP_SPAN, span_id=span, trace_seed=self._trace_seed, parent_id=self._run_span,
            start_ns=start_ns, end_ns=now, error=str(error) if error else None,
            attributes={**self._base, STEP: step, STEP_LABEL: record.step_label, GEN_AI_MODEL: record.model,
                        **_usage(ledger), MODEL_CALLS: ledger.model_calls, TOOL_CALLS: ledger.tool_calls,
                        CACHE_HITS: ledger.cache_hits},
        ))
        for index, log in enumerate(record.new_tool_calls):
            outcome = answered_in_workflow(log)
            if outcome is None:
                continue  # its activity emitted the span, once per attempt (activities/record/spans.py)
            at = int(log.called_at.timestamp() * 1e9)
            subagent = outcome == "subagent"
            self._emit(SpanRecord(
                name=tool_span_name(log.tool_name),
                span_id=(self._span_id("call", step, log.tool_call_id) if subagent
                         else self._span_id("tool", step, index, log.tool_call_id)),
                trace_seed=self._trace_seed, parent_id=span, start_ns=at,
                end_ns=at + log.duration_ms * 1_000_000 if subagent else at,
                error=log.error if outcome == "error" or (subagent and log.error) else None,
                attributes={**self._base, STEP: step, GEN_AI_OPERATION: "execute_tool", GEN_AI_TOOL_NAME: log.tool_name,
                            GEN_AI_TOOL_CALL_ID: log.tool_call_id, GEN_AI_TOOL_TYPE: "function",
                            CACHE_HIT: outcome == "cached", OUTCOME: outcome, SIDE_EFFECTS: log.side_effects,
                            **({SUBAGENT_BRANCH: log.subagent.branch_id, SUBAGENT_STATE: log.subagent.state}
                               if log.subagent is not None else {})},
            ))

    def run_ended(self, status: AgentStatus | None, *, state: str | None = None) -> None:
        """Once per workflow run: when it ends, fails, is cancelled or continues as new (`state`)."""
        if not self._on or self._ended or status is None:
            return
        self._ended = True
        if self._step is not None and self._step_token is not None:
            self._extern(EXTERN_EXIT)(self._step_token)
            self._step, self._step_token = None, None
        final = state or status.state
        self._emit(SpanRecord(
            name=RUN_SPAN, span_id=self._run_span, trace_seed=self._trace_seed, parent_id=None,
            start_ns=self._run_start_ns, end_ns=workflow.time_ns(),
            error=(status.last_error or final) if final in ("failed", "cancelled") else None,
            attributes={**self._base, GEN_AI_MODEL: self._model, STATE: final, STEPS: status.step,
                        **_usage(status.ledger), MODEL_CALLS: status.ledger.model_calls,
                        TOOL_CALLS: status.ledger.tool_calls, CACHE_HITS: status.ledger.cache_hits,
                        CONTINUED_AS_NEW: status.continued_as_new},
        ))


__all__ = ["RunTrace", "SpanRecord", "derived_id", "answered_in_workflow", "model_span_name", "tool_span_name",
           "RUN_SPAN", "STEP_SPAN", "EXTERN_EMIT", "EXTERN_ENTER", "EXTERN_EXIT"]
