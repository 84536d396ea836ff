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

from workflows.vocabulary.contracts import CarriedWrite, StepRecord, ToolCallLog, ToolSpec

# interrupt: a graph's interrupt(); node: a graph's node run as one activity (node-level durability)
CallKind = Literal["llm", "tool", "agent", "pipeline", "interrupt", "node"]


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
    ns: str = ""  # a subgraph's super-step: the subgraph's path (`outer/inner`)
    send: int | None = None  # a Send fan-out's task: its index (each task a step of its own)


class PipelineRecord(BaseModel):
    calls: list[RecordedCall] = Field(default_factory=list)
    supersteps: list[SuperStepMark] = Field(default_factory=list)  # a graph run's (empty for a pipeline)


class HandedCall(BaseModel):
    """A call a node made as workflow code before it needed an activity: answered with what it
    returned when the node, run again as an activity, makes it again (not paid twice)."""

    kind: Literal["llm", "tool"]
    key: str  # what was asked: a model call's messages and tools, a tool's name and arguments (JSON)
    message: dict[str, Any] | None = None  # a model call's assistant message
    tool: ToolCallLog | None = None  # a tool call's log


class GraphNodeRequest(BaseModel):
    """One node (or @task) of a graph run as an activity (`run_graph_node`)."""

    run_id: str
    graph: str  # "module:attribute", as the worker offers it
    node: str  # the node's name, or the @task's function name
    task: bool = False  # a functional-API @task (its arguments in `state`, as (args, kwargs))
    state: str  # the node's input, packed by LangGraph's serializer (workflows/graph/values.py)
    step: int = 0  # LangGraph's super-step (the node's config metadata says it)
    ns: str = ""  # LangGraph's checkpoint namespace of the node's task (an interrupt's id derives from it)
    resume: list[Any] = Field(default_factory=list)  # values of the node's interrupt()s, in order
    handed: list[HandedCall] = Field(default_factory=list)
    models: dict[str, str] = Field(default_factory=dict)  # a run's or fork's --model: by node, "*" for all
    prompt: str | None = None  # a fork's --prompt for this node: its model calls' system message
    store: str | None = None  # a graph with a Store: its contents, packed (workflows/graph/store.py)
    # Step records the activity writes as it starts (as a model call carries them: no mirror activity).
    checkpoints: list[StepRecord] = Field(default_factory=list)


class NodeModelCall(BaseModel):
    """A chat model call a node-level node made: what the ledger counts of it."""

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    priced: bool = True
    handed: bool = False  # answered from a call the node made before it needed an activity (not paid again)


class GraphNodeResult(BaseModel):
    update: str | None = None  # the node's return value, packed
    interrupts: str | None = None  # the node called interrupt(): LangGraph's Interrupts, packed
    calls: list[NodeModelCall] = Field(default_factory=list)
    seconds: float = 0.0
    store_writes: str | None = None  # what the node wrote to the graph's Store, packed, in order
    carried: CarriedWrite | None = None  # how the request's carried step records went


PipelineDescription.model_rebuild()
