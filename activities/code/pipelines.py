"""The `@pipeline` decorator and what the worker knows of the pipelines it offers.

A pipeline is an async function whose first argument is the run's `ctx`
(workflows/pipeline/workflow.py) and whose other arguments, with type hints, are the
run's input (`rewind start --pipeline NAME --input JSON`). It lives in a tools
module next to `@tool` functions; the worker finds it there, says what it is
and checks a run's arguments (`describe_pipeline`), and the workflow imports
the module inside its sandbox to run it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import pydantic
from temporalio import activity

from temporalio.exceptions import ApplicationError

from activities.code.graphs import GraphInputError, RegisteredGraph, graphs_in
from activities.tools.registry import ToolRegistry, _args_model, _json_schema, import_tool_module
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.blocks import BlockCall
from checkpoint_bridge.document.schema import ToolCallRecord
from checkpoint_bridge.projection.projector import log_of
from workflows.vocabulary.contracts import AgentSpec, ToolSpec
from workflows.vocabulary.defaults import PIPELINE_MAX_STEPS
from workflows.vocabulary.errors import CheckpointError, StoreUnavailableError, ToolRegistryError
from workflows.vocabulary.code_runs import (
    DescribePipelineRequest,
    PipelineDescription,
    PipelineRecord,
    PipelineSpec,
    RecordedCall,
    SuperStepMark,
)
from workflows.vocabulary.wire import CHECKPOINT_CONFLICT, DESCRIBE_PIPELINE


@dataclass(frozen=True)
class RegisteredPipeline:
    """A decorated pipeline: still callable directly with a ctx, plus what the worker needs."""

    fn: Callable[..., Awaitable[Any]]
    name: str
    description: str
    model: str | None
    arguments_model: type[pydantic.BaseModel]
    is_rewind_pipeline = True  # what the tool registry looks for in a module of pipelines alone

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return await self.fn(*args, **kwargs)

    def spec(self, module: str, attribute: str) -> PipelineSpec:
        return PipelineSpec(name=self.name, module=module, attribute=attribute, description=self.description,
                            model=self.model, parameters=_json_schema(self.arguments_model))

    def checked(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments validated, as JSON (raises pydantic.ValidationError)."""
        return self.arguments_model.model_validate(arguments).model_dump(mode="json")

    def takes(self) -> str:
        fields = self.arguments_model.model_fields
        return "{" + ", ".join(f'"{n}": {getattr(f.annotation, "__name__", str(f.annotation))}'
                               for n, f in fields.items()) + "}"


