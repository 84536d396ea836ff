"""A run's status: what the live `status` query answers, what a finished run returns
(`AgentResult`), and what `rewind status` and `rewind pending` show.

The workflow contracts (workflows/vocabulary/contracts.py) re-export every name here: this
module exists so that a reader of a run's status builds these models only, not
the other contracts' (`rewind status` of a finished run decodes its result into
them and nothing else).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, computed_field, model_serializer

RunState = Literal[
    "running",
    "completed",
    "failed",
    # A budget (steps, cost, tokens) would be exceeded by the next step: the
    # run is paused, resumable with `rewind continue` (a `raise_limits` signal).
    "budget_exceeded",
    # Stopped from outside (e.g. `rewind rollback` of a running branch).
    "cancelled",
    # A tool call waits for a person's decision (`rewind approve` / `rewind reject`).
    "waiting_for_approval",
]


class EffectRef(BaseModel):
    """Where a side effect was caused: enough to find its record."""

    tool_name: str
    arguments: dict[str, Any]
    idempotency_key: str
    branch_id: str
    step: int | None = None  # None: a step before the fork point (the checkpoint does not say which)
    tool_call_id: str | None = None
    # "ancestor": before the fork point on a parent branch (or this branch's own
    # earlier line); "discarded": in a step a rollback invalidated; "sibling": on another branch
    # of the run (known to a branch forked with --side-effects reuse, which reuses those too).
    origin: Literal["ancestor", "discarded", "sibling"] = "ancestor"


class RunLimits(BaseModel):
    # A budget of nothing would pause before the first step, or (for cost and
    # tokens, which are checked against the previous step) after one paid step.
    max_steps: int = Field(default=50, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    # How long a run whose budget ran out waits for `rewind continue` before
    # it ends (still with state budget_exceeded).
    budget_pause_s: float = 7 * 24 * 3600.0


class Ledger(BaseModel):
    """Tokens, cost and tool use: of one step, of a branch, of a run."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    unpriced_calls: int = 0
    tool_calls: int = 0
    cache_hits: int = 0
    tool_time_ms: int = 0
    # Attempts beyond the first (Temporal retries) of model calls and tool calls.
    # Left out of a checkpoint's ledger while 0 (runs from before they were counted).
    model_retries: int = 0
    tool_retries: int = 0
    # Side-effecting calls answered without running: with the result of an effect the
    # lineage already caused (reused), or on a dry-run branch. Left out while 0.
    reused_calls: int = 0
    dry_run_calls: int = 0
    # Sub-agent calls, and the part of the fields above their runs spent (already
    # included there: a parent's totals are its whole tree's). Left out while 0.
    subagent_calls: int = 0
    subagent_prompt_tokens: int = 0
    subagent_completion_tokens: int = 0
    subagent_total_tokens: int = 0
    subagent_cost_usd: float = 0.0
    subagent_model_calls: int = 0
    subagent_tool_calls: int = 0

    # Sums of fields already validated (ints and floats, no constraints) need no validation
    # again: model_construct, as these run several times a step in the workflow.
    def plus(self, other: "Ledger") -> "Ledger":
        mine, theirs = self.__dict__, other.__dict__
        return Ledger.model_construct(**{k: mine[k] + theirs[k] for k in _LEDGER_FIELDS})

    def minus(self, other: "Ledger") -> "Ledger":
        mine, theirs = self.__dict__, other.__dict__
        return Ledger.model_construct(**{k: mine[k] - theirs[k] for k in _LEDGER_FIELDS})

    def rolled_up(self) -> "Ledger":
        """What a sub-agent run's totals add to its caller's ledger: every amount,
        and the same amounts again as the caller's sub-agent part."""
        return self.model_copy(update={
            "subagent_calls": self.subagent_calls + 1,
            "subagent_prompt_tokens": self.prompt_tokens, "subagent_completion_tokens": self.completion_tokens,
            "subagent_total_tokens": self.total_tokens, "subagent_cost_usd": self.cost_usd,
            "subagent_model_calls": self.model_calls, "subagent_tool_calls": self.tool_calls,
        })

    def own(self) -> "Ledger":
        """This ledger without what sub-agents spent (their runs count it themselves)."""
        return self.model_copy(update={
            "prompt_tokens": self.prompt_tokens - self.subagent_prompt_tokens,
            "completion_tokens": self.completion_tokens - self.subagent_completion_tokens,
            "total_tokens": self.total_tokens - self.subagent_total_tokens,
            "cost_usd": self.cost_usd - self.subagent_cost_usd,
            "model_calls": self.model_calls - self.subagent_model_calls,
            "tool_calls": self.tool_calls - self.subagent_tool_calls,
            **{name: Ledger.model_fields[name].default for name in SUBAGENT_LEDGER_FIELDS},
        })


SUBAGENT_LEDGER_FIELDS = tuple(name for name in Ledger.model_fields if name.startswith("subagent_"))
_LEDGER_FIELDS = tuple(Ledger.model_fields)


