"""How a LangChain chat model or tool call reaches a graph run (the routing).

LangChain's base classes are patched once per process (`install`): inside a graph run's
workflow (a context variable says which run, `active_graph_run`) a chat model call and a
tool's `ainvoke` are the run's calls (workflows/graph/runner.py); inside a node-level node's
activity they go to that activity's handler (`node_calls`: answered from what the node asked
before it needed the activity, counted for the ledger); everywhere else (the user's own
process, the tool activities of this worker) LangChain is untouched. The helpers here turn a
call into the key of its answer and a run's answer back into what LangChain returns.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from workflows.graph.guard import install_guard
from workflows.vocabulary.errors import PipelineError, ToolCallFailed

# The graph run whose workflow code is running (None: not inside a graph run).
_RUNNER: ContextVar[Any] = ContextVar("rewind_graph_runner", default=None)
# A node-level node's activity: what handles its model and tool calls (None: not inside one).
_NODE_CALLS: ContextVar[Any] = ContextVar("rewind_node_calls", default=None)
_installed = False


def install() -> None:
    """Route LangChain chat models and tools through the graph run they are called in (once
    per process; outside a graph run's workflow the original methods run, or a node-level
    node's activity's handler of them: `node_calls`)."""
    global _installed
    if _installed:
        return
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools import BaseTool, StructuredTool, Tool

    install_guard()
    agenerate = BaseChatModel._agenerate_with_cache
    generate = BaseChatModel._generate_with_cache
    tool_invoke = BaseTool.invoke

    async def _agenerate_with_cache(self: Any, messages: Any, stop: Any = None, run_manager: Any = None,
                                    **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is not None:
            return await runner.chat(self, messages, stop, kwargs)
        handler = _NODE_CALLS.get()
        if handler is not None:
            return await handler.achat(self, messages, stop, run_manager, kwargs, agenerate)
        return await agenerate(self, messages, stop, run_manager, **kwargs)

    def _generate_with_cache(self: Any, messages: Any, stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is not None:
            runner.sync_call("calls the model synchronously (.invoke)", "await llm.ainvoke(...)")
        handler = _NODE_CALLS.get()
        if handler is not None:
            return handler.chat(self, messages, stop, run_manager, kwargs, generate)
        return generate(self, messages, stop, run_manager, **kwargs)

    def routed_ainvoke(original: Any) -> Any:
        # A tool class's own ainvoke (StructuredTool's runs a sync tool's invoke in a thread): in a
        # graph run's workflow every tool's ainvoke is the run's call of that tool, sync or async.
        async def ainvoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
            runner = _RUNNER.get()
            if runner is not None:
                return await runner.tool(self, input)
            handler = _NODE_CALLS.get()
            if handler is not None:
                return await handler.atool(self, input, config, kwargs, original)
            return await original(self, input, config, **kwargs)

        return ainvoke

    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is not None:
            runner.sync_call(f"calls tool {self.name!r} synchronously (.invoke)", "await tool.ainvoke(...) (or a ToolNode)")
        handler = _NODE_CALLS.get()
        if handler is not None:
            return handler.tool(self, input, config, kwargs, tool_invoke)
        return tool_invoke(self, input, config, **kwargs)

    BaseChatModel._agenerate_with_cache = _agenerate_with_cache  # type: ignore[method-assign]
    BaseChatModel._generate_with_cache = _generate_with_cache  # type: ignore[method-assign]
    for cls in (BaseTool, StructuredTool, Tool):
        if "ainvoke" in vars(cls):
            cls.ainvoke = routed_ainvoke(vars(cls)["ainvoke"])  # type: ignore[method-assign]
    BaseTool.invoke = invoke  # type: ignore[method-assign]
    _installed = True


def node_calls(handler: Any) -> Any:
    """Hand a node-level node's model and tool calls to `handler` (its activity's: `achat`,
    `chat`, `atool`, `tool`) from here; reset with `_NODE_CALLS.reset(token)`."""
    return _NODE_CALLS.set(handler)


def end_node_calls(token: Any) -> None:
    _NODE_CALLS.reset(token)


def active_graph_run() -> Any:
    """The graph run whose node code is running here (None: anywhere else)."""
    return _RUNNER.get()



def running(runner: Any) -> Any:
    """`runner`'s graph run is the one whose workflow code runs from here; reset with `stopped(token)`."""
    return _RUNNER.set(runner)


def stopped(token: Any) -> None:
    _RUNNER.reset(token)


def chat_result(model: Any, message: dict[str, Any], usage: dict[str, Any], model_name: str, run_id: str) -> Any:
    """The ChatResult a ChatOpenAI call returns, made of the run's answer to it."""
    completion = {"id": f"rewind-{run_id}", "object": "chat.completion", "created": 0, "model": model_name,
                  "choices": [{"index": 0, "message": message,
                               "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                  "usage": usage}
    return model._create_chat_result(completion)


def chat_key(payload: dict[str, Any]) -> str:
    """What a model call asked (its messages and tools), as the key of its answer."""
    return json.dumps([payload.get("messages"), payload.get("tools")], sort_keys=True, default=str)


def tool_key(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps([name, arguments], sort_keys=True, default=str)


def tool_arguments(base_tool: Any, tool_input: Any, node: str) -> tuple[str | None, dict[str, Any]]:
    """(the tool call's id when a ToolNode calls it, its arguments) of a LangChain tool's input."""
    if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call":
        return tool_input.get("id"), dict(tool_input.get("args") or {})
    if isinstance(tool_input, dict):
        return None, dict(tool_input)
    if isinstance(tool_input, str) and len(base_tool.args) == 1:
        return None, {next(iter(base_tool.args)): tool_input}
    raise PipelineError(f"node {node!r} calls tool {base_tool.name!r} with a {type(tool_input).__name__}: give its "
                        "arguments as a dict")


def tool_answer(name: str, call_id: str | None, log: Any) -> Any:
    """What a LangChain tool's ainvoke returns for the run's call of it (`log`): its output (or
    ToolCallFailed), or a ToolMessage when a ToolNode called it with a tool call."""
    from langchain_core.messages import ToolMessage

    if call_id is None:
        if log.error is not None:
            raise ToolCallFailed(f"{name}: {log.error}")
        return log.output
    failed = log.error is not None or (log.approval is not None and log.approval.verdict == "rejected")
    content = log.error if log.error is not None else log.output
    return ToolMessage(content=content if isinstance(content, str) else json.dumps(content), name=name,
                       tool_call_id=call_id, status="error" if failed else "success")


def restricted_call(exc: BaseException) -> str | None:
    """What the workflow sandbox refused (`datetime.datetime.now`, `open`), when `exc` is its refusal."""
    if type(exc).__name__ != "RestrictedWorkflowAccessError":
        return None
    what = getattr(exc, "qualified_name", "") or str(exc).split(" from inside", 1)[0].removeprefix("Cannot access ")
    return what.removesuffix(".__call__").removeprefix("__builtins__.").removeprefix("builtins.")


__all__ = ["install", "node_calls", "end_node_calls", "active_graph_run", "running", "stopped", "chat_result",
           "chat_key", "tool_key", "tool_arguments", "tool_answer", "restricted_call"]