def pipeline(fn: Callable[..., Awaitable[Any]] | None = None, *, name: str | None = None, model: str | None = None,
             description: str | None = None) -> Any:
    """Declare an async function `(ctx, **arguments)` as a pipeline: your own orchestration
    code as a durable run whose every `ctx.llm` / `ctx.tool` / `ctx.agent` call is a
    checkpointed step (docs/pipelines.md).

    name: what `rewind start --pipeline NAME` calls it (default: the function's name).
    model: the model of its `ctx.llm` calls that name none (default: the run's `--model`).
    description: what `rewind tools` says of it (default: the docstring's first paragraph).
    """

    def wrap(f: Callable[..., Awaitable[Any]]) -> RegisteredPipeline:
        pipeline_name = name or f.__name__
        if not inspect.iscoroutinefunction(f):
            raise ToolRegistryError(f"pipeline {pipeline_name!r} must be an async function (async def)")
        params = list(inspect.signature(f).parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise ToolRegistryError(f"pipeline {pipeline_name!r}: its first argument is the run's ctx "
                                    f"(async def {f.__name__}(ctx, ...))")
        doc = inspect.getdoc(f) or ""
        return RegisteredPipeline(fn=f, name=pipeline_name, description=description or doc.split("\n\n")[0].strip(),
                                  model=model, arguments_model=_args_model(f, pipeline_name, skip=1,
                                                                           what="pipeline"))

    return wrap(fn) if fn is not None else wrap


class PipelineRegistry:
    """The pipelines one worker offers, by name, with where each is defined."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[RegisteredPipeline | RegisteredGraph, str, str]] = {}

    @classmethod
    def from_modules(cls, module_names: list[str]) -> "PipelineRegistry":
        registry = cls()
        for module_name in module_names:
            module = import_tool_module(module_name)
            for attribute, value in vars(module).items():
                if isinstance(value, RegisteredPipeline):
                    registry.add(value, module_name, attribute)
            for attribute, graph in graphs_in(module, module_name):
                registry.add(graph, module_name, attribute)
        return registry

    def add(self, found: RegisteredPipeline | RegisteredGraph, module: str, attribute: str) -> None:
        existing = self._found.get(found.name)
        if existing is not None and existing[0] != found:
            raise ToolRegistryError(f"two different pipelines are named {found.name!r} ({existing[1]} and {module}); "
                                    "pass name= to @pipeline to rename one")
        self._found[found.name] = (found, module, attribute)

    def names(self) -> list[str]:
        return sorted(self._found)

    def modules(self) -> list[str]:
        return sorted({module for _, module, _ in self._found.values()})

    def specs(self) -> list[PipelineSpec]:
        return [self.spec(name) for name in self.names()]

    def spec(self, name: str) -> PipelineSpec:
        found, module, attribute = self._found[name]
        return found.spec(module, attribute)

    def callable_specs(self, tool_names: list[str]) -> list[ToolSpec]:
        """The pipelines as another pipeline calls them (`ctx.pipeline`): each a declared agent
        whose child run is that pipeline. A pipeline named like a tool is left out (ctx.pipeline
        says so), so a tool's name always means the tool."""
        taken = set(tool_names)
        return [ToolSpec(name=spec.name, description=spec.description, parameters=spec.parameters,
                         agent=AgentSpec(name=spec.name, system_prompt="", model=spec.model, task_only=False,
                                         max_steps=PIPELINE_MAX_STEPS, pipeline=True))
                for spec in self.specs() if spec.name not in taken]

    def get(self, name: str) -> RegisteredPipeline | RegisteredGraph | None:
        found = self._found.get(name)
        return found[0] if found is not None else None


class PipelineActivities:
    """`describe_pipeline`: what a pipeline is, its arguments checked, the tools it may call and,
    for a fork or rollback, the calls it answers again from its lineage's record."""

    def __init__(self, pipelines: PipelineRegistry, tools: ToolRegistry, checkpoints: CheckpointStore | None = None) -> None:
        self._pipelines = pipelines
        self._tools = tools
        self._checkpoints = checkpoints

    async def _record(self, fork_point: str) -> PipelineRecord:
        """Every call recorded on the lineage up to the fork point, with its answer: read as a
        load of the fork point reads its chain, a few packs whatever the number of calls (a
        store that is down is retried by Temporal)."""
        store = self._checkpoints
        if store is None:
            raise ApplicationError("this worker has no checkpoint store to read a pipeline's record from",
                                   non_retryable=True)
        try:
            return await pipeline_record(store, fork_point)
        except StoreUnavailableError as exc:
            raise ApplicationError(f"checkpoint store: {exc}") from None
        except CheckpointError as exc:  # missing or corrupt: retrying cannot fix it
            raise ApplicationError(str(exc), type=CHECKPOINT_CONFLICT, non_retryable=True) from None

    @activity.defn(name=DESCRIBE_PIPELINE)
    async def describe_pipeline(self, request: DescribePipelineRequest) -> PipelineDescription:
        found = self._pipelines.get(request.name)
        if found is None:
            offered = ", ".join(self._pipelines.names()) or "none"
            if ":" in request.name:
                module = request.name.split(":", 1)[0]
                return PipelineDescription(error=f"no graph {request.name!r} on this worker (it offers: {offered}); "
                                                 f"start a worker with {module} in --tool-modules / REWIND_TOOL_MODULES, "
                                                 "whose module-level attribute is the compiled graph")
            return PipelineDescription(error=f"no pipeline named {request.name!r} on this worker (it offers: {offered}); "
                                             "start a worker whose --tool-modules define it with @pipeline")
        what = "graph" if isinstance(found, RegisteredGraph) else "pipeline"
        try:
            arguments = found.checked(request.arguments)
        except (pydantic.ValidationError, GraphInputError) as exc:
            problem = _first(exc) if isinstance(exc, pydantic.ValidationError) else str(exc)
            return PipelineDescription(error=f"the input of {what} {request.name!r} is invalid: {problem}; "
                                             f"it takes {found.takes()}")
        record = await self._record(request.fork_point) if request.fork_point is not None else None
        return PipelineDescription(spec=self._pipelines.spec(request.name), arguments=arguments,
                                   tools=[*self._tools.specs(), *self._pipelines.callable_specs(self._tools.names())],
                                   record=record)


async def pipeline_record(store: CheckpointStore, checkpoint_id: str) -> PipelineRecord:
    """The calls of the lineage of `checkpoint_id` (itself included) and their answers."""
    calls, supersteps = [], []
    for found in await store.recorded_calls(checkpoint_id):
        call, step = found.call, found.step
        if "superstep" in call:  # a graph's super-step: every call made in it
            supersteps.append(SuperStepMark(step=step, superstep=call["superstep"], nodes=call.get("nodes") or [],
                                            ns=call.get("ns") or "", send=call.get("send")))
            calls.extend(_graph_calls(call.get("calls") or [], found))
            continue
        recorded = RecordedCall(position=call["position"], attempt=call.get("attempt", 0), kind=call["kind"],
                                label=call["label"], digest=call["digest"], step=step)
        if recorded.kind == "llm":
            recorded.message = found.last_message
        elif found.last_tool_record is not None:
            recorded.tool = log_of(ToolCallRecord.model_validate(found.last_tool_record), step)
        calls.append(recorded)
    return PipelineRecord(calls=calls, supersteps=supersteps)


def _graph_calls(entries: list[dict[str, Any]], found: BlockCall) -> list[RecordedCall]:
    """A graph super-step's calls with their answers: a model call's message is in its entry,
    a tool call's log is the step's tool record of its id."""
    by_id = {r.get("tool_call_id"): r for r in found.records}
    out = []
    for entry in entries:
        recorded = RecordedCall(position=entry["position"], attempt=entry.get("attempt", 0), kind=entry["kind"],
                                label=entry["label"], digest=entry["digest"], step=found.step)
        if recorded.kind == "llm":
            recorded.message = entry.get("message")
        elif recorded.kind == "interrupt":
            recorded.message = {"resume": entry.get("resume")}
        elif recorded.kind == "node":  # a node-level node: its update (or interrupts), as LangGraph's serializer packed it
            recorded.message = {"update": entry.get("update"), "interrupts": entry.get("interrupts"),
                                "store_writes": entry.get("store_writes")}
        else:
            record = by_id.get(entry.get("tool_call_id"))
            if record is None:
                continue  # not in the step's records: the call runs again, live
            recorded.tool = log_of(ToolCallRecord.model_validate(record), found.step)
        out.append(recorded)
    return out


def _first(exc: pydantic.ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "input"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


__all__ = ["pipeline", "RegisteredPipeline", "PipelineRegistry", "PipelineActivities"]
