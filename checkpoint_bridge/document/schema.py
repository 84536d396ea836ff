"""The open ``AgentCheckpoint`` document and its canonical bytes.

A checkpoint is plain JSON: it is parsed with ``json.loads`` and validated by
pydantic, never unpickled or rebuilt through object hooks, so reading a
checkpoint from an untrusted bucket cannot execute anything.

``dump_checkpoint`` is deterministic (sorted keys, no whitespace, datetimes as
UTC ISO-8601 with ``Z`` and microseconds), which is what lets the mirror write
the same bytes when it projects the same history twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from workflows.vocabulary.canonical import cache_key, canonical_json
from workflows.vocabulary.errors import CheckpointError
from workflows.vocabulary.ids import checkpoint_id as make_checkpoint_id
from workflows.vocabulary.ids import parse_checkpoint_id, validate_id

__all__ = [
    "CURRENT_SCHEMA_VERSION",
    "CheckpointStatus",
    "ToolCallRecord",
    "AgentCheckpoint",
    "CheckpointSummary",
    "final_answer",
    "code_run",
    "code_kind",
    "stored_state",
    "StepParts",
    "dump_checkpoint",
    "checkpoint_to_dict",
    "format_datetime",
]

CURRENT_SCHEMA_VERSION = 8

CheckpointStatus = Literal["completed", "failed", "in_progress", "invalidated"]

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


def format_datetime(value: datetime) -> str:
    """UTC ISO-8601 with a fixed microsecond field and ``Z``: one spelling per instant."""
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


class ToolCallRecord(BaseModel):
    """One executed (or cache-served) tool call."""

    model_config = _STRICT

    tool_name: str
    tool_input: dict[str, Any] = Field(default_factory=dict)
    tool_output: Any = None
    called_at: AwareDatetime
    duration_ms: int = Field(default=0, ge=0)
    error: str | None = None
    cache_key: str = ""
    """sha256 of canonical ``{"tool", "input"}``; filled in when left empty."""
    tool_call_id: str | None = None
    idempotency_key: str | None = None
    side_effects: bool = False
    served_from_cache: bool = False
    approval: dict[str, Any] | None = None
    """A person's decision on the call: ``verdict`` (approved / rejected), ``by``,
    ``requested_at``, ``decided_at``, ``reason``, ``original_arguments`` (when the
    decision edited them; ``tool_input`` holds what ran), ``timed_out``, ``repeat_of``."""
    reused: dict[str, Any] | None = None
    """The earlier effect of the lineage whose result this call returned without
    running (``tool_name``, ``arguments``, ``idempotency_key``, ``branch_id``, ``step``, ``origin``)."""
    attempts: int = Field(default=1, ge=1)
    """Activity attempts the call took (v5; left out when 1: no retry)."""
    subagent: dict[str, Any] | None = None
    """A sub-agent call (v6): ``agent``, ``branch_id`` (the branch of this run that holds its
    run's checkpoints), ``workflow_id``, ``state`` (completed, failed, budget_exceeded,
    refused), ``steps``, ``model``, ``ledger`` (what its run spent: already in this
    checkpoint's ledger) and ``reason`` (why it did not complete)."""
    answered_from: str | None = None
    """`rewind redo` (v6): the call kept the recorded answer of this checkpoint's step."""
    redo_of: str | None = None
    """`rewind redo` (v6): the call ran again in place of the same call of this checkpoint."""
    dry_run: bool = False
    """A dry-run branch's side-effecting call (v7; left out when false): the effect did not
    happen; ``tool_output`` is the tool's dry_run answer, or a stub that says so."""
    mcp: dict[str, Any] | None = None
    """An MCP server's tool (v7; absent for @tool functions): ``server``, ``tool``,
    ``server_version``, ``annotations`` (as the server published them), ``idempotent`` and
    ``policy`` (what decided cache, effect, retry and approval)."""

    _utc = field_validator("called_at")(_to_utc)

    @model_serializer(mode="wrap")
    def _absent_when_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only calls that had a decision or a reuse carry the fields (v4), only retried ones attempts (v5),
        # only sub-agent calls and redone steps theirs (v6).
        data = handler(self)
        for name in ("approval", "reused", "subagent", "answered_from", "redo_of", "mcp"):
            if data.get(name) is None:
                data.pop(name, None)
        if data.get("attempts") == 1:
            data.pop("attempts")
        if not data.get("dry_run"):
            data.pop("dry_run", None)
        return data

    @model_validator(mode="after")
    def _fill_cache_key(self) -> ToolCallRecord:
        if not self.cache_key:
            self.cache_key = cache_key(self.tool_name, self.tool_input)
        return self

    @field_serializer("called_at")
    def _dump_called_at(self, value: datetime) -> str:
        return format_datetime(value)


class AgentCheckpoint(BaseModel):
    """The state of one agent run after one step, on one branch."""

    model_config = _STRICT

    checkpoint_id: str
    run_id: str
    parent_id: str | None = None
    branch_id: str = "main"
    step_index: int = Field(ge=0)
    step_label: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """OpenAI chat messages, kept verbatim as plain dicts."""
    agent_variables: dict[str, Any] = Field(default_factory=dict)
    tool_call_cache: list[ToolCallRecord] = Field(default_factory=list)
    created_at: AwareDatetime
    llm_tokens_used: int = Field(default=0, ge=0)
    llm_cost_usd: float = Field(default=0.0, ge=0)
    status: CheckpointStatus = "completed"
    error_info: dict[str, Any] | None = None
    schema_version: int = CURRENT_SCHEMA_VERSION
    # Ledger fields (schema v3).
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    model: str | None = None
    model_view: dict[str, Any] | None = None
    """When the context was compressed for this step: what was done to the
    messages so the model saw a shorter view (the full history stays in ``messages``)."""
    ledger: dict[str, Any] | None = None
    """``{"step": {...}, "branch": {...}, "total": {...}}``: tokens in/out, cost,
    model calls, tool calls, cache hits and tool time of this step, of the
    branch itself so far, and of its whole line (with what a fork inherited).
    A sub-agent's spending is in its caller's ledgers too (``subagent_*`` say how much)."""
    agent: dict[str, Any] | None = None
    """The declared agent this branch runs (v6; left out for a plain run): ``name``, and for a
    sub-agent's run ``called_by`` (the caller's checkpoint of the calling step),
    ``tool_call_id`` and ``depth``."""
    pipeline: dict[str, Any] | None = None
    """A pipeline's step (v8; left out for the agent loop's): which call of the pipeline's
    code it is: ``pipeline`` (its name), ``position`` (the order in which the code made its
    calls, from 0), ``label``, ``kind`` (llm, tool, agent, pipeline), ``digest`` (sha256 of what the call
    asked), ``attempt`` (a structured output's repair, 0 for the call itself) and, for a
    repaired answer, ``invalid`` (why the answer failed its schema). A LangGraph graph run's
    super-step says ``graph`` (MODULE:ATTR), ``superstep``, ``nodes`` and its ``calls`` instead
    (``code_run`` tells which)."""

    _utc = field_validator("created_at")(_to_utc)

    @model_serializer(mode="wrap")
    def _agent_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for name in ("agent", "pipeline"):
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _check_ids(self) -> AgentCheckpoint:
        validate_id("run", self.run_id)
        validate_id("branch", self.branch_id)
        expected = make_checkpoint_id(self.run_id, self.branch_id, self.step_index)
        if self.checkpoint_id != expected:
            raise ValueError(
                f"checkpoint_id {self.checkpoint_id!r} does not match run/branch/step; "
                f"it must be {expected!r}"
            )
        if self.parent_id is not None:
            parse_checkpoint_id(self.parent_id)
        if self.schema_version != CURRENT_SCHEMA_VERSION:
            # Older documents go through migrations.load_document first.
            raise ValueError(
                f"schema_version {self.schema_version} is not the current "
                f"{CURRENT_SCHEMA_VERSION}; load older documents with load_document()"
            )
        return self

    @field_serializer("created_at")
    def _dump_created_at(self, value: datetime) -> str:
        return format_datetime(value)


def final_answer(cp: AgentCheckpoint) -> str | None:
    """The run's final answer, if `cp` is the step that gave it: the loop's last step (labelled
    "final answer") or a pipeline's (labelled "result", none of its calls), whose last message
    is the assistant's answer."""
    ends = cp.step_label == "final answer" or (cp.step_label == "result" and cp.pipeline is None)
    if ends and cp.messages and cp.messages[-1].get("role") == "assistant":
        return cp.messages[-1].get("content") or ""
    return None


def stored_state(fields: dict[str, Any]) -> Literal["completed", "failed", "unfinished"]:
    """What a branch's newest checkpoint (its fields, as the store reads them) says of the run
    without Temporal: it failed, it gave its final answer (the loop's "final answer" step, a
    pipeline's "result"), or neither yet (running, waiting, paused, stopped or crashed: only
    Temporal can tell which)."""
    if fields.get("status") == "failed":
        return "failed"
    label = fields.get("step_label")
    if label == "final answer" or (label == "result" and not fields.get("pipeline")):
        return "completed"
    return "unfinished"


class CheckpointSummary(BaseModel):
    """The scalar facts of a checkpoint, read without rebuilding its messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint_id: str
    run_id: str
    branch_id: str
    parent_id: str | None
    step_index: int
    step_label: str
    status: CheckpointStatus
    llm_cost_usd: float
    llm_tokens_used: int
    created_at: datetime
    agent: dict[str, Any] | None = None  # a sub-agent's run: who called it (AgentCheckpoint.agent)


@dataclass(frozen=True)
class StepParts:
    """What one step adds to its parent, as plain JSON (``projector.record_parts``):
    the checkpoint's scalar fields, its new messages and tool records, its
    variables, and the branch's new system prompt (the first step of a fork
    that changed it). ``CheckpointStore.save_step`` stores a step from these."""

    scalars: dict[str, Any]
    new_messages: list[dict[str, Any]]
    new_tool_records: list[dict[str, Any]]
    agent_variables: dict[str, Any]
    system_prompt: str | None = None


def _plain(cp: AgentCheckpoint) -> dict[str, Any]:
    # Python mode keeps sets as sets so canonical_json can sort them; JSON
    # mode would emit them in hash order and break byte-for-byte determinism.
    return cp.model_dump(mode="python")


def code_run(call: Any) -> tuple[Literal["pipeline", "graph"], str | None] | None:
    """What a step's ``pipeline`` field says runs the run: ("graph", MODULE:ATTR) for a graph
    run's super-step, ("pipeline", NAME) for a pipeline's call, None for no such field."""
    if not isinstance(call, dict):
        return None
    return ("graph", call.get("graph")) if "superstep" in call else ("pipeline", call.get("pipeline"))


def code_kind(call: Any) -> Literal["pipeline", "graph"] | None:
    """``code_run``'s kind alone: "pipeline", "graph", or None."""
    found = code_run(call)
    return found[0] if found is not None else None


def dump_checkpoint(cp: AgentCheckpoint) -> bytes:
    """The canonical UTF-8 JSON bytes of a checkpoint (sorted keys, compact)."""
    try:
        return canonical_json(_plain(cp)).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {cp.checkpoint_id} holds a value that is not plain JSON ({exc}); "
            "checkpoints must contain only JSON data"
        ) from exc


def checkpoint_to_dict(cp: AgentCheckpoint) -> dict[str, Any]:
    """The checkpoint as the plain JSON dict that ``dump_checkpoint`` writes."""
    return json.loads(dump_checkpoint(cp))