class ToolRequest(BaseModel):
    run_id: str
    branch_id: str
    step: int
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    idempotency_key: str | None = None
    # Run the tool's dry_run implementation, not the tool (a dry-run branch): no effect.
    dry_run: bool = False
    # Return the output itself, never by reference (a pipeline's ctx.tool hands it to its code).
    inline_output: bool = False
    # A pipeline's step records (StepRecord's JSON) that this call writes beside the tool, as a
    # model call writes the ones it carries (LlmRequest.checkpoints); ToolOutcome says how many.
    checkpoints: list[dict[str, Any]] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _said_once(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The run_tool input as history holds it: its options left out while at their defaults
        # (validation gives them back). Not a pending approval's: `rewind pending --json` shows every field.
        data = handler(self)
        if type(self) is not ToolRequest:
            return data
        return {k: v for k, v in data.items() if not (k in _REQUEST_DEFAULTS and v == _REQUEST_DEFAULTS[k]
                                                       and type(v) is type(_REQUEST_DEFAULTS[k]))}


_REQUEST_DEFAULTS: dict[str, Any] = {"idempotency_key": None, "dry_run": False, "inline_output": False,
                                     "checkpoints": []}


class PendingApproval(ToolRequest):
    """A tool call waiting for a decision (what `rewind status` and `rewind pending` show):
    the call as its tool activity would get it, and when and why it waits."""

    inline_output: bool = Field(default=False, exclude=True)  # how the call returns: not the person's concern
    checkpoints: list[dict[str, Any]] = Field(default_factory=list, exclude=True)  # nor what it writes beside

    requested_at: datetime
    deadline: datetime | None = None  # when approval_default is taken
    on_timeout: Literal["approve", "reject"] = "reject"
    # Set when the call asks because it repeats an effect of its lineage (on_repeat="ask").
    repeat_of: EffectRef | None = None


def _from_ledger(name: str, kind: type) -> Any:
    """A computed field of AgentStatus that reads one total of its ledger."""
    return computed_field(property(lambda self: getattr(self.ledger, name)), return_type=kind)  # type: ignore[call-overload]


class SubagentState(BaseModel):
    """One sub-agent call of the step in flight, as its caller's status shows it."""

    tool_call_id: str
    agent: str
    branch_id: str
    state: str  # running, waiting_for_approval, budget_exceeded, completed, failed, ...
    reason: str | None = None


class PipelineCallState(BaseModel):
    """One call of a pipeline's code, as its status shows it while a call is in flight."""

    position: int
    label: str
    kind: str  # llm, tool, agent, pipeline
    state: str  # running, completed, failed
    step: int | None = None  # the step that records it, once completed


class AgentStatus(BaseModel):
    run_id: str
    branch_id: str
    state: RunState
    step: int = 0
    model: str
    # Totals of this branch, including what it inherited at its fork point.
    ledger: Ledger = Field(default_factory=Ledger)
    step_ledger: Ledger = Field(default_factory=Ledger)
    branch_ledger: Ledger = Field(default_factory=Ledger)  # spent on this branch itself
    budget_reason: str | None = None
    limits: RunLimits = Field(default_factory=RunLimits)
    continued_as_new: int = 0
    last_error: str | None = None
    final_answer: str | None = None
    # Steps whose checkpoint the live mirror has not confirmed yet.
    mirror_pending: int = 0
    mirror_error: str | None = None
    # Tool calls waiting for a decision, in the order they asked.
    pending_approvals: list[PendingApproval] = Field(default_factory=list)
    # The sub-agent calls of the current step: which completed and which did not.
    subagents: list["SubagentState"] = Field(default_factory=list)
    # A pipeline's calls started since none was in flight (an asyncio.gather's group): which
    # completed, at which step, and which still run; kept until the next call after them starts.
    pipeline_calls: list[PipelineCallState] = Field(default_factory=list)

    # The totals under the names `rewind status` shows, read from `ledger`
    # (computed, so never out of step with it; still in every JSON dump).
    prompt_tokens = _from_ledger("prompt_tokens", int)
    completion_tokens = _from_ledger("completion_tokens", int)
    total_tokens = _from_ledger("total_tokens", int)
    cost_usd = _from_ledger("cost_usd", float)
    unpriced_calls = _from_ledger("unpriced_calls", int)
    llm_calls = _from_ledger("model_calls", int)
    tool_calls_done = _from_ledger("tool_calls", int)
    tool_cache_hits = _from_ledger("cache_hits", int)


class AgentResult(BaseModel):
    status: AgentStatus
    final_answer: str | None = None


__all__ = ["RunState", "EffectRef", "RunLimits", "Ledger", "SUBAGENT_LEDGER_FIELDS", "ToolRequest", "PendingApproval",
           "SubagentState", "PipelineCallState", "AgentStatus", "AgentResult"]
