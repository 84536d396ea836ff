"""`run_graph_node`: one node (or `@task`) of a graph run as an activity (node-level durability).

The node runs on the worker's own import of the graph's module (the module as the user wrote
it, imported once when the worker started), with the input LangGraph gave it in the run's
workflow and a config that holds what a node reads from LangGraph (its name and super-step,
interrupt()'s resume values, a Runtime). What it returns goes back through LangGraph's own
serializer (workflows/graph/values.py). Its model calls, of any LangChain chat model, are
made as the node makes them and counted per call (tokens from the model's usage metadata,
cost from the worker's price table) for the run's ledger; an OpenAI-compatible model gets the
run's `--model` and the node as its label (the scripted model answers by it). The calls the
node made as workflow code before it needed this activity are answered with what they
returned (`handed`), not made again.

A crash inside the node runs it again from its start (the activity's retry); the node's own
exception is the run's (GraphNodeFailed, not retried by Temporal: a node's `retry_policy`
retries it, as LangGraph does).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
import traceback
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.code.pipelines import PipelineRegistry
from activities.liveness.heartbeat import heartbeating
from activities.model.pricing import PriceTable
from activities.record.checkpoint_writer import CheckpointWriter, written_beside
from activities.record.live import CallEvents
from checkpoint_bridge.events.bus import Publisher
from workflows.graph.routing import chat_key, chat_result, end_node_calls, node_calls, tool_answer, tool_arguments, tool_key
from workflows.graph.store import WriteLog
from workflows.graph.values import pack, unpack
from workflows.vocabulary.code_runs import GraphNodeRequest, GraphNodeResult, HandedCall, NodeModelCall
from workflows.vocabulary.contracts import CarriedWrite, Usage
from workflows.vocabulary.events import tool_call_key
from workflows.vocabulary.wire import GRAPH_NODE_FAILED, LABEL_HEADER, RUN_GRAPH_NODE


class NodeCalls:
    """A node-level node's model and tool calls (runner.install routes LangChain's to it)."""

    def __init__(self, request: GraphNodeRequest, prices: PriceTable) -> None:
        self._request = request
        self._prices = prices
        self._handed: list[HandedCall] = list(request.handed)
        self.used: list[NodeModelCall] = []

    # -- model calls ---------------------------------------------------------------------
    async def achat(self, model: Any, messages: Any, stop: Any, run_manager: Any, kwargs: dict[str, Any],
                    original: Any) -> Any:
        handed = self._handed_chat(model, messages, stop, kwargs)
        if handed is not None:
            return handed
        messages, kwargs = self._as_the_run_asks(model, messages, kwargs)
        result = await original(model, messages, stop, run_manager, **kwargs)
        self._count(model, result)
        return result

    def chat(self, model: Any, messages: Any, stop: Any, run_manager: Any, kwargs: dict[str, Any],
             original: Any) -> Any:
        handed = self._handed_chat(model, messages, stop, kwargs)
        if handed is not None:
            return handed
        messages, kwargs = self._as_the_run_asks(model, messages, kwargs)
        result = original(model, messages, stop, run_manager, **kwargs)
        self._count(model, result)
        return result

    def _handed_chat(self, model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
        """A ChatOpenAI call the node made as workflow code already: its answer again."""
        if not _openai_compatible(model) or not any(h.kind == "llm" for h in self._handed):
            return None
        key = chat_key(model._get_request_payload(messages, stop=stop, **kwargs))
        for index, handed in enumerate(self._handed):
            if handed.kind == "llm" and handed.key == key and handed.message is not None:
                del self._handed[index]
                self.used.append(NodeModelCall(model=str(getattr(model, "model_name", "") or ""), handed=True))
                return chat_result(model, handed.message, {}, str(getattr(model, "model_name", "") or ""),
                                   self._request.run_id)
        return None

    def _as_the_run_asks(self, model: Any, messages: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """An OpenAI-compatible model's call with the run's (or the fork's) model, prompt and the
        node as its label; another provider's as the node makes it."""
        if not _openai_compatible(model):
            return messages, kwargs
        request = self._request
        chosen = request.models.get(request.node) or request.models.get("*")
        kwargs = dict(kwargs)
        if chosen:
            kwargs["model"] = chosen
        kwargs["extra_headers"] = {**(kwargs.get("extra_headers") or {}), LABEL_HEADER: request.node}
        if request.prompt is not None:
            from langchain_core.messages import SystemMessage

            messages = [SystemMessage(request.prompt), *(m for m in messages if getattr(m, "type", "") != "system")]
        return messages, kwargs

    def _count(self, model: Any, result: Any) -> None:
        """The call's tokens (LangChain's usage metadata, else the provider's token usage) and cost."""
        message = result.generations[0].message if getattr(result, "generations", None) else None
        metadata = getattr(message, "usage_metadata", None) or {}
        output = getattr(result, "llm_output", None) or {}
        usage = output.get("token_usage") or output.get("usage") or {}
        prompt = int(metadata.get("input_tokens") or usage.get("prompt_tokens") or usage.get("input_tokens") or 0)
        completion = int(metadata.get("output_tokens") or usage.get("completion_tokens")
                         or usage.get("output_tokens") or 0)
        response = getattr(message, "response_metadata", None) or {}
        name = str(output.get("model_name") or response.get("model_name") or response.get("model")
                   or getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__)
        cost, priced = self._prices.cost(name, Usage(prompt_tokens=prompt, completion_tokens=completion,
                                                      total_tokens=prompt + completion))
        self.used.append(NodeModelCall(model=name, prompt_tokens=prompt, completion_tokens=completion,
                                       total_tokens=prompt + completion, cost_usd=cost, priced=priced))

    # -- tool calls ----------------------------------------------------------------------
    async def atool(self, base_tool: Any, tool_input: Any, config: Any, kwargs: dict[str, Any], original: Any) -> Any:
        handed = self._handed_tool(base_tool, tool_input)
        if handed is not None:
            return handed[0]
        return await original(base_tool, tool_input, config, **kwargs)

    def tool(self, base_tool: Any, tool_input: Any, config: Any, kwargs: dict[str, Any], original: Any) -> Any:
        handed = self._handed_tool(base_tool, tool_input)
        if handed is not None:
            return handed[0]
        return original(base_tool, tool_input, config, **kwargs)

    def _handed_tool(self, base_tool: Any, tool_input: Any) -> tuple[Any] | None:
        if not any(h.kind == "tool" for h in self._handed):
            return None
        try:
            call_id, arguments = tool_arguments(base_tool, tool_input, self._request.node)
        except Exception:  # noqa: BLE001 - not a call the workflow could have made: the tool runs
            return None
        key = tool_key(base_tool.name, arguments)
        for index, handed in enumerate(self._handed):
            if handed.kind == "tool" and handed.key == key and handed.tool is not None:
                del self._handed[index]
                return (tool_answer(base_tool.name, call_id, handed.tool),)
        return None


def _openai_compatible(model: Any) -> bool:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - the extra installs it
        return False
    return isinstance(model, BaseChatOpenAI)


class GraphNodeActivities:
    """The node-level activity of the graphs this worker offers."""

    def __init__(self, pipelines: PipelineRegistry, prices: PriceTable, checkpoints: CheckpointWriter | None = None,
                 events: Publisher | None = None) -> None:
        self._pipelines = pipelines
        self._events = events  # the worker's bus: what the node writes to LangGraph's stream writer
        self._prices = prices
        self._checkpoints = checkpoints  # writes the step records a node's activity carries

    @activity.defn(name=RUN_GRAPH_NODE)
    async def run_graph_node(self, request: GraphNodeRequest) -> GraphNodeResult:
        async with heartbeating(request.node):
            # The carried step records are written beside the node, not before it.
            result, carried = await written_beside(self._run(request), self._write_carried(request)
                                                   if request.checkpoints else None)
        result.carried = carried
        return result

    async def _write_carried(self, request: GraphNodeRequest) -> CarriedWrite:
        if self._checkpoints is None:
            return CarriedWrite(error="this worker writes no checkpoints")
        return await self._checkpoints.save_carried(request.checkpoints)

    async def _run(self, request: GraphNodeRequest) -> GraphNodeResult:
        from langgraph.errors import GraphInterrupt

        what = f"{'@task' if request.task else 'node'} {request.node!r} of graph {request.graph}"
        events = CallEvents.of_activity(self._events, request.run_id, None,
                                        tool_call_key(0, request.node, activity.info().activity_id))
        code, store = self._code(request, what, lambda chunk: events.custom(chunk, source="graph"))
        calls = NodeCalls(request, self._prices)
        started = time.monotonic()
        token = node_calls(calls)
        try:
            out = await code()
        except GraphInterrupt as interrupted:
            return GraphNodeResult(interrupts=pack(interrupted.args[0], f"the interrupt of {what}"), calls=calls.used,
                                   seconds=time.monotonic() - started, store_writes=_writes(store))
        except Exception as exc:  # noqa: BLE001 - the node's own failure: the run's, in one line
            raise ApplicationError(f"{what} raised {type(exc).__name__}{_where(exc)}: {exc}", type=GRAPH_NODE_FAILED,
                                   non_retryable=True) from None
        finally:
            end_node_calls(token)
        try:
            update = pack(out, f"what {what} returned")
        except Exception as exc:  # noqa: BLE001 - PipelineError: names the node and the fix
            raise ApplicationError(str(exc), type=GRAPH_NODE_FAILED, non_retryable=True) from None
        return GraphNodeResult(update=update, calls=calls.used, seconds=time.monotonic() - started,
                               store_writes=_writes(store))

    def _code(self, request: GraphNodeRequest, what: str, writer: Any) -> tuple[Any, WriteLog | None]:
        """A coroutine function that runs the node (or task) on its input, as LangGraph would, and
        the run's Store it sees (its writes kept), when the graph has one."""
        found = self._pipelines.get(request.graph)
        graph = getattr(found, "graph", None)
        if graph is None:
            raise ApplicationError(f"{what}: this worker offers no graph {request.graph!r}", type=GRAPH_NODE_FAILED,
                                   non_retryable=True)
        state = unpack(request.state)
        store = WriteLog(request.store) if request.store is not None else None
        config = _config(request, store.store if store is not None else None, writer)
        if request.task:
            func = _task_function(sys.modules.get(self._pipelines.spec(request.graph).module), request.node)
            if func is None:
                raise ApplicationError(f"{what}: no such @task in the module on this worker", type=GRAPH_NODE_FAILED,
                                       non_retryable=True)
            args, kwargs = state

            async def task() -> Any:
                from langchain_core.runnables.config import var_child_runnable_config

                var_child_runnable_config.set(config)  # interrupt(), get_config() in the task
                if inspect.iscoroutinefunction(func):
                    return await func(*args, **kwargs)
                return await asyncio.to_thread(func, *args, **kwargs)

            return task, store
        node = _node_at(graph, request.node)
        if node is None:
            raise ApplicationError(f"{what}: the graph on this worker has no such node", type=GRAPH_NODE_FAILED,
                                   non_retryable=True)
        async def run() -> Any:
            from langchain_core.runnables.config import var_child_runnable_config

            var_child_runnable_config.set(config)  # get_config(), get_store() in a sync node's thread too
            return await node.bound.ainvoke(state, config)

        return run, store


def _config(request: GraphNodeRequest, store: Any, writer: Any) -> dict[str, Any]:
    """What a node reads of LangGraph's config: its name and super-step, its namespace, the
    resume values of its interrupt()s, a Runtime with the run's Store (no context from outside)
    and a stream writer whose writes are the run's live `custom` events."""
    from langgraph._internal._constants import (
        CONFIG_KEY_CHECKPOINT_NS,
        CONFIG_KEY_RUNTIME,
        CONFIG_KEY_SCRATCHPAD,
        CONFIG_KEY_SEND,
        CONFIG_KEY_THREAD_ID,
    )
    from langgraph._internal._scratchpad import PregelScratchpad
    from langgraph.pregel._algo import LazyAtomicCounter
    from langgraph.runtime import Runtime

    scratchpad = PregelScratchpad(step=request.step, stop=request.step + 10_000, call_counter=LazyAtomicCounter(),
                                  interrupt_counter=LazyAtomicCounter(), get_null_resume=lambda consume=False: None,
                                  resume=list(request.resume), subgraph_counter=LazyAtomicCounter())
    return {
        "configurable": {CONFIG_KEY_SCRATCHPAD: scratchpad, CONFIG_KEY_RUNTIME: Runtime(store=store, stream_writer=writer),
                         CONFIG_KEY_CHECKPOINT_NS: request.ns, CONFIG_KEY_THREAD_ID: request.run_id,
                         CONFIG_KEY_SEND: lambda writes: None},
        "metadata": {"langgraph_node": request.node, "langgraph_step": request.step},
        "recursion_limit": 10_000,
    }


def _writes(store: WriteLog | None) -> str | None:
    return pack(store.writes, "the node's writes to the graph's store") if store is not None and store.writes else None


def _node_at(graph: Any, path: str) -> Any:
    """The node at `path` (`subgraph/node` for a subgraph's), or None."""
    node = None
    for name in path.split("/"):
        node = getattr(graph, "nodes", {}).get(name)
        if node is None:
            return None
        graph = node.bound
    return node


def _task_function(module: Any, name: str) -> Any:
    from langgraph.func import _TaskFunction

    for value in vars(module).values() if module is not None else ():
        if isinstance(value, _TaskFunction):
            func = getattr(value.func, "_rewind_task", value.func)
            if func.__name__ == name:
                return func
    return None


def _where(exc: BaseException) -> str:
    """` in FUNCTION (FILE:LINE)`: the innermost frame outside LangChain, LangGraph and Rewind."""
    skip = ("/langchain", "/langgraph", "/activities/", "/workflows/", "/asyncio/", "/concurrent/")
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not any(s in f.filename for s in skip)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" in {frame.name} ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"


__all__ = ["GraphNodeActivities", "NodeCalls"]
