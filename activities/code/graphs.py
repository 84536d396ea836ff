"""LangGraph graphs and LangChain tools in a tools module, as the worker offers them.

A module-level compiled graph (`builder.compile()`, an `@entrypoint` function) is a
graph the worker runs as a durable run (`rewind start --graph MODULE:ATTR`): it is
offered like a pipeline, named `MODULE:ATTR`, and run by workflows/graph/runner.py.

A LangChain tool the module defines at module level, or one a graph's `ToolNode`
holds, is a tool of the worker like an `@tool` function: a graph's tool calls run
as the worker's tool activities (the run's cache, idempotency keys, effects once
across branches, approvals). Its Rewind options (`side_effects=True`,
`needs_approval=...`, any keyword `@tool` takes) are declared once, next to the
graph, in the module's `rewind_tool_options` mapping (tool name -> options).

LangGraph and LangChain are optional (`pip install 'rewind-agents[langgraph]'`): a
module that does not import them has no graphs, and nothing here imports them first.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from dataclasses import dataclass
from typing import Any

import pydantic

from activities.tools.registry import RegisteredTool, tool
from workflows.vocabulary.errors import ToolRegistryError
from workflows.vocabulary.code_runs import PipelineSpec

# The module attribute that gives LangChain tools their Rewind options.
TOOL_OPTIONS = "rewind_tool_options"


@dataclass(frozen=True)
class RegisteredGraph:
    """A compiled LangGraph graph a tools module defines, offered as `module:attribute`."""

    graph: Any
    name: str
    description: str
    model: str | None = None
    is_rewind_pipeline = True  # a module of graphs alone is a tools module

    def spec(self, module: str, attribute: str) -> PipelineSpec:
        return PipelineSpec(name=self.name, module=module, attribute=attribute, description=self.description,
                            model=self.model, parameters=self._input_schema(), kind="graph")

    def checked(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The graph's input as given, once every key names one of its channels (LangGraph checks
        the values when the run starts; raises GraphInputError)."""
        if getattr(self.graph, "builder", None) is None:
            return dict(arguments)  # an @entrypoint takes its input as one value: this JSON object
        unknown = sorted(set(arguments) - set(self.channels()))
        if unknown:
            raise GraphInputError(f"{', '.join(unknown)} is not a channel of the graph")
        return dict(arguments)

    def channels(self) -> list[str]:
        """The graph's own channels (its state's keys), LangGraph's bookkeeping left out."""
        return [c for c in self.graph.channels if not c.startswith(("branch:", "__", "start:"))]

    def takes(self) -> str:
        return "{" + ", ".join(f'"{c}"' for c in self.channels()) + "}"

    def _input_schema(self) -> dict[str, Any]:
        try:
            return dict(self.graph.get_input_jsonschema())
        except Exception:  # noqa: BLE001 - a state pydantic cannot describe (typing.TypedDict before 3.12)
            return {"type": "object", "properties": {c: {} for c in self.channels()}}


class GraphInputError(ValueError):
    """A graph run's input that does not fit the graph."""


def graphs_in(module: Any, module_name: str) -> list[tuple[str, RegisteredGraph]]:
    """The module's compiled graphs, by attribute."""
    pregel = sys.modules.get("langgraph.pregel")
    if pregel is None:
        return []
    found = []
    for attribute, value in vars(module).items():
        if isinstance(value, pregel.Pregel) and not attribute.startswith("_"):
            doc = (getattr(module, "__doc__", None) or "").strip().split("\n\n")[0]
            found.append((attribute, RegisteredGraph(graph=value, name=f"{module_name}:{attribute}",
                                                     description=doc or f"LangGraph graph {attribute}")))
    if found:
        from workflows.graph.guard import node_options
        from workflows.graph.places import node_names, task_names
        from workflows.graph.routing import install

        install()
        # rewind_node_options checked as the worker starts: a node it names that no graph has is a typo.
        node_options(module, module_name, [n for _, g in found for n in node_names(g.graph)] + task_names(module))
    return found


def langchain_tools(module: Any, module_name: str) -> list[RegisteredTool]:
    """The module's LangChain tools (module level, and every graph's ToolNode's) as tools of
    the worker, with their options from the module's `rewind_tool_options`."""
    tools_module = sys.modules.get("langchain_core.tools")
    if tools_module is None:
        return []
    base = tools_module.BaseTool
    found: dict[str, Any] = {}
    for value in vars(module).values():
        if isinstance(value, base):
            found.setdefault(value.name, value)
    for _, graph in graphs_in(module, module_name):
        for node in graph.graph.nodes.values():
            for t in (getattr(node.bound, "tools_by_name", None) or {}).values():
                found.setdefault(t.name, t)
    options = getattr(module, TOOL_OPTIONS, None) or {}
    if not isinstance(options, dict):
        raise ToolRegistryError(f"{module_name}.{TOOL_OPTIONS} must be a dict: tool name -> @tool options "
                                "(e.g. {'save_report': {'side_effects': True}})")
    unknown = sorted(set(options) - set(found))
    if unknown:
        raise ToolRegistryError(f"{module_name}.{TOOL_OPTIONS} names {', '.join(unknown)}, which is not a LangChain "
                                f"tool of the module or of its graphs' ToolNodes (it has: {', '.join(sorted(found)) or 'none'})")
    return [_registered(t, dict(options.get(name) or {}), module_name) for name, t in sorted(found.items())]


def find_langchain(module: Any, module_name: str) -> tuple[list[RegisteredTool], bool]:
    """The ToolRegistry's finder (activities/tools/registry.py) for LangChain: the module's LangChain
    tools, and whether it offers a graph."""
    return langchain_tools(module, module_name), bool(graphs_in(module, module_name))


def _registered(base_tool: Any, options: dict[str, Any], module_name: str) -> RegisteredTool:
    try:
        return tool(_function_of(base_tool), name=base_tool.name, description=base_tool.description or None, **options)
    except TypeError as exc:
        raise ToolRegistryError(f"{module_name}.{TOOL_OPTIONS}[{base_tool.name!r}]: {exc}") from None


def _function_of(base_tool: Any) -> Any:
    """An async function with the tool's arguments that runs it (in the tool's activity)."""
    func = getattr(base_tool, "coroutine", None) or getattr(base_tool, "func", None)
    if func is not None and inspect.iscoroutinefunction(func):
        return func
    if func is not None:
        @functools.wraps(func)
        async def in_thread(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(func, *args, **kwargs)

        return in_thread
    schema = base_tool.tool_call_schema
    fields = schema.model_fields if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel) else {}

    async def run(**kwargs: Any) -> Any:
        return await base_tool.ainvoke(kwargs)

    params = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, annotation=f.annotation,
                                default=inspect.Parameter.empty if f.is_required() else f.default)
              for n, f in fields.items()]
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {n: f.annotation for n, f in fields.items()}
    run.__name__ = base_tool.name
    return run


__all__ = ["RegisteredGraph", "GraphInputError", "graphs_in", "langchain_tools", "find_langchain", "TOOL_OPTIONS"]
