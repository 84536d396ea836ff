"""Tool activities: describe the worker's tools, and run one tool call.

Errors the model can act on (arguments that fail validation, a `ToolError`)
come back as data in a ToolOutcome, so the loop turns them into a tool
message. Any other exception is raised as a retryable ApplicationError and
Temporal retries it up to the tool's `max_attempts`; the workflow turns the
final failure into a tool message too.

Every output and error message is redacted here (rewind/redaction.py), where
it is produced, so history, logs, the model and the checkpoints never see a
secret a tool printed or raised.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Literal

import pydantic
from pydantic_core import PydanticSerializationError, to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.record.checkpoint_writer import CheckpointWriter, written_beside
from activities.liveness.heartbeat import heartbeating
from activities.tools.idempotency import IdempotencyLedger
from activities.record.live import CallEvents
from activities.record.redaction import Redactor
from checkpoint_bridge.events.bus import Publisher
from activities.record.spans import activity_span
from checkpoint_bridge.checkpoints.outputs import OutputStore, worth_a_reference
from activities.tools.registry import (
    RegisteredTool,
    ToolContext,
    ToolError,
    ToolRegistry,
    reset_tool_context,
    set_tool_context,
)
from workflows.vocabulary.contracts import (
    CarriedWrite,
    CompensationOutcome,
    CompensationRequest,
    DescribeToolsRequest,
    DescribeToolsResponse,
    StepRecord,
    ToolCheck,
    ToolCheckRequest,
    ToolOutcome,
    ToolRequest,
    ToolSpec,
)
from workflows.loop.effects import effect_identity
from workflows.vocabulary.errors import CheckpointError
from workflows.vocabulary.events import tool_call_key
from workflows.vocabulary.text import scrub_surrogates
from workflows.loop import tracing as names
from workflows.loop.tracing import tool_span_name
from workflows.vocabulary.wire import (
    CHECK_TOOL_CALL,
    COMPENSATE_TOOL,
    DESCRIBE_TOOLS,
    RUN_TOOL,
    TOOL_NOT_REGISTERED,
)


def _validation_message(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


# The largest tool output a run accepts (REWIND_MAX_TOOL_OUTPUT_BYTES). Outputs
# above the payload threshold are stored by reference (never in history), but
# each still lands in the transcript, a checkpoint and the worker's memory;
# past this size the call is refused with a clear message.
DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024
# A read-only output the payload store could not take goes into history instead, up to this
# size (the worker passes half of REWIND_PAYLOAD_THRESHOLD: above the threshold the result
# itself would be stored in the same, failing, store).
DEFAULT_INLINE_FALLBACK_BYTES = 32 * 1024


class UnstorableOutputError(ValueError):
    """A tool's output has no JSON form (the attempt fails and is retried)."""


def _jsonable(value: Any, tool_name: str, limit: int) -> Any:
    """The output as storable JSON: plain types, no lone surrogates, bounded size."""
    try:
        value = scrub_surrogates(to_jsonable_python(value))
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except (TypeError, ValueError, PydanticSerializationError) as exc:
        # Retried like a tool that raised (a glitch of the tool's upstream may pass; one
        # that does not reaches the model after max_attempts). The exception named here
        # was once `pydantic.PydanticSerializationError`, which does not exist: the except
        # clause itself raised AttributeError (found by the soak, bench/soak).
        raise UnstorableOutputError(f"tool {tool_name!r} returned a value that is not JSON-serializable: {exc}") from None
    if size > limit:
        raise ToolError(
            f"output of {tool_name} is {size / 1e6:.1f} MB, over the {limit / 1e6:.1f} MB limit "
            "(REWIND_MAX_TOOL_OUTPUT_BYTES); return less, or store the data and return a reference to it"
        )
    return value


