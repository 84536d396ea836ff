"""A LangGraph graph run as PipelineWorkflow code: the graph unchanged, its I/O through Rewind.

The compiled graph (a `StateGraph` or an `@entrypoint`) runs inside the workflow,
on LangGraph's own Pregel loop. Its nodes' code is workflow code; what leaves the
process goes through the run, as a pipeline's `ctx` calls do:

- a LangChain chat model call (`await llm.ainvoke(...)`, `bind_tools`, ...) made by
  an OpenAI-compatible model (`ChatOpenAI`) is one model call of Rewind's model
  path (an activity: retries, context fitting, tokens, cost, budgets, `--model`);
- a LangChain tool call (a `ToolNode`'s, or `await some_tool.ainvoke(...)` in a
  node) is a call of the worker's tool of that name (an activity: the run's cache,
  idempotency keys, effects once across branches, approvals).

Both are answered from the record in a fork, a rollback or a redo, exactly as a
pipeline's calls are (workflows/pipeline/workflow.py). A checkpoint is written per super-step
(graph API) or per task (functional API), from the checkpointer LangGraph itself
calls (`RecordingSaver`): labelled by the node(s), its `messages` the graph's
`messages` channel, its `agent_variables` the other channels as JSON, and its
`pipeline` field the super-step and the calls made in it (their answers, which a
fork answers again).

The routing is a patch of LangChain's base classes that acts only inside a graph
run's workflow (a context variable says which run); everywhere else (the user's
own process, the tool activities of this worker) LangChain is untouched.
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from temporalio import workflow

from workflows.vocabulary.errors import PipelineError, ToolCallFailed

# The graph run whose workflow code is running (None: not inside a graph run).
_RUNNER: ContextVar["GraphRunner | None"] = ContextVar("rewind_graph_runner", default=None)
_installed = False

# Channels that are LangGraph's own bookkeeping, not the graph's state.
_INTERNAL = ("branch:", "__", "start:")


def install() -> None:
    """Route LangChain chat models and tools through the graph run they are called in (once
    per process; outside a graph run's workflow the original methods run)."""
    global _installed
    if _installed:
        return
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.tools import BaseTool

    agenerate = BaseChatModel._agenerate_with_cache
    generate = BaseChatModel._generate_with_cache
    tool_ainvoke = BaseTool.ainvoke
    tool_invoke = BaseTool.invoke

    async def _agenerate_with_cache(self: Any, messages: Any, stop: Any = None, run_manager: Any = None,
                                    **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is None:
            return await agenerate(self, messages, stop, run_manager, **kwargs)
        return await runner.chat(self, messages, stop, kwargs)

    def _generate_with_cache(self: Any, messages: Any, stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is None:
            return generate(self, messages, stop, run_manager, **kwargs)
        raise PipelineError(f"node {current_node()!r} calls the model synchronously (.invoke): in a Rewind graph "
                            "run a node calls models with `await llm.ainvoke(...)` (make the node `async def`)")

    async def ainvoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is None:
            return await tool_ainvoke(self, input, config, **kwargs)
        return await runner.tool(self, input)

    def invoke(self: Any, input: Any, config: Any = None, **kwargs: Any) -> Any:
        runner = _RUNNER.get()
        if runner is None:
            return tool_invoke(self, input, config, **kwargs)
        raise PipelineError(f"node {current_node()!r} calls tool {self.name!r} synchronously (.invoke): in a Rewind "
                            "graph run a node calls tools with `await tool.ainvoke(...)` (or a ToolNode)")

    BaseChatModel._agenerate_with_cache = _agenerate_with_cache  # type: ignore[method-assign]
    BaseChatModel._generate_with_cache = _generate_with_cache  # type: ignore[method-assign]
    BaseTool.ainvoke = ainvoke  # type: ignore[method-assign]
    BaseTool.invoke = invoke  # type: ignore[method-assign]
    _installed = True


def active_graph_run() -> "GraphRunner | None":
    """The graph run whose node code is running here (None: anywhere else)."""
    return _RUNNER.get()


def current_node() -> str:
    """The node (or task) whose code is running, as LangGraph's config says."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    return str((config.get("metadata") or {}).get("langgraph_node") or "graph")


def to_json(value: Any) -> Any:
    """A channel's value as JSON: messages as chat messages, models dumped, the rest as is
    (what JSON cannot hold becomes its repr, so a checkpoint is always written)."""
    from langchain_core.messages import BaseMessage, convert_to_openai_messages

    if isinstance(value, BaseMessage):
        return convert_to_openai_messages(value)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def chat_messages(value: Any) -> list[dict[str, Any]]:
    """The `messages` channel as chat messages (dicts with a role)."""
    from langchain_core.messages import convert_to_openai_messages

    if not isinstance(value, list):
        return []
    return [m for m in convert_to_openai_messages(value) if isinstance(m, dict)]


def graph_state(values: dict[str, Any]) -> dict[str, Any]:
    """The graph's own channels but `messages`, as JSON (a checkpoint's agent_variables)."""
    return {k: to_json(v) for k, v in values.items() if k != "messages" and not k.startswith(_INTERNAL)}


def _inline_executor(loop: Any) -> Any:
    """The workflow's event loop runs a sync function (a sync node, a conditional edge's
    router) where LangGraph hands it to a thread: inline, as workflow code."""

    def run_in_executor(executor: Any, func: Any, *args: Any) -> Any:
        future = loop.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # noqa: BLE001 - the node's own error, raised where it awaits
            future.set_exception(exc)
        return future

    return run_in_executor


class GraphRunner:
    """One graph run inside PipelineWorkflow (`run`, whose call_chat, tool_log, record_super_step
    and graph_interrupted it calls): wraps the graph's nodes, keeps the super-step's
    calls, and records a step when LangGraph checkpoints a super-step."""

    def __init__(self, run: Any, name: str, graph: Any, *, fork_superstep: int,
                 sets: list[tuple[int, str, dict[str, Any]]], module: Any = None) -> None:
        self._run = run
        self.name = name
        self._graph = graph
        # A functional-API graph (an @entrypoint): a step per @task it runs, not per super-step.
        self.functional = getattr(graph, "builder", None) is None
        self._module = module
        self._finished: list[tuple[str, float]] = []  # @tasks that returned, in order, with their time
        self._tasks_done = 0
        # Calls of a node interrupted since the last step (answered again when it re-runs) and
        # those its re-run may still take, by (node, kind, request).
        self._interrupted_calls: list[tuple[tuple[str, str, str], Any]] = []
        self._before_interrupt: list[tuple[tuple[str, str, str], Any]] = []
        self._fork_superstep = fork_superstep  # super-steps up to this one are the fork's record
        self._sets = sets  # (super-step, node, values): a fork's --set, merged into that node's update
        self.calls: list[dict[str, Any]] = []  # the calls of the super-step in flight
        self._ran: list[str] = []
        self._node_seconds: dict[str, float] = {}
        self._messages: list[dict[str, Any]] = []  # the messages channel as last recorded
        self.final_state: dict[str, Any] = {}
        # Whether the run's answer is the last message of its messages channel (not its state as JSON).
        self.answer_in_messages = False

    # -- running -------------------------------------------------------------------------
    async def run(self, graph_input: dict[str, Any]) -> Any:
        from langgraph.types import Command

        app = self._prepared()
        config = {"configurable": {"thread_id": self._run.run_id}, "recursion_limit": 10_000}
        loop = asyncio.get_running_loop()
        loop.run_in_executor = _inline_executor(loop)  # type: ignore[method-assign]
        token = _RUNNER.set(self)
        try:
            self._messages = chat_messages(graph_input.get("messages"))
            out = await app.ainvoke(graph_input, config, durability="sync")
            while True:
                waiting = [(t.name, i) for t in (await app.aget_state(config)).tasks for i in t.interrupts]
                if not waiting:
                    return self._answer(out)
                # The interrupted nodes run again from their start when resumed (LangGraph's way):
                # the calls they made before interrupt() are answered with what they returned.
                self._before_interrupt = [c for c in self._interrupted_calls]
                resumes = {i.id: await self._run.graph_interrupted(node, to_json(i.value)) for node, i in waiting}
                out = await app.ainvoke(Command(resume=resumes), config, durability="sync")
        finally:
            _RUNNER.reset(token)

    def _answer(self, out: Any) -> str:
        """The run's answer: the last assistant message's text when the graph has a `messages`
        channel that ends with one, else its final state as JSON (the result step keeps the state)."""
        if not isinstance(out, dict):  # an @entrypoint's return value
            self.final_state = {"result": to_json(out)}
            return out if isinstance(out, str) else json.dumps(to_json(out), sort_keys=True)
        values = out
        self.final_state = graph_state(values)
        messages = chat_messages(values.get("messages"))
        if messages and messages[-1].get("role") == "assistant" and isinstance(messages[-1].get("content"), str):
            self.answer_in_messages = True  # the super-step that wrote it recorded it already
            return messages[-1]["content"]
        return json.dumps(self.final_state, sort_keys=True)

    def _prepared(self) -> Any:
        """A copy of the graph with Rewind's checkpointer and every node wrapped (the module's
        own graph object is left as it is)."""
        from langgraph._internal._runnable import RunnableCallable

        nodes = {}
        for name, node in self._graph.nodes.items():
            if name.startswith("__"):
                nodes[name] = node
                continue
            nodes[name] = node.copy(update={"bound": RunnableCallable(None, self._node(name, node.bound), name=name,
                                                                      trace=False)})
        if self.functional:
            self._wrap_tasks()
        return self._graph.copy(update={"checkpointer": RecordingSaver(self), "nodes": nodes})

    def _wrap_tasks(self) -> None:
        """Each @task of the entrypoint's module tells this run when it returns (the module is
        imported afresh in each run's sandbox; its task functions are wrapped again regardless)."""
        import functools
        import inspect

        from langgraph.func import _TaskFunction

        for value in vars(self._module).values() if self._module is not None else ():
            if not isinstance(value, _TaskFunction):
                continue
            # The task's own function (a module shared with an earlier run would hold that run's wrapper).
            func = getattr(value.func, "_rewind_task", value.func)
            name = func.__name__

            if inspect.iscoroutinefunction(func):
                @functools.wraps(func)
                async def timed(*args: Any, _func: Any = func, _name: str = name, **kwargs: Any) -> Any:
                    started = workflow.now()
                    out = await _func(*args, **kwargs)
                    self._finished.append((_name, _seconds(started, workflow.now())))
                    return out
            else:
                @functools.wraps(func)
                def timed(*args: Any, _func: Any = func, _name: str = name, **kwargs: Any) -> Any:
                    started = workflow.now()
                    out = _func(*args, **kwargs)
                    self._finished.append((_name, _seconds(started, workflow.now())))
                    return out
            timed._rewind_task = func  # type: ignore[attr-defined]
            value.func = timed

    def _node(self, name: str, bound: Any) -> Any:
        async def node(state: Any, config: Any) -> Any:
            started = workflow.now()
            out = await bound.ainvoke(state, config)
            self._ran.append(name)
            self._node_seconds[name] = self._node_seconds.get(name, 0.0) + _seconds(started, workflow.now())
            superstep = (config.get("metadata") or {}).get("langgraph_step")
            for at, who, values in self._sets:
                if at == superstep and who == name:
                    out = _merged(out, values)
            return out

        from langchain_core.runnables import RunnableConfig

        node.__annotations__["config"] = RunnableConfig  # what LangGraph looks for to pass the config
        return node

    # -- what nodes call -----------------------------------------------------------------
    async def chat(self, model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
        try:
            from langchain_openai.chat_models.base import BaseChatOpenAI, _convert_to_openai_response_format
        except ImportError:  # pragma: no cover - the extra installs it
            BaseChatOpenAI = None  # noqa: N806
        node = current_node()
        if BaseChatOpenAI is None or not isinstance(model, BaseChatOpenAI):
            raise PipelineError(f"node {node!r} calls a {type(model).__name__}: a Rewind graph run sends model calls "
                                "through an OpenAI-compatible chat model (langchain_openai.ChatOpenAI, any base_url)")
        payload = model._get_request_payload(messages, stop=stop, **kwargs)
        if model._use_responses_api(payload):
            raise PipelineError(f"node {node!r}: ChatOpenAI's Responses API is not supported in a Rewind graph run; "
                                "leave use_responses_api unset")
        response_format = payload.get("response_format")
        if response_format is not None and not isinstance(response_format, dict):
            response_format = _convert_to_openai_response_format(response_format)
        key = (node, "llm", json.dumps([payload.get("messages"), payload.get("tools")], sort_keys=True, default=str))
        answered = self._answered_again(key)
        if answered is None:
            answered = await self._run.call_chat(node, node, payload, response_format)
        self._interrupted_calls.append((key, answered))
        message, usage, model_name = answered
        completion = {"id": f"rewind-{self._run.run_id}", "object": "chat.completion", "created": 0,
                      "model": model_name, "choices": [{"index": 0, "message": message,
                                                        "finish_reason": "tool_calls" if message.get("tool_calls")
                                                        else "stop"}],
                      "usage": usage}
        return model._create_chat_result(completion)

    async def tool(self, base_tool: Any, tool_input: Any) -> Any:
        from langchain_core.messages import ToolMessage

        call_id = None
        if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call":
            call_id, arguments = tool_input.get("id"), dict(tool_input.get("args") or {})
        elif isinstance(tool_input, dict):
            arguments = dict(tool_input)
        elif isinstance(tool_input, str) and len(base_tool.args) == 1:
            arguments = {next(iter(base_tool.args)): tool_input}
        else:
            raise PipelineError(f"node {current_node()!r} calls tool {base_tool.name!r} with a "
                                f"{type(tool_input).__name__}: give its arguments as a dict")
        log = await self._tool_log(base_tool.name, arguments)
        if call_id is None:
            if log.error is not None:
                raise ToolCallFailed(f"{base_tool.name}: {log.error}")
            return log.output
        failed = log.error is not None or (log.approval is not None and log.approval.verdict == "rejected")
        content = log.error if log.error is not None else log.output
        return ToolMessage(content=content if isinstance(content, str) else json.dumps(content), name=base_tool.name,
                           tool_call_id=call_id, status="error" if failed else "success")

    async def _tool_log(self, name: str, arguments: dict[str, Any]) -> Any:
        """The run's call of tool `name` from the node running (its log), or the answer it had
        before the node's interrupt()."""
        node = current_node()
        key = (node, "tool", json.dumps([name, arguments], sort_keys=True, default=str))
        log = self._answered_again(key)
        if log is None:
            log = await self._run.tool_log(name, arguments, node=node)
        self._interrupted_calls.append((key, log))
        return log

    def _answered_again(self, key: tuple[str, str, str]) -> Any:
        """What an interrupted node's call returned before its interrupt(), when the node, run
        again on resume, makes the same call (None: not such a call)."""
        for index, (known, answer) in enumerate(self._before_interrupt):
            if known == key:
                del self._before_interrupt[index]
                return answer
        return None

    async def rewind_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """A Rewind `@tool` awaited in a node: the run's call of that tool; its output, or
        ToolCallFailed."""
        log = await self._tool_log(name, arguments)
        if log.error is not None:
            raise ToolCallFailed(f"{name}: {log.error}")
        if log.approval is not None and log.approval.verdict == "rejected":
            raise ToolCallFailed(f"{name} was rejected by {log.approval.by}")
        return log.output

    # -- super-steps -------------------------------------------------------------------
    def task_returned(self, value: Any) -> None:
        """An @entrypoint's @task returned (LangGraph saved its result): the task's step, with the
        calls it made (and those the entrypoint's own code made since the last step)."""
        if not self._finished:
            return
        name, seconds = self._finished.pop(0)
        self._tasks_done += 1
        entry = set(self._graph.nodes)  # the entrypoint's own code, between its tasks
        taken = [c for c in self.calls if c.get("node") == name or c.get("node") in entry]
        self.calls = [c for c in self.calls if not (c.get("node") == name or c.get("node") in entry)]
        if self._tasks_done <= self._fork_superstep:
            return  # the fork's record
        self._run.record_super_step(name, [], {"result": to_json(value)}, {
            "graph": self.name, "superstep": self._tasks_done, "nodes": [name], "calls": taken, "task": True,
            "node_seconds": {name: round(seconds, 6)}})

    def super_step(self, checkpoint: dict[str, Any], metadata: dict[str, Any]) -> None:
        """LangGraph checkpointed the graph after a super-step: that super-step's step (a
        functional graph's steps are its tasks')."""
        if self.functional:
            self._ran, self._node_seconds = [], {}
            return
        superstep = metadata.get("step")
        if not self._ran:
            return  # the input, or a super-step whose nodes were interrupted: no node completed
        ran, calls, seconds = self._ran, self.calls, self._node_seconds
        self._ran, self.calls, self._node_seconds = [], [], {}
        self._interrupted_calls, self._before_interrupt = [], []
        if metadata.get("source") != "loop" or not isinstance(superstep, int):
            return
        values = checkpoint.get("channel_values") or {}
        messages = chat_messages(values.get("messages"))
        known = self._messages
        new = messages[len(known):] if messages[:len(known)] == known else messages
        self._messages = messages
        if superstep <= self._fork_superstep:
            return  # the fork's record: this super-step is the lineage's, already a step
        nodes = sorted(set(ran), key=ran.index)
        self._run.record_super_step("+".join(nodes), new, graph_state(values), {
            "graph": self.name, "superstep": superstep, "nodes": nodes, "calls": calls,
            "node_seconds": {n: round(s, 6) for n, s in seconds.items()}})


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())


