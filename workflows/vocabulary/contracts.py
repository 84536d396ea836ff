"""The data that crosses the workflow/activity boundary and the client API.

Both sides import this module, so it holds plain pydantic models only: no I/O,
no clocks, nothing that would make workflow code non-deterministic. One input
object per activity, so fields can be added later without breaking histories
of runs that are still in flight (new fields always get defaults).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from workflows.vocabulary import said_once
from workflows.vocabulary.defaults import DEFAULT_MODEL
from workflows.vocabulary.status import (  # re-exported: a run's status is a contract too
    SUBAGENT_LEDGER_FIELDS,
    AgentResult,
    AgentStatus,
    EffectRef,
    Ledger,
    PendingApproval,
    RunLimits,
    RunState,
    SubagentState,
    ToolRequest,
)
from workflows.vocabulary.text import scrub_text

# What a run gets without a system prompt of its own: neutral, whatever its tools.
# An agent declared with `subagent(...)` brings its own (`rewind start --agent NAME`).
DEFAULT_SYSTEM_PROMPT = (
    "You are a careful agent. Use the tools you are given when they help, rely on what "
    "they return, and finish with a concise answer."
)
# How deep sub-agents may nest: a top-level run is depth 0, a sub-agent it calls depth 1.
DEFAULT_MAX_AGENT_DEPTH = 3

# What a branch does with a side-effecting tool call (`--side-effects`): "run" (as any
# run: a new effect runs, one its lineage already caused follows the tool's on_repeat),
# "reuse" (a repeat of the lineage's effect always returns the recorded result; a new
# effect runs) or "dry-run" (no effect runs: a repeat returns the recorded result, any
# other call is answered by the tool's dry_run implementation, or by a stub saying the
# effect was not executed).
SideEffectMode = Literal["run", "reuse", "dry-run"]
SIDE_EFFECT_MODES: tuple[str, ...] = ("run", "reuse", "dry-run")


class AgentSpec(BaseModel):
    """A declared agent (`subagent(...)` in a tools module): what a run of it starts
    with. As a tool of another agent, each call runs it as a child workflow."""

    name: str
    system_prompt: str
    tools: list[str] = Field(default_factory=list)
    model: str | None = None  # None: the calling run's model
    max_steps: int = Field(default=10, ge=1)
    # The call's arguments are {"task": TEXT} and TEXT is the sub-agent's user message;
    # False: a declared argument model, rendered by `task_template` (or as JSON).
    task_only: bool = True
    task_template: str | None = None
    # How long one call may run before its caller stops waiting (None: as long as it takes).
    timeout_s: float | None = None
    # A pipeline called by another (`ctx.pipeline`): its child run is a PipelineWorkflow whose
    # input is the call's arguments (validated by the worker that describes it).
    pipeline: bool = False


class McpToolInfo(BaseModel):
    """An MCP server's tool: where it comes from and why it got its durability. Recorded
    with the run's tool specs, so replay, resume and `rewind show` never ask the server."""

    server: str  # the configuration's name for the server (the tool is offered as SERVER__TOOL)
    tool: str  # the tool's own name on the server
    server_version: str = ""  # what the server said it is at initialize: "name version"
    # The tool's annotations as the server published them (readOnlyHint, destructiveHint, ...).
    annotations: dict[str, Any] = Field(default_factory=dict)
    # A side effect that may be sent again after a request may have reached the server.
    idempotent: bool = False
    # One line per decision: what it decided and what said so (an annotation, the MCP default, an override).
    policy: list[str] = Field(default_factory=list)


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
    # Run as a local activity on the workflow's own worker (see AgentInput.fast).
    fast: bool = False
    # A person decides before a call runs (side-effecting tools only): "always",
    # or "by_arguments" (the tool's own rule, asked by the check_tool_call activity).
    approval: Literal["never", "always", "by_arguments"] = "never"
    # How long a call waits for a decision (None: as long as it takes), and the
    # decision taken when that time is up.
    approval_timeout_s: float | None = None
    approval_default: Literal["approve", "reject"] = "reject"
    # What makes two calls the same effect (workflows/loop/effects.py): these argument
    # names (None: all arguments, as the cache key sees them).
    effect_key: list[str] | None = None
    # A call repeating an effect its lineage already caused (before a fork point,
    # or in steps a rollback discarded): return the recorded result ("reuse"),
    # ask a person ("ask"), or run it again under a new key ("run").
    on_repeat: Literal["reuse", "ask", "run"] = "reuse"
    # The tool declares a dry_run implementation (`@tool(side_effects=True, dry_run=fn)`):
    # what a dry-run branch calls instead of the tool.
    dry_run: bool = False
    # Set for a sub-agent: a call runs this agent as a child workflow, not an activity.
    agent: AgentSpec | None = None
    # Set for an MCP server's tool (activities/tools/mcp/): its server, annotations and policy.
    mcp: McpToolInfo | None = None

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


