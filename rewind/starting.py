"""What `rewind start` and `POST /runs` start: one request, checked, made into a run.

A run is the agent loop (a task), a `@pipeline` with its input, or a LangGraph graph with
its input; each takes its own options (`StartRequest.check`). The command line and the
HTTP face (rewind/serve/) both build a `StartRequest` and call `start`, so the two start
the same run from the same words and refuse the same mistakes, each naming the mistake in
its own spelling (`--pipeline` on the command line, `"pipeline"` in a JSON body).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from rewind.settings.config import Settings
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from workflows.vocabulary.contracts import AgentInput

# How the command line spells each field in its errors.
FLAGS: Mapping[str, str] = {
    "task": "--task", "pipeline": "--pipeline", "graph": "--graph", "input": "--input", "agent": "--agent",
    "system_prompt": "--system-prompt", "tools": "--tools",
}


class StartRequest(BaseModel):
    """A run to start: `task` (the agent loop), or `pipeline` / `graph` with `input`."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = Field(None, description="what the agent should do (its first user message)")
    pipeline: str | None = Field(None, description="a @pipeline of the worker's tool modules (docs/pipelines.md)")
    graph: str | None = Field(None, description="MODULE:ATTR, a LangGraph graph a tools module of the worker "
                                                "defines (docs/langgraph.md)")
    input: dict[str, Any] | None = Field(None, description="a pipeline's arguments or a graph's input (default {})")
    agent: str | None = Field(None, description="a declared agent: its prompt, tools, model and max_steps, "
                                                "unless given here")
    system_prompt: str | None = Field(None, description="the agent's system prompt")
    tools: list[str] | None = Field(None, description="tool names (default: all the worker has)")
    model: str | None = Field(None, description="a model the endpoint serves, or script:NAME (default REWIND_MODEL)")
    run_id: str | None = Field(None, description="the run's id (default run-DATE-TIME-XXXXXX)")
    max_steps: int | None = Field(None, ge=1, description="steps at most")
    max_cost: float | None = Field(None, gt=0, description="pause before a step that would pass this many USD")
    max_tokens: int | None = Field(None, gt=0, description="pause before a step that would pass this many tokens")
    fast: bool = Field(False, description="model calls and read-only tools as local activities")

    def check(self, names: Mapping[str, str] = FLAGS) -> None:
        """Refuse a request no run could be: one line, each field spelled as `names` says."""
        n = {key: names.get(key, key) for key in FLAGS}
        code = self.graph or self.pipeline
        if self.task is not None and not self.task.strip():
            raise UsageError(f"{n['task']} is empty; say what the agent should do")
        if self.pipeline and self.graph:
            raise UsageError(f"give {n['pipeline']} NAME or {n['graph']} MODULE:ATTR, not both")
        if code and self.task:
            raise UsageError(f"give {n['task']} (an agent run) or {n['pipeline']} / {n['graph']} (your own code's "
                             "run), not both")
        if not code and not self.task:
            raise UsageError(f"say what to run: {n['task']} TEXT (an agent run), {n['pipeline']} NAME {n['input']} "
                             f"JSON (a pipeline run) or {n['graph']} MODULE:ATTR {n['input']} JSON (a LangGraph "
                             "graph's run)")
        if self.graph and ":" not in self.graph:
            raise UsageError(f"{n['graph']} {self.graph}: say MODULE:ATTR, the tools module and its compiled graph "
                             "(e.g. research:graph)")
        if code:
            loop_only = [n[key] for key in ("agent", "system_prompt", "tools") if getattr(self, key)]
            if loop_only:
                raise UsageError(f"{', '.join(loop_only)} belong to agent runs; a pipeline's or graph's code names "
                                 "its own prompts and tools")
        elif self.input is not None:
            raise UsageError(f"{n['input']} gives a pipeline's arguments or a graph's input; add {n['pipeline']} NAME "
                             f"or {n['graph']} MODULE:ATTR")
        if self.run_id:
            validate_id("run", self.run_id)
        if self.agent:
            validate_id("agent", self.agent)


@dataclass
class StartedRun:
    run_id: str
    agent_input: AgentInput
    handle: WorkflowHandle[Any, Any]
    # Set when no worker polls the task queue: the run waits for one (`rewind status` says the same).
    no_worker: str | None


async def run_input(client: Client, settings: Settings, request: StartRequest) -> AgentInput:
    """The AgentInput of a checked request (a declared agent's is read from a worker)."""
    from rewind.client import agent_input as declared_input
    from rewind.client import graph_input, new_run_id, pipeline_input
    from workflows.vocabulary.contracts import AgentInput, RunLimits
    from workflows.vocabulary.defaults import PIPELINE_MAX_STEPS

    if request.pipeline or request.graph:
        return (graph_input if request.graph else pipeline_input)(
            settings, request.graph or request.pipeline or "", request.input, run_id=request.run_id,
            model=request.model, fast=request.fast,
            limits=RunLimits(max_steps=request.max_steps or PIPELINE_MAX_STEPS, max_cost_usd=request.max_cost,
                             max_tokens=request.max_tokens),
        )
    assert request.task is not None
    if request.agent:
        # The agent's own prompt, tools, model and max_steps, as its declaration says, except what is given.
        found = await declared_input(
            client, settings, request.agent, request.task, run_id=request.run_id,
            system_prompt=request.system_prompt, tools=request.tools, model=request.model, fast=request.fast,
        )
        found.limits = found.limits.model_copy(update={k: v for k, v in {
            "max_steps": request.max_steps, "max_cost_usd": request.max_cost, "max_tokens": request.max_tokens}.items()
            if v is not None})
        return found
    return AgentInput(
        run_id=request.run_id or new_run_id(),
        task=request.task,
        tools=request.tools or [],
        model=request.model or settings.model,
        limits=RunLimits(max_steps=request.max_steps or RunLimits().max_steps, max_cost_usd=request.max_cost,
                         max_tokens=request.max_tokens),
        fast=request.fast,
        **({"system_prompt": request.system_prompt} if request.system_prompt else {}),
    )


async def start(client: Client, settings: Settings, request: StartRequest,
                names: Mapping[str, str] = FLAGS) -> StartedRun:
    """Check `request` (errors spelled as `names` says) and start the run. Check the stores
    first (rewind.stores.check_stores): a store that cannot work is one line naming its
    variable then, not a run that no worker takes."""
    from checkpoint_bridge.temporal.runs import no_worker
    from rewind.client import start_run

    request.check(names)
    agent_input = await run_input(client, settings, request)
    # Asked before the start, whose check of the tools needs a worker to answer.
    absent = await no_worker(client, settings.task_queue)
    handle = await start_run(client, settings, agent_input)
    return StartedRun(agent_input.run_id, agent_input, handle, absent)


__all__ = ["StartRequest", "StartedRun", "run_input", "start", "FLAGS"]
