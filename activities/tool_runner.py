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
from datetime import datetime, timezone
from typing import Any

import pydantic
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from activities.idempotency import IdempotencyLedger
from activities.redaction import Redactor
from activities.tools import (
    ToolContext,
    ToolError,
    ToolRegistry,
    reset_tool_context,
    set_tool_context,
)
from workflows.contracts import (
    CompensationOutcome,
    CompensationRequest,
    DescribeToolsRequest,
    DescribeToolsResponse,
    ToolOutcome,
    ToolRequest,
)
from workflows.errors import CheckpointError
from workflows.text import scrub_surrogates
from workflows.wire import (
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


def _jsonable(value: Any, tool_name: str, limit: int) -> Any:
    """The output as storable JSON: plain types, no lone surrogates, bounded size."""
    try:
        value = scrub_surrogates(to_jsonable_python(value))
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except (TypeError, ValueError, pydantic.PydanticSerializationError) as exc:
        raise ToolError(f"tool {tool_name!r} returned a value that is not JSON-serializable: {exc}") from exc
    if size > limit:
        raise ToolError(
            f"output of {tool_name} is {size / 1e6:.1f} MB, over the {limit / 1e6:.1f} MB limit "
            "(REWIND_MAX_TOOL_OUTPUT_BYTES); return less, or store the data and return a reference to it"
        )
    return value


class ToolActivities:
    def __init__(
        self, registry: ToolRegistry, ledger: IdempotencyLedger, redactor: Redactor,
        *, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self._registry = registry
        self._ledger = ledger
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
        """Best effort: the effect happened whatever the store says (see activities/idempotency.py)."""
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
        return DescribeToolsResponse(tools=specs, missing=missing)

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: ToolRequest) -> ToolOutcome:
        registered = self._registry.get(request.tool_name)
        if registered is None:
            raise ApplicationError(
                f"tool {request.tool_name!r} is not registered on this worker; "
                "start the worker with --tool-modules (REWIND_TOOL_MODULES) naming the module that defines it",
                type=TOOL_NOT_REGISTERED,
                non_retryable=True,
            )
        started = datetime.now(timezone.utc)
        clock = time.monotonic()

        def outcome(**fields: Any) -> ToolOutcome:
            return ToolOutcome(started_at=started, duration_ms=int((time.monotonic() - clock) * 1000), **fields)

        try:
            kwargs = registered.validate(request.arguments)
        except pydantic.ValidationError as exc:
            message = f"invalid arguments for {request.tool_name}: {_validation_message(exc)}"
            return outcome(error=self._redact.redact_text(message), error_kind="invalid_arguments")

        # Heartbeat from the first store request on: a slow record lookup or
        # write must not look like a dead worker to Temporal.
        async with heartbeating(request.tool_name):
            return await self._run_checked(request, registered, kwargs, outcome)

    async def _run_checked(self, request: ToolRequest, registered: Any, kwargs: dict[str, Any], outcome: Any) -> ToolOutcome:
        key = request.idempotency_key if registered.spec.side_effects else None
        if key is not None:
            record = await self._recorded(key)
            if record is not None:
                return outcome(output=record["output"], replayed_from_record=True)

        ctx = ToolContext(
            run_id=request.run_id,
            branch_id=request.branch_id,
            step=request.step,
            tool_call_id=request.tool_call_id,
            tool_name=request.tool_name,
            idempotency_key=key,
            attempt=activity.info().attempt,
        )
        token = set_tool_context(ctx)
        try:
            result = await registered.fn(**kwargs)
            output = self._redact.redact_json(_jsonable(result, request.tool_name, self._max_output))
        except ToolError as exc:
            return outcome(error=self._redact.redact_text(f"{request.tool_name} failed: {exc}"), error_kind="tool_error")
        except Exception as exc:
            # No cause chain (it would carry the unredacted message into history
            # and logs) and a bounded message: Temporal keeps only ~2 KB of a
            # retrying activity's failure (see activities/llm.py).
            message = self._redact.redact_text(f"tool {request.tool_name!r} raised {type(exc).__name__}: {exc}")
            raise ApplicationError(message[:1000], type="ToolRaised") from None
        finally:
            reset_tool_context(token)
        if key is not None:
            await self._record(key, request.tool_name, output)
        return outcome(output=output)

    @activity.defn(name=COMPENSATE_TOOL)
    async def compensate_tool(self, request: CompensationRequest) -> CompensationOutcome:
        def outcome(status: str, **fields: Any) -> CompensationOutcome:
            return CompensationOutcome(
                tool_name=request.tool_name, original_key=request.original_key,
                compensation_key=request.compensation_key, status=status, **fields,  # type: ignore[arg-type]
            )

        registered = self._registry.get(request.tool_name)
        if registered is None:
            raise ApplicationError(
                f"tool {request.tool_name!r} is not registered on this worker; cannot compensate it",
                type=TOOL_NOT_REGISTERED, non_retryable=True,
            )
        if registered.compensate is None:
            return outcome("no_compensation", error=f"tool {request.tool_name!r} declares no compensation")
        record = await self._recorded(request.compensation_key)
        if record is not None:
            return outcome("already_compensated", output=record["output"])
        token = set_tool_context(ToolContext(
            run_id=request.run_id, branch_id=request.branch_id, step=request.step,
            tool_call_id=f"compensate:{request.original_key}", tool_name=request.tool_name,
            idempotency_key=request.compensation_key, attempt=activity.info().attempt,
        ))
        try:
            async with heartbeating(request.tool_name):
                result = await registered.compensate(request.arguments, request.output)
            output = self._redact.redact_json(_jsonable(result, request.tool_name, self._max_output))
        except ToolError as exc:
            return outcome("failed", error=self._redact.redact_text(str(exc)))
        except Exception as exc:
            message = self._redact.redact_text(f"compensation of {request.tool_name!r} raised {type(exc).__name__}: {exc}")
            raise ApplicationError(message[:1000], type="CompensationRaised") from None
        finally:
            reset_tool_context(token)
        await self._record(request.compensation_key, request.tool_name, output)
        return outcome("compensated", output=output)