# -- approvals and effects of the lineage -----------------------------------------

class LineageEffect(EffectRef):
    """A side effect of the lineage, with the result a repeat is answered with."""

    output: Any = None


class ApprovalDecision(BaseModel):
    """The input of the decide_tool_call update."""

    tool_call_id: str
    verdict: Literal["approve", "reject"]
    by: str
    reason: str | None = None
    # When the person decided (the client's clock); the run may take it later.
    decided_at: datetime | None = None
    # Run with these arguments instead (approve only); checked against the tool's schema.
    arguments: dict[str, Any] | None = None
    # A graph run's interrupt() (approve only): the value it returns in the node (default: true).
    value: Any = None


class ApprovalRecord(BaseModel):
    """A decision as the tool record keeps it."""

    verdict: Literal["approved", "rejected"]
    by: str
    requested_at: datetime
    decided_at: datetime
    reason: str | None = None
    # When the run took the decision, if later than decided_at (no worker was running, say).
    applied_at: datetime | None = None
    # The arguments the model asked for, when the decision changed them.
    original_arguments: dict[str, Any] | None = None
    timed_out: bool = False
    repeat_of: EffectRef | None = None
    # A graph run's interrupt(): what it returns in the node (`rewind approve --value JSON`).
    value: Any = None


class ToolCheckRequest(BaseModel):
    """The input of check_tool_call: is this call valid, does it need a decision, and
    which of `candidates` (arguments of the lineage's effects of this tool) is the same effect?"""

    tool_name: str
    arguments: dict[str, Any]
    candidates: list[dict[str, Any]] = Field(default_factory=list)


class ToolCheck(BaseModel):
    invalid: str | None = None  # why the arguments fail the tool's schema
    needs_approval: bool = False
    # The arguments as the tool's validator reads them ("450" -> 450), as JSON.
    arguments: dict[str, Any] | None = None
    # The first candidate with the same effect identity, compared on validated values.
    repeat_index: int | None = None


class LlmTuning(BaseModel):
    """Activity options of the model call; defaults suit a hosted API."""

    timeout_s: float = 120.0
    # A dead worker is noticed after this long, not after the whole timeout.
    heartbeat_s: float = 5.0
    # A provider's 429s, 5xx, timeouts and dropped connections are retried for
    # `retry_for_s` in all (the call's schedule-to-close), not for a count of
    # attempts: ten attempts at 1 s -> 60 s backoff last ~4 minutes, shorter than
    # many real outages, and a run of forty minutes should not fail for one.
    # `max_attempts` 0 means no count limit; a rejection (400, 401, ...) is never retried.
    max_attempts: int = Field(default=0, ge=0)
    retry_for_s: float = Field(default=1800.0, gt=0)
    initial_retry_s: float = 1.0
    max_retry_s: float = 60.0
    # Context window: tokens the conversation may take (None: the model's
    # known window minus room for the reply and the tool schemas).
    context_tokens: int | None = None
    # Compression keeps the system message, every user message and the last
    # `keep_last` messages intact, and shortens older tool results first.
    keep_last: int = 6
    tool_result_chars: int = 400
    # Sampling options sent with every model call when set (None: the endpoint's default);
    # an experiment varies them across branches.
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: int | None = None


