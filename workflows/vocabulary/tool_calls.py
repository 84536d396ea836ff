"""Pure helpers of the agent loop: canonical arguments, keys, labels, messages.

Deterministic and free of I/O, so workflow code can use them.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from workflows.vocabulary.labels import step_label  # noqa: F401 - re-exported: where callers have always found it

if TYPE_CHECKING:
    # Annotations only: the checkpoint readers (`rewind tree`, `show`) use this module, and
    # the contracts' pydantic models cost a CLI process more than the rest of its imports.
    from workflows.vocabulary.contracts import ToolCallLog, ToolSpec

# Errors of calls that never reached a tool (the model named no known tool, or
# sent arguments that are not a JSON object). Older checkpoints carry no
# ledger, and their tool-call count is estimated by leaving these out.
UNKNOWN_TOOL = "unknown tool"
BAD_ARGUMENTS = "arguments for"
NOT_EXECUTED = (UNKNOWN_TOOL, BAD_ARGUMENTS)
# The error of a call whose tool kept failing until its retries ran out ("fetch failed after
# retries: ..."): the model gets it and the run goes on, so `rewind runs --tool-errors` finds
# such runs by it in their checkpoints' tool records, whatever state the run ended in.
FAILED_AFTER_RETRIES = "failed after retries"


def failed_after_retries(tool_name: str, error: str) -> str:
    """The error text of a call of `tool_name` that failed after its retries with `error`."""
    return f"{tool_name} {FAILED_AFTER_RETRIES}: {error}"


def is_failed_after_retries(record: dict[str, Any]) -> bool:
    """Whether a stored tool record is of a call that failed after its retries."""
    error, name = record.get("error"), record.get("tool_name")
    return isinstance(error, str) and isinstance(name, str) and error.startswith(f"{name} {FAILED_AFTER_RETRIES}: ")


def failure_text(err: BaseException) -> str:
    """The reason of an activity's (or a child workflow's) final failure: its cause's message."""
    # Imported here: the checkpoint readers (`rewind tree`, `show`) use this module
    # and must not load the Temporal client; whoever holds such an error has it loaded.
    from temporalio.exceptions import ActivityError, ChildWorkflowError, TimeoutError

    cause = err.cause if isinstance(err, (ActivityError, ChildWorkflowError)) and err.cause is not None else err
    text = str(cause) or type(cause).__name__
    # Retries that ran out of time ("Not enough time to schedule next retry before activity
    # ScheduleToClose timeout") keep the last attempt's failure as the timeout's cause: that is the reason.
    last = cause.cause if isinstance(cause, TimeoutError) else None
    if last is not None and str(last) and str(last) not in text:
        text = f"{text}; the last attempt: {last}"
    return text


def with_system_prompt(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The conversation with `prompt` as its system message (a fork that changes it)."""
    out = list(messages)
    first = next((i for i, m in enumerate(out) if m.get("role") == "system"), None)
    if first is None:
        out.insert(0, {"role": "system", "content": prompt})
    else:
        out[first] = {**out[first], "content": prompt}
    return out


def with_system(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The conversation with `prompt` as its only system message, first (a fork's `--prompt
    LABEL=` on a pipeline's or a graph node's call; every system message the code sent is dropped)."""
    rest = [m for m in messages if m.get("role") != "system"]
    return [{"role": "system", "content": prompt}, *rest]


def canonical_arguments(args: dict[str, Any], spec: ToolSpec) -> dict[str, Any]:
    """Arguments as the cache key sees them.

    Volatile fields named in `cache_ignore` are dropped, and arrays the schema
    declares as sets (`uniqueItems`, what a `set[...]` hint produces) are
    sorted, so {"tags": ["b", "a"]} and {"tags": ["a", "b"]} hit the same entry.
    """
    props = spec.parameters.get("properties", {})
    out: dict[str, Any] = {}
    for name, value in args.items():
        if name in spec.cache_ignore:
            continue
        schema = props.get(name, {})
        if isinstance(value, list) and schema.get("uniqueItems"):
            value = sorted(value, key=lambda v: json.dumps(v, sort_keys=True))
        out[name] = value
    return out


def idempotency_key(workflow_id: str, branch_id: str, step: int, tool_call_id: str) -> str:
    """Stable for one tool call; different for any other call, step, branch or workflow.

    Not (workflow_id, activity_id): a reset or continue-as-new reuses activity ids.
    """
    material = json.dumps([workflow_id, branch_id, step, tool_call_id], separators=(",", ":"))
    return "idem-" + hashlib.sha256(material.encode()).hexdigest()[:40]


# The key of a tool message whose content is a tool output stored by reference
# (checkpoint_bridge/checkpoints/outputs.py): it never leaves Rewind, activities put the
# content back before a model or a checkpoint sees the message.
OUTPUT_REF = "rewind_output_ref"


def output_text(output: Any) -> str:
    """A tool output as the content of its tool message."""
    return output if isinstance(output, str) else json.dumps(output, sort_keys=True, ensure_ascii=False)


def tool_message(log: ToolCallLog) -> dict[str, Any]:
    if log.error is None and log.output_ref is not None:
        return {"role": "tool", "tool_call_id": log.tool_call_id, OUTPUT_REF: log.output_ref}
    content = f"error: {log.error}" if log.error is not None else output_text(log.output)
    return {"role": "tool", "tool_call_id": log.tool_call_id, "content": content}


DRY_RUN_NOT_EXECUTED = "[dry run] not executed"


def dry_run_stub(tool_name: str, arguments: dict[str, Any]) -> str:
    """What a dry-run branch answers for a side-effecting tool that declares no dry_run."""
    return (f"{DRY_RUN_NOT_EXECUTED}: {tool_name} changes the world, and this branch explores without "
            f"side effects (--side-effects dry-run), so the call with {json.dumps(arguments, sort_keys=True, ensure_ascii=False)[:500]} did not happen. "
            "Go on as if it had succeeded.")
