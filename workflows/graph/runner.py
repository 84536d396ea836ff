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

A node that does its own I/O runs as one activity instead (workflows/graph/guard.py says
when, calls.py runs it); the routing of LangChain's calls is routing.py's, where a node
runs is places.py's.
"""


from __future__ import annotations

import asyncio
import json
from datetime import datetime
from typing import Any

from temporalio import workflow

from workflows.graph.guard import (
    NODE_OPTIONS,
    NodeNeedsActivity,
    NodeOptions,
    current_guard,
    guarding,
    node_options,
    unguard,
    unguarded,
)
from workflows.graph.places import Ran, current_node, current_place, is_graph, ns_label
from workflows.graph.routing import (
    chat_key,
    chat_result,
    restricted_call,
    running,
    stopped,
    tool_answer,
    tool_key,
    tool_arguments,
)
from workflows.graph.store import apply_writes, run_store
from workflows.graph.values import digest, pack, unpack
from workflows.vocabulary.errors import PipelineError, ToolCallFailed
from workflows.vocabulary.wire import GRAPH_NODE_ID_PATCH

# Channels that are LangGraph's own bookkeeping, not the graph's state.
_INTERNAL = ("branch:", "__", "start:")


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

    def __init__(self, run: Any, name: str, graph: Any, *, skip_steps: int,
                 sets: list[tuple[str, int, str, int | None, dict[str, Any]]], module: Any = None,
                 turns: list[tuple[Any, int, bool]] | None = None) -> None:
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
        # The first steps this run records again are the record's (a fork's, a continued run's): the
        # graph runs the same way up to there, so they are told apart by their count.
        self._skip_steps, self._steps_seen = skip_steps, 0
        # A fork's --set: (subgraph, super-step, node, send, values), merged into that node's update.
        self._sets = sets
        self.calls: list[dict[str, Any]] = []  # the calls of the super-steps in flight (each names its graph)
        self._ran: list[Ran] = []
        self._messages: list[dict[str, Any]] = []  # the messages channel as last recorded
        self.final_state: dict[str, Any] = {}
        # Whether the run's answer is the last message of its messages channel (not its state as JSON).
        self.answer_in_messages = False
        # Each node's (and @task's) declared way of running (rewind_node_options), and the nodes
        # that needed an activity in this run so far (sent there directly from then on).
        self._options = node_options(module, name) if module is not None else {}
        self._needs_activity: set[str] = set()
        self.store: Any = None  # the graph's Store in this run, when it was compiled with one
        # The thread's later invocations (GraphTurn, the record's steps before it, whether it is live),
        # and whether a live turn's input is still to be recorded as its `input` step.
        self._turns = list(turns or [])
        self._input_due = False
        self._turned = False  # a turn has been given: its input checkpoints are the thread's next inputs

    # -- running -------------------------------------------------------------------------
    async def run(self, graph_input: dict[str, Any]) -> Any:
        from langgraph.types import Command

        app = self._prepared()
        config = {"configurable": {"thread_id": self._run.run_id}, "recursion_limit": 10_000}
        loop = asyncio.get_running_loop()
        loop.run_in_executor = _inline_executor(loop)  # type: ignore[method-assign]
        token = running(self)
        try:
            self._messages = chat_messages(graph_input.get("messages"))
            out = await self._invoke(app, graph_input, config)
            while True:
                waiting = [(t.name, i) for t in (await app.aget_state(config)).tasks for i in t.interrupts]
                # The thread's next invocation: once the previous one has ended, or at the interrupt it
                # waited on when the turn was given (its record up to there gone through).
                if self._turns and (not waiting or self._steps_seen >= self._turns[0][1]):
                    turn, _steps, live = self._turns.pop(0)
                    self._input_due = live and turn.input is not None
                    self._turned = True
                    out = await app.ainvoke(_turn_value(turn, [i for _, i in waiting]), config, durability="sync")
                    continue
                if not waiting:
                    return self._answer(out)
                # The interrupted nodes run again from their start when resumed (LangGraph's way):
                # the calls they made before interrupt() are answered with what they returned.
                self._before_interrupt = [c for c in self._interrupted_calls]
                resumes = {i.id: await self._run.graph_interrupted(node, to_json(i.value)) for node, i in waiting}
                out = await self._invoke(app, Command(resume=resumes), config)
        finally:
            stopped(token)

    async def _invoke(self, app: Any, value: Any, config: dict[str, Any]) -> Any:
        """The graph run to its end or its next interrupt (LangGraph's own streaming hands chunks
        over with call_soon_threadsafe, which a workflow's event loop has not: each node gets a
        stream writer of the run's instead, `_with_writer`)."""
        return await app.ainvoke(value, config, durability="sync")

    def _with_writer(self, config: Any) -> Any:
        """The node's config with a stream writer whose writes (`get_stream_writer()`) are the run's
        live `custom` events."""
        import dataclasses

        from langgraph._internal._constants import CONF, CONFIG_KEY_RUNTIME

        configurable = (config or {}).get(CONF) or {}
        runtime = configurable.get(CONFIG_KEY_RUNTIME)
        if runtime is None or not dataclasses.is_dataclass(runtime):
            return config
        writer = dataclasses.replace(runtime, stream_writer=self._run.emit_custom)
        return {**config, CONF: {**configurable, CONFIG_KEY_RUNTIME: writer}}

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
        """A copy of the graph with Rewind's checkpointer and every node wrapped, a subgraph's too
        (the module's own graph objects are left as they are)."""
        if self.functional:
            self._wrap_tasks()
        update = {"checkpointer": RecordingSaver(self), "nodes": self._wrapped(self._graph, "")}
        if getattr(self._graph, "store", None) is not None:  # compiled with store=: the run's own (store.py)
            self.store = update["store"] = run_store(self._graph.store)
        return self._graph.copy(update=update)

    def _wrapped(self, graph: Any, prefix: str) -> dict[str, Any]:
        from langgraph._internal._runnable import RunnableCallable

        nodes = {}
        for name, node in graph.nodes.items():
            if name.startswith("__"):
                nodes[name] = node
                continue
            qualified = f"{prefix}/{name}" if prefix else name
            bound = node.bound
            inner = is_graph(bound) and self.options(qualified).durability != "node"
            if inner:  # a subgraph as a node: its own super-steps are steps of the run
                bound = bound.copy(update={"nodes": self._wrapped(bound, qualified)})
            nodes[name] = node.copy(update={"bound": RunnableCallable(
                None, self._node(qualified, bound, guarded=not inner and not self.functional), name=name,
                trace=False)})
        return nodes

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

            # Async whatever the task: an @entrypoint awaits its tasks, and a task may run as an activity.
            @functools.wraps(func)
            async def timed(*args: Any, _func: Any = func, _name: str = name, **kwargs: Any) -> Any:
                started = workflow.now()

                async def code() -> Any:
                    out = _func(*args, **kwargs)
                    return await out if inspect.isawaitable(out) else out

                out = await self._run_node(_name, code, [list(args), kwargs], None, task=True)
                self._finished.append((_name, _seconds(started, workflow.now())))
                return out
            timed._rewind_task = func  # type: ignore[attr-defined]
            value.func = timed

    def _node(self, name: str, bound: Any, *, guarded: bool) -> Any:
        """`name`'s node as the run runs it: as workflow code or as an activity (`guarded`: a node
        of the user's; not a subgraph, whose nodes are, nor an @entrypoint's own code)."""

        async def node(state: Any, config: Any) -> Any:
            started = workflow.now()
            place = current_place()
            config = self._with_writer(config)
            if guarded:  # (a subgraph declared node-level is one too: one activity)
                out = await self._run_node(name, lambda: bound.ainvoke(state, config), state, config)
            else:
                out = await bound.ainvoke(state, config)
            superstep = (config.get("metadata") or {}).get("langgraph_step")
            for subgraph, at, who, send, values in self._sets:
                if (subgraph, at, who) == (place.subgraph, superstep, name) and send in (None, place.send):
                    out = _merged(out, values)
            self._ran.append(Ran(place=place, seconds=_seconds(started, workflow.now()), update=_update_json(out)))
            return out

        from langchain_core.runnables import RunnableConfig

        node.__annotations__["config"] = RunnableConfig  # what LangGraph looks for to pass the config
        return node

    def place(self) -> dict[str, Any]:
        """What a call's entry in its super-step's record says of where it was made (the `_`
        keys only while the super-step is in flight)."""
        place = current_place()
        return {"node": place.node, "_ns": place.graph_ns, "_task": place.task_ns}

    def options(self, name: str) -> NodeOptions:
        """A node's declared options: by its path (`subgraph/node`) or its own name."""
        return self._options.get(name) or self._options.get(name.rsplit("/", 1)[-1]) or NodeOptions()

    async def _run_node(self, name: str, code: Any, state: Any, config: Any, task: bool = False) -> Any:
        """The node's update: its code run as workflow code (call-level), or the node run as one
        activity (node-level) when declared so or when its code does what workflow code must
        not (workflows/graph/guard.py); declared call-level, that is the run's error."""
        way = self.options(name).durability
        if way == "node" or name in self._needs_activity:
            return await self._as_activity(name, state, config, [], task)
        guard, token = guarding(name)
        try:
            out = await code()
        except NodeNeedsActivity:
            pass
        except Exception as exc:
            what = restricted_call(exc)
            if what is None and guard.tripped is None:
                raise
            if what is not None:
                guard.stop(f"calls {what}, which workflow code must not")
        finally:
            unguard(token)
        if guard.tripped is None:
            return out
        if way == "calls":
            raise PipelineError(f"{'@task' if task else 'node'} {name!r} is declared call-level in {NODE_OPTIONS} but "
                                f"{guard.tripped}: declare it {{'durability': 'node'}} (or 'auto') to run it as one "
                                "activity, or reach the outside only through ChatOpenAI and LangChain tools")
        self._needs_activity.add(name)
        workflow.logger.info("%s %r %s: it runs as one activity from now on", "@task" if task else "node", name,
                             guard.tripped)
        return await self._as_activity(name, state, config, guard.calls, task, why=guard.tripped)

    async def _as_activity(self, name: str, state: Any, config: Any, handed: list[Any], task: bool,
                           why: str | None = None) -> Any:
        """The node (or @task) as one activity on the worker's own import of the graph's module: its
        update, or LangGraph's interrupt when it called interrupt()."""
        from langchain_core.runnables.config import var_child_runnable_config
        from langgraph.errors import GraphInterrupt

        config = config if config is not None else (var_child_runnable_config.get() or {})
        configurable = (config or {}).get("configurable") or {}
        scratchpad = configurable.get("__pregel_scratchpad")
        metadata = (config or {}).get("metadata") or {}
        with unguarded():
            result = await self._run.call_node(
                name, pack(state, f"the input of {'@task' if task else 'node'} {name!r}"),
                digest(state, message_ids=not workflow.patched(GRAPH_NODE_ID_PATCH)),
                step=int(metadata.get("langgraph_step") or 0), ns=str(configurable.get("checkpoint_ns") or ""),
                resume=list(getattr(scratchpad, "resume", None) or []), handed=handed, task=task, why=why)
        if result.get("store_writes") and self.store is not None:
            apply_writes(self.store, unpack(result["store_writes"]))
        if result.get("interrupts"):
            raise GraphInterrupt(unpack(result["interrupts"]))
        return unpack(result["update"]) if result.get("update") else None

    def sync_call(self, what: str, instead: str) -> None:
        """A node calls a model or tool synchronously: as an activity (auto), else the run's error."""
        guard = current_guard()
        if guard is not None:
            raise guard.stop(what)
        raise PipelineError(f"node {current_node()!r} {what}: in a Rewind graph run a node's code that is workflow "
                            f"code calls them with `{instead}`")

    # -- what nodes call -----------------------------------------------------------------
    async def chat(self, model: Any, messages: Any, stop: Any, kwargs: dict[str, Any]) -> Any:
        try:
            from langchain_openai.chat_models.base import BaseChatOpenAI, _convert_to_openai_response_format
        except ImportError:  # pragma: no cover - the extra installs it
            BaseChatOpenAI = None  # noqa: N806
        node = current_node()
        guard = current_guard()
        if BaseChatOpenAI is None or not isinstance(model, BaseChatOpenAI):
            if guard is not None:  # not through Rewind's model path: the node runs as an activity
                raise guard.stop(f"calls a {type(model).__name__}")
            raise PipelineError(f"node {node!r} calls a {type(model).__name__} in the graph's own code: a Rewind graph "
                                "run sends such model calls from a node (run as an activity), or through an "
                                "OpenAI-compatible chat model (langchain_openai.ChatOpenAI, any base_url)")
        payload = model._get_request_payload(messages, stop=stop, **kwargs)
        if model._use_responses_api(payload):
            if guard is not None:
                raise guard.stop("calls ChatOpenAI's Responses API")
            raise PipelineError(f"node {node!r}: ChatOpenAI's Responses API is sent from a node (run as an activity), "
                                "not from the graph's own code")
        response_format = payload.get("response_format")
        if response_format is not None and not isinstance(response_format, dict):
            response_format = _convert_to_openai_response_format(response_format)
        key = (node, "llm", chat_key(payload))
        answered = self._answered_again(key)
        if answered is None:
            with unguarded():
                answered = await self._run.call_chat(node, node, payload, response_format)
        self._interrupted_calls.append((key, answered))
        if guard is not None:
            guard.calls.append((key, answered))
        message, usage, model_name = answered
        return chat_result(model, message, usage, model_name, self._run.run_id)

    async def tool(self, base_tool: Any, tool_input: Any) -> Any:
        guard = current_guard()
        if guard is not None and not self._run.holds_tool(base_tool.name):
            raise guard.stop(f"calls tool {base_tool.name!r}, which no tools module of the worker holds")
        call_id, arguments = tool_arguments(base_tool, tool_input, current_node())
        return tool_answer(base_tool.name, call_id, await self._tool_log(base_tool.name, arguments))

    async def _tool_log(self, name: str, arguments: dict[str, Any]) -> Any:
        """The run's call of tool `name` from the node running (its log), or the answer it had
        before the node's interrupt()."""
        node = current_node()
        key = (node, "tool", tool_key(name, arguments))
        log = self._answered_again(key)
        if log is None:
            with unguarded():
                log = await self._run.tool_log(name, arguments, node=node)
        self._interrupted_calls.append((key, log))
        guard = current_guard()
        if guard is not None:
            guard.calls.append((key, log))
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
    def _turn_input(self, values: dict[str, Any]) -> None:
        """LangGraph applied an invocation's input to the thread: the messages as they now stand
        and, for a turn of this workflow's own, its `input` step."""
        messages = chat_messages(values.get("messages"))
        known = self._messages
        new = messages[len(known):] if messages[:len(known)] == known else messages
        self._messages = messages
        if self._input_due:
            self._input_due = False
            self._run.record_turn_input(new, graph_state(values))

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
        self._steps_seen += 1
        if self._steps_seen <= self._skip_steps:
            return  # the fork's record
        self._run.record_super_step(name, [], {"result": to_json(value)}, {
            "graph": self.name, "superstep": self._tasks_done, "nodes": [name], "calls": _recorded(taken),
            "task": True, "node_seconds": {name: round(seconds, 6)},
            "updates": [{"node": name, "update": to_json(value)}]})

    async def answered_step(self) -> None:
        """A super-step the record holds already went by (the run breathes now and then)."""
        await self._run.breathe(10)

    def super_step(self, checkpoint: dict[str, Any], metadata: dict[str, Any], ns: str = "") -> bool:
        """LangGraph checkpointed the graph (`ns`: a subgraph) after a super-step: that super-step's
        step, or one step per task when it ran a `Send` fan-out (a functional graph's steps are its
        tasks')."""
        ran = [r for r in self._ran if r.place.graph_ns == ns]
        self._ran = [r for r in self._ran if r.place.graph_ns != ns]
        if self.functional:
            return False
        if not ns and self._turned and metadata.get("source") == "input":
            self._turn_input(checkpoint.get("channel_values") or {})
            return False
        superstep = metadata.get("step")
        if not ran:
            return False  # the input, or a super-step whose nodes were interrupted: no node completed
        calls = [c for c in self.calls if c.get("_ns") == ns]
        self.calls = [c for c in self.calls if c.get("_ns") != ns]
        if not ns:
            self._interrupted_calls, self._before_interrupt = [], []
        if metadata.get("source") != "loop" or not isinstance(superstep, int):
            return False
        values = checkpoint.get("channel_values") or {}
        new: list[dict[str, Any]] = []
        if not ns:  # the run's messages are the graph's messages channel (a subgraph's are its own)
            messages = chat_messages(values.get("messages"))
            known = self._messages
            new = messages[len(known):] if messages[:len(known)] == known else messages
            self._messages = messages
        if any(r.place.send is not None for r in ran):  # a Send fan-out: each task a step of its own
            steps = [([r], [c for c in calls if c.get("_task") == r.place.task_ns], r.place.send) for r in ran]
        else:
            steps = [(ran, calls, None)]
        skipped = False
        for index, (tasks, taken, send) in enumerate(steps):
            self._steps_seen += 1
            if self._steps_seen <= self._skip_steps:
                skipped = True
                continue  # the fork's record: this step is the lineage's already
            nodes = list(dict.fromkeys(r.place.node for r in tasks))
            seconds: dict[str, float] = {}
            for r in tasks:
                seconds[r.place.node] = round(seconds.get(r.place.node, 0.0) + r.seconds, 6)
            details: dict[str, Any] = {"graph": self.name, "superstep": superstep, "nodes": nodes,
                                       "calls": _recorded(taken), "node_seconds": seconds}
            updates = [{"node": r.place.node, "update": r.update} for r in tasks if r.update is not None]
            if updates:  # each node's update, in the order they ended: the step's `graph.update` events
                details["updates"] = updates
            if ns:
                details["ns"] = ns_label(ns)
            if send is not None:
                details["send"] = send
            self._run.record_super_step("+".join(nodes), new if index == len(steps) - 1 else [],
                                        graph_state(values), details)
        return skipped


def _turn_value(turn: Any, waiting: list[Any]) -> Any:
    """What LangGraph is invoked with for a turn: its input, or its Command (a resume given as one
    value answers every interrupt the graph waits on)."""
    from langgraph.types import Command

    if turn.command is None:
        return dict(turn.input or {})
    command = dict(turn.command)
    if "resume" in command and len(waiting) > 1 and not (
            isinstance(command["resume"], dict) and set(command["resume"]) <= {i.id for i in waiting}):
        command["resume"] = {i.id: command["resume"] for i in waiting}
    return Command(**{k: v for k, v in command.items() if k in ("resume", "update", "goto")})


def _recorded(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A super-step's call entries as its record keeps them (without this execution's task ids)."""
    return [{k: v for k, v in c.items() if not k.startswith("_")} for c in calls]


def _update_json(out: Any) -> Any:
    """A node's update as its `graph.update` event says it (a Command's update; None: it returned none)."""
    from langgraph.types import Command

    if isinstance(out, Command):
        out = out.update
    if out is None:
        return None
    return to_json(out)


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
            skipped = self._runner.super_step(checkpoint, dict(metadata or {}),
                                              str(((config or {}).get("configurable") or {}).get("checkpoint_ns") or ""))
            if skipped:
                await self._runner.answered_step()
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


__all__ = ["GraphRunner", "to_json", "chat_messages", "graph_state"]