class SubagentCaller(BaseModel):
    """Where a sub-agent run was called from: its caller's branch, step and tool call."""

    branch_id: str
    step: int
    tool_call_id: str
    tool_name: str
    workflow_id: str  # the caller's workflow (signalled when this run pauses or waits)


class SubagentCall(BaseModel):
    """A sub-agent call as the caller's tool record keeps it: where its run lives,
    how it ended, what it cost (already in the caller's ledger)."""

    agent: str
    branch_id: str
    workflow_id: str
    state: Literal["running", "completed", "failed", "budget_exceeded", "cancelled", "refused"] = "running"
    steps: int = 0
    model: str | None = None
    ledger: "Ledger | None" = None
    reason: str | None = None  # why it did not complete


# How long a run stopped from outside (a rollback cancels it) still waits for
# the checkpoints it recorded: the rollback waits for the run to end for
# longer than this (checkpoint_bridge/branches/branching.py STOP_TIMEOUT_S) before it
# terminates it, and writes its markers once it ended.
STOPPED_MIRROR_DRAIN_S = 20.0


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
    # How long a run waits for a worker that has each named tool before it
    # fails naming the missing ones (no worker polls that tool's queue).
    tool_wait_s: float = 300.0
    # How long a finished run waits for its last checkpoints to be mirrored;
    # past it the run completes anyway (status.mirror_error says so) and
    # `rewind mirror` catches up. Long enough for a store outage or a few
    # killed workers: a run that completes is on record, not only in history
    # (60 s ended runs of the seeded soak with their last steps unstored).
    mirror_drain_s: float = 600.0
    # Continue-as-new once history passes this many bytes (or when Temporal
    # suggests it), well before Temporal's 50 MB limit.
    history_limit_bytes: int = 4 * 1024 * 1024
    # Set when this workflow continues a logical run: after continue-as-new,
    # or as a fork / rollback seeded from a checkpoint.
    resume: "LoopState | None" = None
    # The fast path: model calls and read-only tools run as local activities on
    # the workflow's own worker (no round trip through the server per call),
    # and their results are recorded in history when the workflow task
    # completes, at least every `fast_record_s` seconds. What it gives up: a
    # worker crash runs the calls of the unrecorded last moments again (a paid
    # model call included); see "Fast path" in docs/operations.md.
    fast: bool = False
    fast_record_s: float = Field(default=2.0, gt=0)
    # The client registered Rewind's search attributes and started the workflow
    # with them: the workflow keeps RewindState up to date (workflows/loop/run_index.py).
    indexed: bool = False
    # -- agents and sub-agents ------------------------------------------------
    # The declared agent this run runs (`rewind start --agent NAME`, or a sub-agent call).
    agent: str | None = None
    # Set on a sub-agent's run: who called it (its checkpoints say so too).
    called_by: "SubagentCaller | None" = None
    # 0 for a top-level run; a sub-agent runs one deeper than its caller, and a call
    # that would pass `max_agent_depth` is refused as a tool error.
    depth: int = Field(default=0, ge=0)
    max_agent_depth: int = Field(default=DEFAULT_MAX_AGENT_DEPTH, ge=0)
    # Per sub-agent name, what to run it with instead of its declaration ("model",
    # "system_prompt"): an experiment's variant or a redo; passed down the tree.
    subagent_overrides: dict[str, dict[str, str]] = Field(default_factory=dict)
    # Side effects the caller's lineage already caused, for a sub-agent's first run
    # (a fork or rollback seeds them through `resume` instead).
    lineage_effects: list["LineageEffect"] = Field(default_factory=list)
    # What side-effecting calls do on this branch (SideEffectMode); handed down to sub-agents.
    side_effects: SideEffectMode = "run"
    # A pipeline run (PipelineWorkflow): the user's own code in place of the loop.
    pipeline: "PipelineRun | None" = None

    @field_validator("task", "system_prompt")
    @classmethod
    def _storable_text(cls, value: str) -> str:
        return scrub_text(value)