def _merged(out: Any, values: dict[str, Any]) -> Any:
    """A node's update with a fork's `--set` values over it (through the channels' reducers,
    as LangGraph's update_state(as_node=...) would write them)."""
    from langgraph.types import Command

    if out is None:
        return dict(values)
    if isinstance(out, dict):
        return {**out, **values}
    if isinstance(out, Command):
        update = out.update if isinstance(out.update, dict) else {}
        return Command(graph=out.graph, update={**update, **values}, resume=out.resume, goto=out.goto)
    raise PipelineError(f"--set needs the node's update as a dict (it returned a {type(out).__name__})")


def recording_saver_class() -> type:
    from langgraph.checkpoint.memory import InMemorySaver

    class _RecordingSaver(InMemorySaver):
        """InMemorySaver (the graph's interrupts resume from it) that tells the run each
        super-step's checkpoint."""

        def __init__(self, runner: GraphRunner) -> None:
            super().__init__()
            self._runner = runner

        async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            self._runner.super_step(checkpoint, dict(metadata or {}))
            return await super().aput(config, checkpoint, metadata, new_versions)

        async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> Any:
            for channel, value in writes:
                if channel == "__return__" and self._runner.functional:
                    self._runner.task_returned(value)
            return await super().aput_writes(config, writes, task_id, task_path)

    return _RecordingSaver


def RecordingSaver(runner: GraphRunner) -> Any:  # noqa: N802 - a class made once langgraph is importable
    global _saver_class
    if _saver_class is None:
        _saver_class = recording_saver_class()
    return _saver_class(runner)


_saver_class: type | None = None


__all__ = ["install", "active_graph_run", "GraphRunner", "current_node", "to_json", "chat_messages", "graph_state"]