class ToolActivities:
    def __init__(
        self, registry: ToolRegistry, ledger: IdempotencyLedger, redactor: Redactor,
        *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES, outputs: OutputStore | None = None,
        inline_fallback_bytes: int = DEFAULT_INLINE_FALLBACK_BYTES, pipelines: list[ToolSpec] | None = None,
        checkpoints: CheckpointWriter | None = None, events: Publisher | None = None,
    ) -> None:
        self._registry = registry
        self._events = events  # the worker's bus: a call's start, its progress (`rewind.emit`), its end
        self._checkpoints = checkpoints  # writes the step records a pipeline's tool call carries
        self._pipelines = list(pipelines or [])  # listed with every tool (`rewind tools`)
        self._inline_fallback = inline_fallback_bytes
        self._ledger = ledger
        self._outputs = outputs  # None: every output stays in history
        self._redact = redactor
        self._max_output = max_output_bytes

    async def _recorded(self, key: str) -> dict[str, Any] | None:
        """The record of an earlier attempt; a store that cannot say fails the
        attempt before the tool runs (Temporal retries it)."""
        try:
            return await self._ledger.recorded(key)
        except CheckpointError as exc:
            raise ApplicationError(
                self._redact.redact_text(f"cannot read the idempotency record {key} (the tool did not run): {exc}")[:1000],
                type="IdempotencyStoreUnavailable",
            ) from None

    async def _record(self, key: str, tool_name: str, output: Any) -> None:
        """Best effort: the effect happened whatever the store says (see activities/tools/idempotency.py)."""
        try:
            await self._ledger.record(key, tool_name, output)
        except Exception as exc:  # noqa: BLE001 - the store's failure must not turn a done effect into a failure
            activity.logger.warning(
                "%s ran (idempotency key %s) but its record could not be written: %s; the call is reported "
                "as done, and a crash before Temporal records its completion would run it again with the same key",
                tool_name, key, self._redact.redact_text(str(exc))[:500],
            )

    @activity.defn(name=DESCRIBE_TOOLS)
    async def describe_tools(self, request: DescribeToolsRequest) -> DescribeToolsResponse:
        names = request.names or self._registry.names()
        specs = [self._registry.get(n).spec for n in names if self._registry.get(n) is not None]
        missing = [n for n in names if self._registry.get(n) is None]
        return DescribeToolsResponse(tools=specs, missing=missing, pipelines=[] if request.names else self._pipelines)

    @activity.defn(name=CHECK_TOOL_CALL)
    async def check_tool_call(self, request: ToolCheckRequest) -> ToolCheck:
        """Whether the arguments pass the tool's schema (the validator the call itself
        meets) and whether the tool's approval rule wants a person to decide. Runs nothing."""
        registered = self._registered(request.tool_name, "check")
        try:
            kwargs = registered.validate(request.arguments)
        except pydantic.ValidationError as exc:
            return ToolCheck(invalid=self._redact.redact_text(_validation_message(exc)))
        validated = registered.validated_json(request.arguments)
        spec = registered.spec
        repeat = None
        if request.candidates:
            # The same effect whatever spelling each call used ("450" or 450).
            mine = effect_identity(spec, validated)
            for index, candidate in enumerate(request.candidates):
                try:
                    theirs = effect_identity(spec, registered.validated_json(candidate))
                except pydantic.ValidationError:
                    continue  # recorded under an older schema of the tool: compared as recorded only
                if theirs == mine:
                    repeat = index
                    break
        rule = registered.approval_rule
        if rule is None:
            return ToolCheck(needs_approval=spec.approval == "always", arguments=validated, repeat_index=repeat)
        try:
            needs = bool(rule(kwargs))
        except Exception as exc:  # noqa: BLE001 - a rule that fails asks a person: the safe side
            activity.logger.warning("the approval rule of %s raised %s: %s; the call waits for a decision",
                                    request.tool_name, type(exc).__name__, self._redact.redact_text(str(exc))[:300])
            needs = True
        return ToolCheck(needs_approval=needs, arguments=validated, repeat_index=repeat)

    def _registered(self, name: str, purpose: str) -> RegisteredTool:
        registered = self._registry.get(name)
        if registered is None:
            raise ApplicationError(
                f"tool {name!r} is not registered on this worker; cannot {purpose} it: start the worker with "
                "--tool-modules (REWIND_TOOL_MODULES) naming the module that defines it",
                type=TOOL_NOT_REGISTERED,
                non_retryable=True,
            )
        return registered

    async def _once(
        self, ctx: ToolContext, call: Callable[[], Awaitable[Any]], *, raised: str, raised_type: str,
    ) -> tuple[Literal["recorded", "done"], Any] | tuple[Literal["refused"], ToolError]:
        """Run `call` at most once per `ctx.idempotency_key` (None: no key): an earlier
        attempt's record answers instead; a ToolError is the tool's refusal; any other
        exception is a retryable failure, bounded and redacted."""
        key = ctx.idempotency_key
        if key is not None:
            record = await self._recorded(key)
            if record is not None:
                return "recorded", record["output"]
        token = set_tool_context(ctx)
        try:
            output = self._redact.redact_json(_jsonable(await call(), ctx.tool_name, self._max_output))
        except ToolError as exc:
            return "refused", exc
        except Exception as exc:
            # No cause chain (it would carry the unredacted message into history
            # and logs) and a bounded message: Temporal keeps only ~2 KB of a
            # retrying activity's failure (see activities/model/llm.py).
            message = self._redact.redact_text(f"{raised} raised {type(exc).__name__}: {exc}")
            raise ApplicationError(message[:1000], type=raised_type) from None
        finally:
            reset_tool_context(token)
        if key is not None:
            await self._record(key, ctx.tool_name, output)
        return "done", output

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: ToolRequest) -> ToolOutcome:
        registered = self._registered(request.tool_name, "run")
        with activity_span(tool_span_name(request.tool_name), {
            names.GEN_AI_OPERATION: "execute_tool", names.GEN_AI_TOOL_NAME: request.tool_name,
            names.GEN_AI_TOOL_CALL_ID: request.tool_call_id, names.GEN_AI_TOOL_TYPE: "function",
            names.RUN_ID: request.run_id, names.BRANCH: request.branch_id, names.STEP: request.step,
            names.ATTEMPT: activity.info().attempt, names.CACHE_HIT: False,
            names.SIDE_EFFECTS: registered.spec.side_effects,
        }, redact=self._redact.redact_text) as span:
            # The step records the call carries are written beside the tool, as a model call's are.
            # Heartbeat over both, from the first store request on: a slow record lookup, or a
            # carried write that waits out a slow store after the tool has ended, must not look
            # like a dead worker to Temporal, which would time the attempt out and run the
            # finished tool again.
            events = CallEvents.of_activity(self._events, request.run_id, request.step,
                                            tool_call_key(request.step, request.tool_call_id, activity.info().activity_id))
            events.started("tool.started", {"tool": request.tool_name, "tool_call_id": request.tool_call_id,
                                            "arguments": request.arguments})
            try:
                async with heartbeating(request.tool_name):
                    result, carried = await written_beside(
                        self._run_tool(registered, request, events),
                        self._write_carried(request) if request.checkpoints else None)
            finally:
                events.ended()
            if carried is not None:
                result.checkpoints = carried
            if result.error is not None:
                span.set({names.OUTCOME: "error"})
                span.fail(result.error_kind or "tool_error", result.error)
            else:
                span.set({names.OUTCOME: "recorded" if result.replayed_from_record else "ok"})
            return result

    async def _write_carried(self, request: ToolRequest) -> CarriedWrite:
        if self._checkpoints is None:
            return CarriedWrite(error="this worker writes no checkpoints")
        try:
            records = [StepRecord.model_validate(r) for r in request.checkpoints]
        except pydantic.ValidationError as exc:
            return CarriedWrite(error=f"the carried step records are malformed: {_validation_message(exc)}")
        return await self._checkpoints.save_carried(records)

    async def _run_tool(self, registered: RegisteredTool, request: ToolRequest, events: CallEvents) -> ToolOutcome:
        started = datetime.now(timezone.utc)
        clock = time.monotonic()

        def outcome(**fields: Any) -> ToolOutcome:
            return ToolOutcome(started_at=started, duration_ms=int((time.monotonic() - clock) * 1000),
                               attempt=activity.info().attempt, **fields)

        if registered.spec.agent is not None:
            # A sub-agent is answered by a run of its own (workflows/loop/subagents.py), never by this activity.
            return outcome(error=f"{request.tool_name} is a sub-agent: the calling run starts it as a run of its own",
                           error_kind="tool_error")

        try:
            kwargs = registered.validate(request.arguments)
        except pydantic.ValidationError as exc:
            message = f"invalid arguments for {request.tool_name}: {_validation_message(exc)}"
            return outcome(error=self._redact.redact_text(message), error_kind="invalid_arguments")
        ctx = ToolContext(
            run_id=request.run_id, branch_id=request.branch_id, step=request.step,
            tool_call_id=request.tool_call_id, tool_name=request.tool_name,
            idempotency_key=request.idempotency_key if registered.spec.side_effects else None,
            attempt=activity.info().attempt, events=events,
        )
        # (run_tool heartbeats around all of this.)
        if request.dry_run:
            return await self._dry_run(registered, request, kwargs, ctx, outcome)
        kind, value = await self._once(ctx, lambda: registered.fn(**kwargs),
                                       raised=f"tool {request.tool_name!r}", raised_type="ToolRaised")
        if kind == "refused":
            return outcome(error=self._redact.redact_text(f"{request.tool_name} failed: {value}"),
                           error_kind="tool_error")
        if (self._outputs is not None and not registered.spec.side_effects and not request.inline_output
                and worth_a_reference(value)):
            return outcome(**await self._by_reference(request.tool_name, value))
        return outcome(output=value, replayed_from_record=kind == "recorded")

    async def _by_reference(self, tool_name: str, value: Any) -> dict[str, Any]:
        """The output stored once and named by digest in history (checkpoint_bridge/checkpoints/outputs.py).
        A completed call is not run again because the store failed: its output goes into
        history itself when it is small enough (what the call returns is the same; the mirror
        and the model call resolve a reference to the same content); only a larger output
        fails the attempt, and the tool runs again (the seeded soak found read-only calls
        repeated after every S3 hiccup)."""
        try:
            return {"output_ref": await self._outputs.put(value)}  # type: ignore[union-attr]
        except CheckpointError as exc:
            problem = self._redact.redact_text(f"cannot store the output of {tool_name} in the payload store: {exc}")
            if len(json.dumps(value, ensure_ascii=False).encode("utf-8")) <= self._inline_fallback:
                activity.logger.warning("%s; it goes into Temporal's history instead", problem[:500])
                return {"output": value}
            raise ApplicationError(problem[:1000], type="OutputStoreUnavailable") from None

    async def _dry_run(self, registered: RegisteredTool, request: ToolRequest, kwargs: dict[str, Any],
                       ctx: ToolContext, outcome: Callable[..., ToolOutcome]) -> ToolOutcome:
        """The tool's dry_run implementation in place of the tool (a dry-run branch). Nothing
        happens, so nothing is recorded under the call's key (no key is passed to _once)."""
        dry_run = registered.dry_run
        if dry_run is None:
            return outcome(error=f"{request.tool_name} declares no dry_run on this worker", error_kind="tool_error")
        kind, value = await self._once(replace(ctx, idempotency_key=None), lambda: dry_run(**kwargs),
                                       raised=f"dry_run of {request.tool_name!r}", raised_type="ToolRaised")
        if kind == "refused":
            return outcome(error=self._redact.redact_text(f"{request.tool_name} (dry run) failed: {value}"),
                           error_kind="tool_error")
        return outcome(output=value)

    @activity.defn(name=COMPENSATE_TOOL)
    async def compensate_tool(self, request: CompensationRequest) -> CompensationOutcome:
        def outcome(status: str, **fields: Any) -> CompensationOutcome:
            return CompensationOutcome(
                tool_name=request.tool_name, original_key=request.original_key,
                compensation_key=request.compensation_key, status=status, **fields,  # type: ignore[arg-type]
            )

        registered = self._registered(request.tool_name, "compensate")
        undo = registered.compensate
        if undo is None:
            return outcome("no_compensation", error=f"tool {request.tool_name!r} declares no compensation")
        ctx = ToolContext(
            run_id=request.run_id, branch_id=request.branch_id, step=request.step,
            tool_call_id=f"compensate:{request.original_key}", tool_name=request.tool_name,
            idempotency_key=request.compensation_key, attempt=activity.info().attempt,
        )
        async with heartbeating(request.tool_name):
            kind, value = await self._once(ctx, lambda: undo(request.arguments, request.output),
                                           raised=f"compensation of {request.tool_name!r}", raised_type="CompensationRaised")
        if kind == "refused":
            return outcome("failed", error=self._redact.redact_text(str(value)))
        return outcome("already_compensated" if kind == "recorded" else "compensated", output=value)