class PipelineRun(BaseModel):
    """`AgentInput.pipeline`: this run executes a @pipeline (workflows/pipeline/workflow.py), not the loop."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)  # as given; the worker validates them
    # Overrides by call label (a fork, an experiment's variant): the system prompt, the model.
    # ("*": every call's model).
    prompts: dict[str, str] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    # ctx.state keys set by forks of the lineage (`--set`), each at its fork point: when the
    # code, run again, has been answered every recorded call up to that step.
    state_sets: list["StateSet"] = Field(default_factory=list)
    # `rewind redo`: the calls recorded at these steps run again; every other call of the
    # lineage is answered from the record.
    redo_steps: list[int] = Field(default_factory=list)
    # What ctx.random() draws from: set when the run starts and kept by its forks and by
    # continue-as-new, so code run again against the record draws the same numbers.
    seed: int | None = None
    # Set when the run continues as new: the last step of its record that comes from before
    # this workflow (a fork's point; -1 for a run started afresh). The calls recorded after it
    # are this workflow's own, so code asking another call there changed under the run.
    own_after_step: int | None = None
    # `rewind redo` of a graph's step: the branch starts at the step before it and its record
    # reaches to this checkpoint (the head it was redone from): the steps after the redone one
    # are answered from it where the graph asks the same calls again.
    record_until: str | None = None
    # A graph run's later invocations on its thread (the Agent Server API's runs on a thread,
    # docs/agent-server.md): each a new revision or fork of the line that carries every turn
    # given so far, the earlier ones answered from the record like the rest of it.
    turns: list["GraphTurn"] = Field(default_factory=list)


class GraphTurn(BaseModel):
    """A graph run invoked again on its thread: LangGraph's `graph.ainvoke(input)` (or
    `graph.ainvoke(Command(...))`) on the same thread, once the invocation before it has ended
    or waits on an interrupt() that this turn answers instead of a person."""

    after_step: int  # the thread's head when the turn was given: it applies after the record up to there
    input: dict[str, Any] | None = None
    command: dict[str, Any] | None = None  # LangGraph's Command: resume, update, goto


class StateSet(BaseModel):
    after_step: int
    values: dict[str, Any] = Field(default_factory=dict)


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
    # The digest under which an earlier call of this run stored the same `tools`
    # (LlmResponse.tools_ref): sent instead of the list, which is then empty.
    tools_ref: str | None = None
    temperature: float | None = None
    seed: int | None = None
    context_tokens: int | None = None
    keep_last: int = 6
    tool_result_chars: int = 400
    # A pipeline's structured output (`ctx.llm(output=Model)`): OpenAI's response_format.
    response_format: dict[str, Any] | None = None
    # A pipeline call's label, sent as the X-Rewind-Label header (the scripted model answers by it).
    label: str | None = None
    # False: a call of its own (a pipeline's), not a turn of a stored conversation: its messages
    # are not written to the transcript store (the step record and the checkpoint hold them).
    transcript: bool = True
    # The records of the steps that ended since the run's last checkpoint write, in step
    # order: the call writes them beside its own work, so a step needs no mirror activity
    # (CARRIED_CHECKPOINTS_PATCH). Like the mirror's input, they are in history from here on,
    # which is what `rewind mirror` rebuilds them from.
    checkpoints: "list[StepRecord]" = Field(default_factory=list)

    # The wire form (workflows/vocabulary/said_once.py): options at their defaults left out, and the
    # carried records without what the request says already (their messages are the ones
    # it sends). `rewind delete` reads run_id, the transcript fields and new_messages raw.
    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = said_once.drop_defaults(handler(self), _REQUEST_DEFAULTS)
        said_once.compact_carried(data)
        return data

    @model_validator(mode="before")
    @classmethod
    def _whole_again(cls, data: Any) -> Any:
        return said_once.whole_carried(data) if isinstance(data, dict) else data


class LlmResponse(BaseModel):
    message: dict[str, Any]  # as the API returned it, secrets redacted (rewind/redaction.py)
    usage: Usage
    cost_usd: float
    priced: bool = True
    finish_reason: str | None = None
    # The provider's id of the response: on the call's trace span (gen_ai.response.id), not
    # in history, where nothing reads it (50 bytes a step).
    response_id: str | None = Field(default=None, exclude=True)
    # Where this call's tool schemas are stored (payload store): later calls may send this instead.
    tools_ref: str | None = None
    # The stored transcript now covering the request's messages (not the reply).
    transcript_head: str | None = None
    transcript_len: int = 0
    # When the context was compressed: what was done to fit it (see context_window).
    model_view: dict[str, Any] | None = None
    attempt: int = 1  # Temporal's attempt number of the activity that answered
    # How the request's carried checkpoints went (None: it carried none).
    checkpoints: "CarriedWrite | None" = None
    # Why the answer may not be what the run asked for: the scripted offline model answered from
    # its demo agent's canned turns (the model names no script of it).
    note: str | None = None

    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = said_once.drop_defaults(handler(self), _RESPONSE_DEFAULTS)
        said_once.compact_response(data)
        return data

    @model_validator(mode="before")
    @classmethod
    def _whole_again(cls, data: Any) -> Any:
        return said_once.whole_response(data) if isinstance(data, dict) else data


class CarriedWrite(BaseModel):
    """What became of the step records a model call carried: the first `written` are
    stored; the rest (error says why) are for the mirror activity to write."""

    written: int = 0
    error: str | None = None

    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return said_once.drop_defaults(handler(self), {"error": None})


class DescribeToolsRequest(BaseModel):
    names: list[str]
    # DescribeToolsWorkflow: how long to wait for a worker holding a named tool.
    wait_s: float = 10.0


class DescribeToolsResponse(BaseModel):
    tools: list[ToolSpec]
    missing: list[str] = Field(default_factory=list)
    # The worker's @pipeline functions, as another pipeline calls them (ctx.pipeline), when every
    # tool is asked for (`rewind tools` lists them); never a tool a run is given.
    pipelines: list[ToolSpec] = Field(default_factory=list)


class ToolOutcome(BaseModel):
    """Result of one tool call. Errors the model can act on are data, not exceptions."""

    output: Any = None
    # A large read-only output is stored in the payload store and named here
    # instead (checkpoint_bridge/checkpoints/outputs.py); `output` is then None.
    output_ref: str | None = None
    error: str | None = None
    error_kind: Literal["invalid_arguments", "tool_error"] | None = None
    started_at: datetime
    duration_ms: int
    # True when a side-effecting call was answered from its idempotency record.
    replayed_from_record: bool = False
    attempt: int = 1  # Temporal's attempt number of the activity that answered
    # The step records the request carried (ToolRequest.checkpoints): how many it wrote.
    checkpoints: CarriedWrite | None = None

    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return said_once.drop_defaults(handler(self), _OUTCOME_DEFAULTS)


class ToolCallLog(BaseModel):
    """One tool call as the run saw it (also what the checkpoint records)."""

    step: int
    tool_call_id: str
    tool_name: str
    arguments: Any
    output: Any = None
    output_ref: str | None = None  # the output by reference (see ToolOutcome)
    error: str | None = None
    called_at: datetime
    duration_ms: int = 0
    cache_key: str | None = None
    idempotency_key: str | None = None
    side_effects: bool = False
    served_from_cache: bool = False
    approval: ApprovalRecord | None = None  # the decision, when the call needed one
    reused: EffectRef | None = None  # the earlier effect whose result this call returned
    attempts: int = 1  # activity attempts the answer took (1: no retry)
    subagent: SubagentCall | None = None  # a sub-agent call: its run and how it ended
    # `rewind redo`: this call kept the recorded answer of the source step (checkpoint id),
    # or (`redo_of`) ran again in place of that step's call.
    answered_from: str | None = None
    redo_of: str | None = None
    # A dry-run branch's side-effecting call: the effect did not happen (the output is
    # the tool's dry_run answer, or a stub that says so).
    dry_run: bool = False
    # An MCP server's tool: its server, the annotations that decided its policy, the server's version.
    mcp: McpToolInfo | None = None


class SubagentNotice(BaseModel):
    """The input of the `subagent_state` signal: a sub-agent run tells its caller
    that it waits (for approval, for a raised budget) or goes on again."""

    tool_call_id: str
    state: str
    reason: str | None = None


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
    step_ledger: Ledger = Field(default_factory=Ledger)
    branch_ledger: Ledger = Field(default_factory=Ledger)
    total_ledger: Ledger = Field(default_factory=Ledger)  # including what a fork inherited
    # Only on the first step of a fork that changed the system prompt: the
    # system message the branch uses from here on.
    system_prompt: str | None = None
    # What the model saw, when the context was compressed for this step.
    model_view: dict[str, Any] | None = None
    # The declared agent the branch runs, and for a sub-agent who called it (AgentCheckpoint.agent).
    agent: dict[str, Any] | None = None
    # A pipeline's step: which call of its code this is (AgentCheckpoint.pipeline, PipelineCall).
    pipeline: dict[str, Any] | None = None

    # -- the wire form: what this step added, once ---------------------------------
    # A StepRecord rides in Temporal history (the mirror's input), next to the tool
    # results it repeats. Its serialized form leaves out what it says twice and the
    # validator puts it back, so every reader sees whole records: a tool call's
    # output equal to its tool message's content, zero ledger fields, and a branch
    # ledger equal to the total (nothing inherited). `_WIRE` says what was left
    # out; records without it (older histories) are read as they are.

    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        wire: dict[str, Any] = {}
        contents = {m.get("tool_call_id"): m.get("content") for m in data.get("new_messages") or []
                    if isinstance(m, dict) and m.get("role") == "tool" and isinstance(m.get("content"), str)}
        outputs = []
        for index, call in enumerate(data.get("new_tool_calls") or []):
            how = _output_in_message(call.get("output"), contents.get(call.get("tool_call_id")))
            if how is not None:
                call = {**call, "output": None}
                outputs.append([index, how])
            data["new_tool_calls"][index] = {k: v for k, v in call.items() if not _is_default(_CALL_DEFAULTS, k, v)}
        if outputs:
            wire["outputs"] = outputs
        if data.get("branch_ledger") is not None and data.get("branch_ledger") == data.get("total_ledger"):
            del data["branch_ledger"]
            wire["branch_is_total"] = True
        # The rest of what the record says twice (workflows/vocabulary/said_once.py).
        said_once.compact_record(data, wire, _RECORD_DEFAULTS)
        if wire:
            data[_WIRE] = wire
        return data

    @model_validator(mode="before")
    @classmethod
    def _whole_again(cls, data: Any) -> Any:
        if not isinstance(data, dict) or _WIRE not in data:
            return data
        data = dict(data)
        wire = data.pop(_WIRE)
        data = said_once.whole_record(data, wire)
        outputs = [(index, how) for index, how in wire.get("outputs") or [] if how != "ref"]
        if outputs:
            contents = {m.get("tool_call_id"): m.get("content") for m in data.get("new_messages") or []
                        if isinstance(m, dict) and m.get("role") == "tool"}
            calls = list(data.get("new_tool_calls") or [])
            for index, how in outputs:
                call = calls[index]
                content = contents[call["tool_call_id"]]
                calls[index] = {**call, "output": content if how == "text" else json.loads(content)}
            data["new_tool_calls"] = calls
        return data


_WIRE = said_once.WIRE
# Fields of a tool call with a plain default (None, False, 0, 1 attempt): left out when they hold it.
_CALL_DEFAULTS = said_once.plain_defaults(ToolCallLog)


# Fields of a record with a plain default (None, {}, "completed", ...): left out when they hold it.
_RECORD_DEFAULTS = said_once.plain_defaults(StepRecord)


def _is_default(defaults: dict[str, Any], name: str, value: Any) -> bool:
    # `type` too: 0, 0.0 and False are equal in Python but not the same JSON.
    return name in defaults and value == defaults[name] and type(value) is type(defaults[name])


def _output_in_message(output: Any, content: str | None) -> str | None:
    """How a tool call's output can be read back from its tool message's content
    ("text", "json"), or None when it cannot be exactly (see tool_calls.tool_message)."""
    if output is None or content is None:
        return None
    if isinstance(output, str):
        return "text" if output == content else None
    try:
        canonical = json.dumps(output, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        again = json.dumps(json.loads(content), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return "json" if canonical == again else None


class MirrorAck(BaseModel):
    checkpoint_id: str
    written: bool


class MirrorBatch(BaseModel):
    """The input of `mirror_steps`: step records of one branch workflow, in step order."""

    records: list[StepRecord]


class LoopState(BaseModel):
    """The loop's durable state: what continue-as-new carries into the next
    run, and what a fork or rollback is seeded with."""

    step: int = 0
    parent_checkpoint: str | None = None  # checkpoint id of the last recorded step
    transcript_head: str | None = None
    transcript_len: int = 0
    unsent: list[dict[str, Any]] = Field(default_factory=list)
    totals: Ledger = Field(default_factory=Ledger)
    inherited: Ledger = Field(default_factory=Ledger)  # totals at the fork point
    tool_cache: dict[str, Any] = Field(default_factory=dict)  # cache key -> output
    pending_records: list[StepRecord] = Field(default_factory=list)
    last_error: str | None = None
    continued_as_new: int = 0
    # A fork that changed the system prompt: its first step record carries the
    # new prompt, so the branch's checkpoints show the conversation it had.
    announce_system_prompt: str | None = None
    # Side effects this branch's lineage already caused (seeded by fork and
    # rollback): a call with the same effect identity follows its tool's on_repeat.
    lineage_effects: list[LineageEffect] = Field(default_factory=list)
    # `rewind redo`: the step to answer again before the loop goes on (seeded by redo).
    redo: "RedoPlan | None" = None
    # A fork or rollback that keeps its source's tools: the specs the source was described.
    # The first model call goes out with them while the run describes its tools again
    # (the answer is what the run uses from then on; a tool no worker has still fails it).
    tool_specs: list[ToolSpec] | None = None
    # `rewind resume`: the revision this one resumes (`main.r0`), named in the workflow's memo so
    # that a second bulk resume skips the run.
    resumed: str | None = None

    # The wire form: the tool cache's outputs by reference as one dict (workflows/vocabulary/said_once.py).
    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        said_once.compact_cache(data)
        return data

    @model_validator(mode="before")
    @classmethod
    def _whole_again(cls, data: Any) -> Any:
        return said_once.whole_cache(data) if isinstance(data, dict) else data


class RedoPlan(BaseModel):
    """Answer the tool calls of one recorded step again: every call from its recorded
    answer except `call_id`, which runs again (with the changed prompt or model)."""

    step: int
    source_checkpoint: str  # the recorded step, run:branch:step
    message: dict[str, Any]  # its assistant message, whose tool calls are answered
    answers: dict[str, ToolCallLog]  # call id -> the recorded answer
    call_id: str
    system_prompt: str | None = None
    model: str | None = None
    # What the recorded step's model call cost (the redo branch inherits it, not re-spent).
    model_ledger: Ledger = Field(default_factory=Ledger)
    # What the step's label says in parentheses (default: `redo of CALL`); `rewind resume`
    # runs every failed call of the step again (the calls `answers` leaves out), and says so.
    label: str | None = None


# What the wire forms of these leave out while it holds its default (said_once.drop_defaults).
_REQUEST_DEFAULTS = said_once.plain_defaults(LlmRequest, (
    "tools", "tools_ref", "temperature", "seed", "context_tokens", "keep_last", "tool_result_chars",
    "response_format", "label", "transcript", "checkpoints"))
_RESPONSE_DEFAULTS = said_once.plain_defaults(LlmResponse)
_OUTCOME_DEFAULTS = said_once.plain_defaults(ToolOutcome)
LlmRequest.model_rebuild()
LlmResponse.model_rebuild()
PipelineRun.model_rebuild()
AgentInput.model_rebuild()
SubagentCall.model_rebuild()


class CompensationRequest(BaseModel):
    """Undo one side effect of a rolled-back step (input of `compensate_tool`)."""

    tool_name: str
    arguments: dict[str, Any]
    output: Any = None
    original_key: str
    # Its own key: the compensation itself runs at most once.
    compensation_key: str
    run_id: str
    branch_id: str
    step: int


class CompensationOutcome(BaseModel):
    tool_name: str
    original_key: str
    compensation_key: str
    status: Literal["compensated", "already_compensated", "no_compensation", "failed"]
    output: Any = None
    error: str | None = None

