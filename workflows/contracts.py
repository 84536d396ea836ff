"""The data that crosses the workflow/activity boundary and the client API.

Both sides import this module, so it holds plain pydantic models only: no I/O,
no clocks, nothing that would make workflow code non-deterministic. One input
object per activity, so fields can be added later without breaking histories
of runs that are still in flight (new fields always get defaults).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful research agent. Use the tools you are given, cite what they "
    "returned, and finish with a concise answer."
)
DEFAULT_MODEL = "gpt-4o-mini"

RunState = Literal[
    "running",
    "completed",
    "failed",
    "budget_exceeded",
    "max_steps_reached",
]


class ToolSpec(BaseModel):
    """What the workflow needs to know about a tool (recorded once per run)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    side_effects: bool = False
    timeout_s: float = 60.0
    heartbeat_s: float = 5.0
    max_attempts: int = 3
    # Argument names left out of the cache key (volatile fields such as request ids).
    cache_ignore: list[str] = Field(default_factory=list)

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class RunLimits(BaseModel):
    max_steps: int = 50
    max_cost_usd: float | None = None


class LlmTuning(BaseModel):
    """Activity options of the model call; defaults suit a hosted API."""

    timeout_s: float = 120.0
    # A dead worker is noticed after this long, not after the whole timeout.
    heartbeat_s: float = 5.0
    max_attempts: int = 10
    initial_retry_s: float = 1.0
    max_retry_s: float = 60.0


class AgentInput(BaseModel):
    run_id: str
    task: str
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tools: list[str] = Field(default_factory=list)
    model: str = DEFAULT_MODEL
    branch_id: str = "main"
    limits: RunLimits = Field(default_factory=RunLimits)
    llm: LlmTuning = Field(default_factory=LlmTuning)
    variables: dict[str, Any] = Field(default_factory=dict)
    # How long a finished run waits for its last checkpoints to be mirrored;
    # past it the run completes anyway and `rewind mirror` catches up.
    mirror_drain_s: float = 60.0


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class LlmRequest(BaseModel):
    """One model call. The conversation so far is passed by reference.

    `transcript_head` names the stored transcript of the first
    `transcript_len` messages (None: empty); `new_messages` follow it.
    """

    run_id: str
    step: int
    model: str
    transcript_head: str | None = None
    transcript_len: int = 0
    new_messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)


class LlmResponse(BaseModel):
    message: dict[str, Any]  # verbatim as the API returned it
    usage: Usage
    cost_usd: float
    priced: bool = True
    finish_reason: str | None = None
    response_id: str | None = None
    # The stored transcript now covering the request's messages (not the reply).
    transcript_head: str | None = None
    transcript_len: int = 0


class DescribeToolsRequest(BaseModel):
    names: list[str]


class DescribeToolsResponse(BaseModel):
    tools: list[ToolSpec]
    missing: list[str] = Field(default_factory=list)


class ToolRequest(BaseModel):
    run_id: str
    branch_id: str
    step: int
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    idempotency_key: str | None = None


class ToolOutcome(BaseModel):
    """Result of one tool call. Errors the model can act on are data, not exceptions."""

    output: Any = None
    error: str | None = None
    error_kind: Literal["invalid_arguments", "tool_error"] | None = None
    started_at: datetime
    duration_ms: int
    # True when a side-effecting call was answered from its idempotency record.
    replayed_from_record: bool = False


class ToolCallLog(BaseModel):
    """One tool call as the run saw it (also what the checkpoint records)."""

    step: int
    tool_call_id: str
    tool_name: str
    arguments: Any
    output: Any = None
    error: str | None = None
    called_at: datetime
    duration_ms: int = 0
    cache_key: str | None = None
    idempotency_key: str | None = None
    side_effects: bool = False
    served_from_cache: bool = False


class AgentStatus(BaseModel):
    run_id: str
    branch_id: str
    state: RunState
    step: int = 0
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0
    llm_calls: int = 0
    tool_calls_done: int = 0
    tool_cache_hits: int = 0
    last_error: str | None = None
    final_answer: str | None = None
    # Steps whose checkpoint the live mirror has not confirmed yet.
    mirror_pending: int = 0
    mirror_error: str | None = None


class AgentResult(BaseModel):
    status: AgentStatus
    final_answer: str | None = None


class StepRecord(BaseModel):
    """What one step added to the run: the input of the `mirror_step` activity.

    It is recorded in history when the step ends, so the checkpoint of every
    step can be rebuilt from history alone (`rewind mirror`), byte for byte the
    same as the live mirror wrote it.
    """

    run_id: str
    branch_id: str
    step_index: int
    parent_id: str | None
    step_label: str
    new_messages: list[dict[str, Any]] = Field(default_factory=list)
    new_tool_calls: list[ToolCallLog] = Field(default_factory=list)
    agent_variables: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_tokens_used: int = 0
    llm_cost_usd: float = 0.0
    status: Literal["completed", "failed"] = "completed"
    error_info: dict[str, Any] | None = None


class MirrorAck(BaseModel):
    checkpoint_id: str
    written: bool
