"""What a pipeline run carries across the workflow/activity boundary (plain data).

A pipeline is the user's own async function (`@pipeline` in a tools module),
run as workflow code by `PipelineWorkflow` (workflows/pipeline/workflow.py); every
model, tool and agent call it makes through its `ctx` is an activity and a
checkpointed step. These are the models both sides import (the run's own
input is `AgentInput.pipeline`, a `PipelineRun`, in contracts.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from workflows.vocabulary.contracts import ToolCallLog, ToolSpec

CallKind = Literal["llm", "tool", "agent", "pipeline", "interrupt"]  # interrupt: a graph's interrupt()


class PipelineSpec(BaseModel):
    """A pipeline a worker offers: where its code is, and what it takes."""

    name: str
    module: str  # the tools module that defines it (the workflow imports it in its sandbox)
    attribute: str  # the module attribute holding the @pipeline object
    description: str = ""
    model: str | None = None  # the pipeline's default model (None: the run's)
    parameters: dict[str, Any] = Field(default_factory=dict)  # JSON schema of its arguments
    # "graph": a LangGraph graph (compiled StateGraph or @entrypoint) the module defines at `attribute`,
    # run by workflows/graph/runner.py; its name is "module:attribute" and its arguments are its input.
    kind: Literal["pipeline", "graph"] = "pipeline"


class DescribePipelineRequest(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # A fork or rollback: its fork point, whose lineage's record comes back with the description
    # (one activity before the branch's first call instead of two).
    fork_point: str | None = None


class PipelineDescription(BaseModel):
    """What the worker says of a pipeline and its arguments (recorded in history once)."""

    spec: PipelineSpec | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)  # validated, as JSON
    error: str | None = None  # why the run cannot start: unknown pipeline, invalid arguments
    tools: list[ToolSpec] = Field(default_factory=list)  # every tool the worker holds
    record: "PipelineRecord | None" = None  # the fork point's record, when asked for


class PipelineCall(BaseModel):
    """Which call of the code a step is (AgentCheckpoint.pipeline): its position in the
    order the code made its calls, its label, its kind and a digest of its arguments."""

    pipeline: str
    position: int
    label: str
    kind: CallKind
    digest: str
    attempt: int = 0  # a structured-output repair: 1, 2, ... (0: the call itself)


class RecordedCall(BaseModel):
    """One call of the lineage's record and its answer: an llm call's assistant message, or a
    tool or agent call's log as the run logged it."""

    position: int
    attempt: int = 0
    kind: CallKind
    label: str
    digest: str
    step: int
    message: dict[str, Any] | None = None
    tool: ToolCallLog | None = None


class SuperStepMark(BaseModel):
    """A graph run's step: which super-step of the graph it checkpointed, after which nodes."""

    step: int
    superstep: int
    nodes: list[str] = Field(default_factory=list)


class PipelineRecord(BaseModel):
    calls: list[RecordedCall] = Field(default_factory=list)
    supersteps: list[SuperStepMark] = Field(default_factory=list)  # a graph run's (empty for a pipeline)


PipelineDescription.model_rebuild()
