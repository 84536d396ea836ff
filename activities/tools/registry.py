"""The `@tool` decorator, the tool context and the registry the worker builds.

A tool is a plain async function. Its JSON schema comes from its type hints
(through a pydantic model built from the signature), so the model sees exactly
what the validator will accept, and arguments are validated before the
function runs. Unknown arguments are rejected (`additionalProperties: false`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import importlib.util
import inspect
import json
import traceback
from dataclasses import dataclass, field
from typing import Annotated, Any, Awaitable, Callable, Sequence

import pydantic
from temporalio import activity

from workflows.graph.routing import active_graph_run
from workflows.vocabulary.contracts import AgentSpec, ToolSpec
from workflows.vocabulary.errors import ToolError, ToolRegistryError

# Every plain `str` argument is capped (a model can send megabytes); the
# worker's registry re-applies its own cap (REWIND_MAX_ARG_CHARS).
DEFAULT_MAX_ARG_CHARS = 100_000



@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know about the call it serves."""

    run_id: str
    branch_id: str
    step: int
    tool_call_id: str
    tool_name: str
    # Same on every attempt of this call (also after a worker crash); differs for
    # any other call, step, branch or run. None for read-only tools.
    idempotency_key: str | None
    attempt: int
    # The call's live events (activities/record/live.py CallEvents); None: nobody watches.
    events: Any = field(default=None, repr=False, compare=False)

    def heartbeat(self, *details: Any) -> None:
        """Report progress; long tools are heart-beaten automatically as well."""
        activity.heartbeat(*details)

    def emit(self, value: Any) -> None:
        """Tell the run's watchers `value` (JSON: a progress report, a partial result): a live
        `custom` event of this call (docs/streaming.md). Never waits; not part of the record."""
        if self.events is not None:
            self.events.custom(json.loads(json.dumps(value, default=str)))


def emit(value: Any) -> None:
    """Inside a tool: tell the run's watchers `value` (a live `custom` event of the call)."""
    try:
        ctx = _current_context.get()
    except LookupError:
        raise ToolRegistryError(
            "rewind.emit() was called outside a tool call: a tool reports progress with it while the worker "
            "runs it; a pipeline uses ctx.emit(...), a LangGraph node get_stream_writer()") from None
    ctx.emit(value)


_current_context: contextvars.ContextVar[ToolContext] = contextvars.ContextVar("rewind_tool_context")


def tool_context() -> ToolContext:
    """The context of the tool call being executed; only valid inside a tool."""
    try:
        return _current_context.get()
    except LookupError:
        raise ToolRegistryError(
            "tool_context() was called outside a tool call; it is only available "
            "while the worker executes a @tool function"
        ) from None


@dataclass
class RegisteredTool:
    """A decorated tool: still callable directly, plus what the worker needs."""

    fn: Callable[..., Awaitable[Any]]
    spec: ToolSpec
    args_model: type[pydantic.BaseModel]
    compensate: Callable[..., Awaitable[Any]] | None = field(default=None)
    arg_cap: int = DEFAULT_MAX_ARG_CHARS
    # needs_approval=<function of the validated arguments>: asked before each call.
    approval_rule: Callable[[dict[str, Any]], bool] | None = field(default=None)
    # dry_run=<async function with the tool's arguments>: what a dry-run branch calls instead.
    dry_run: Callable[..., Awaitable[Any]] | None = field(default=None)

    def with_arg_cap(self, cap: int) -> "RegisteredTool":
        """The same tool with plain `str` arguments capped at `cap` characters."""
        if cap == self.arg_cap:
            return self
        model = _args_model(self.fn, self.spec.name, cap)
        spec = self.spec.model_copy(update={"parameters": _json_schema(model)})
        return dataclasses.replace(self, args_model=model, spec=spec, arg_cap=cap)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        runner = active_graph_run()
        if runner is not None:  # awaited in a graph run's node: a call of the run's tool, an activity
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
            return await runner.rewind_tool(self.spec.name, dict(bound.arguments))
        return await self.fn(*args, **kwargs)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Validated keyword arguments (raises pydantic.ValidationError)."""
        model = self.args_model.model_validate(arguments)
        return {name: getattr(model, name) for name in type(model).model_fields}

    def validated_json(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments as the validator reads them, as JSON: {"n": "450"} -> {"n": 450}
        (raises pydantic.ValidationError)."""
        return self.args_model.model_validate(arguments).model_dump(mode="json")

    def compensation(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """Decorator declaring how to compensate this (side-effecting) tool."""
        self.compensate = fn
        return fn


def _args_model(fn: Callable[..., Any], name: str, cap_chars: int = DEFAULT_MAX_ARG_CHARS, *, skip: int = 0,
                what: str = "tool") -> type[pydantic.BaseModel]:
    """The arguments of `fn` (but its first `skip`: a pipeline's ctx) as a pydantic model."""
    fields: dict[str, Any] = {}
    for param in list(inspect.signature(fn).parameters.values())[skip:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolRegistryError(f"{what} {name!r}: *args/**kwargs cannot be described as JSON; list every argument")
        if param.annotation is inspect.Parameter.empty:
            raise ToolRegistryError(f"{what} {name!r}: argument {param.name!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (param.annotation, default)
    hints = {k: v for k, v in inspect.get_annotations(fn, eval_str=True).items() if k in fields}
    # Plain `str` arguments get a length cap: a model can send megabytes.
    cap = pydantic.Field(max_length=cap_chars)
    fields = {
        k: (Annotated[str, cap] if hints.get(k, t) is str else hints.get(k, t), d) for k, (t, d) in fields.items()
    }
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    return pydantic.create_model(f"{name}_arguments", __config__=config, **fields)


def _json_schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effects: bool = False,
    timeout_s: float = 60.0,
    heartbeat_s: float = 5.0,
    max_attempts: int = 3,
    cache_ignore: tuple[str, ...] = (),
    fast: bool = False,
    needs_approval: bool | Callable[[dict[str, Any]], bool] = False,
    approval_timeout_s: float | None = None,
    on_timeout: str = "reject",
    effect_key: tuple[str, ...] | None = None,
    on_repeat: str = "reuse",
    dry_run: Callable[..., Awaitable[Any]] | None = None,
) -> Any:
    """Register an async function as a tool.

    side_effects: the call changes the world; it gets an idempotency key and is
        never served from the tool-result cache.
    timeout_s / heartbeat_s / max_attempts: Temporal activity options for each call.
    cache_ignore: argument names left out of the cache key (volatile fields).
    fast: run each call as a local activity on the workflow's own worker: no
        round trip through the server, recorded in history with the workflow
        task (a crash before that runs the call again, with the same
        idempotency key). For short calls; see "Fast path" in docs/operations.md.
    needs_approval: (side-effecting tools) a person approves or rejects each call
        before it runs (`rewind approve` / `rewind reject`); True for every call,
        or a function of the validated arguments (a dict) that says which ones.
    approval_timeout_s / on_timeout: how long a call waits for its decision
        (default: as long as it takes) and what is decided then ("reject" or "approve").
    effect_key: the argument names that identify the effect (default: all of them);
        two calls with equal values there are the same effect.
    on_repeat: a call that repeats an effect its branch's lineage already caused
        (before a fork point, or in steps a rollback discarded): "reuse" (return
        the recorded result, do not run), "ask" (wait for approval, with the
        earlier effect shown) or "run" (run it again, under its own new key).
    dry_run: (side-effecting tools) an async function taking the tool's arguments that says
        what the call would do without doing it; a branch forked with `--side-effects dry-run`
        (an experiment's default) calls it instead of the tool. Without one such a call
        is answered by a stub saying the effect was not executed.
    """

    def wrap(f: Callable[..., Awaitable[Any]]) -> RegisteredTool:
        tool_name = name or f.__name__
        if not inspect.iscoroutinefunction(f):
            raise ToolRegistryError(f"tool {tool_name!r} must be an async function (async def)")
        model = _args_model(f, tool_name)
        _check_effect_options(tool_name, model, side_effects, needs_approval, approval_timeout_s, on_timeout,
                              effect_key, on_repeat)
        if dry_run is not None and not side_effects:
            raise ToolRegistryError(f"tool {tool_name!r}: dry_run stands in for a side effect; "
                                    "declare side_effects=True as well")
        if dry_run is not None and not inspect.iscoroutinefunction(dry_run):
            raise ToolRegistryError(f"tool {tool_name!r}: dry_run must be an async function (async def) "
                                    "taking the tool's arguments")
        doc = inspect.getdoc(f) or ""
        spec = ToolSpec(
            name=tool_name,
            description=description or doc.split("\n\n")[0].strip(),
            parameters=_json_schema(model),
            side_effects=side_effects,
            timeout_s=timeout_s,
            heartbeat_s=heartbeat_s,
            max_attempts=max_attempts,
            cache_ignore=list(cache_ignore),
            fast=fast,
            approval="by_arguments" if callable(needs_approval) else ("always" if needs_approval else "never"),
            approval_timeout_s=approval_timeout_s,
            approval_default=on_timeout,  # type: ignore[arg-type]
            effect_key=list(effect_key) if effect_key is not None else None,
            on_repeat=on_repeat,  # type: ignore[arg-type]
            dry_run=dry_run is not None,
        )
        rule = needs_approval if callable(needs_approval) else None
        return RegisteredTool(fn=f, spec=spec, args_model=model, approval_rule=rule, dry_run=dry_run)

    return wrap(fn) if fn is not None else wrap


def _check_effect_options(
    name: str, model: type[pydantic.BaseModel], side_effects: bool, needs_approval: Any,
    approval_timeout_s: float | None, on_timeout: str, effect_key: tuple[str, ...] | None, on_repeat: str,
) -> None:
    def bad(text: str) -> ToolRegistryError:
        return ToolRegistryError(f"tool {name!r}: {text}")

    if needs_approval is not False and not side_effects:
        raise bad("needs_approval is for tools that change the world; declare side_effects=True as well")
    if not (isinstance(needs_approval, bool) or callable(needs_approval)):
        raise bad(f"needs_approval must be True, False or a function of the arguments, not {needs_approval!r}")
    if approval_timeout_s is not None and not (isinstance(approval_timeout_s, (int, float)) and 0 < approval_timeout_s < float("inf")):
        raise bad(f"approval_timeout_s must be a positive number of seconds (or None to wait as long as it takes), not {approval_timeout_s!r}")
    if approval_timeout_s is not None and needs_approval is False and on_repeat != "ask":
        raise bad("approval_timeout_s applies to calls that wait for approval; set needs_approval (or on_repeat='ask')")
    if on_timeout not in ("reject", "approve"):
        raise bad(f"on_timeout must be 'reject' or 'approve', not {on_timeout!r}")
    if on_repeat not in ("reuse", "ask", "run"):
        raise bad(f"on_repeat must be 'reuse', 'ask' or 'run', not {on_repeat!r}")
    if effect_key is not None:
        if not side_effects:
            raise bad("effect_key names what identifies a side effect; declare side_effects=True as well")
        if isinstance(effect_key, str) or not effect_key:
            raise bad(f"effect_key must be a tuple of argument names, e.g. effect_key=('customer',), not {effect_key!r}")
        unknown = [k for k in effect_key if k not in model.model_fields]
        if unknown:
            raise bad(f"effect_key names {', '.join(map(repr, unknown))}, which are not arguments of the tool "
                      f"(it has {', '.join(model.model_fields) or 'none'})")


# -- sub-agents -------------------------------------------------------------------

def _task_schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    schema = _json_schema(model)
    schema["properties"]["task"]["description"] = "What the sub-agent should do: its whole instruction."
    return schema


class DeclaredAgent(RegisteredTool):
    """A sub-agent declared with `subagent(...)`: offered to models as a tool, run as an
    agent of its own (a child workflow) whenever a model calls it."""

    def with_arg_cap(self, cap: int) -> "RegisteredTool":
        if not self.spec.agent or not self.spec.agent.task_only:
            return self  # a declared argument model keeps its own limits
        capped = super().with_arg_cap(cap)
        capped.spec.parameters = _task_schema(capped.args_model)
        return capped

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ToolRegistryError(
            f"{self.spec.name!r} is a sub-agent: it runs as an agent of its own when a model calls it in a run; "
            f"start it directly with `rewind start --agent {self.spec.name} --task TEXT`"
        )


def subagent(
    *,
    name: str,
    description: str,
    system_prompt: str,
    tools: list[str] | tuple[str, ...] = (),
    model: str | None = None,
    max_steps: int = 10,
    args: type[pydantic.BaseModel] | None = None,
    task_template: str | None = None,
    timeout_s: float | None = None,
) -> DeclaredAgent:
    """Declare an agent that other agents can call as a tool, next to `@tool` functions.

    The model sees a tool `name` whose one argument is `task` (a string that becomes the
    sub-agent's user message), or, with `args=` a pydantic model, that model's fields;
    the user message is then `task_template.format(**arguments)` (default: the arguments
    as JSON). Each call runs the agent as a durable run of its own (a child workflow of
    the caller, on the same worker pool): its own system prompt, tools and model (None:
    the caller's), at most `max_steps` steps, its checkpoints under the caller's run.
    Its final answer is the call's result; a failure is the call's error, and the
    caller's model decides what to do. `rewind start --agent NAME` runs it top-level.

    timeout_s: how long one call may take before the caller stops waiting for it (None: as long as
        it takes, approvals and budget pauses included).
    """
    def bad(text: str) -> ToolRegistryError:
        return ToolRegistryError(f"sub-agent {name!r}: {text}")

    if not isinstance(name, str) or not name.strip():
        raise ToolRegistryError("subagent(name=...) needs a name (what the model calls it)")
    if not isinstance(system_prompt, str) or not system_prompt.strip():
        raise bad("needs a system_prompt: an agent's prompt lives with its tools")
    if not isinstance(description, str) or not description.strip():
        raise bad("needs a description: it is what a calling model reads to decide when to use it")
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
        raise bad(f"tools must be a list of tool names, e.g. tools=['search_company'], not {tools!r}")
    if name in tools:
        raise bad("lists itself among its tools; an agent that calls itself would nest until the depth limit")
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        raise bad(f"max_steps must be a whole number of at least 1, not {max_steps!r}")
    if timeout_s is not None and not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < float("inf")):
        raise bad(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    if args is not None and not (isinstance(args, type) and issubclass(args, pydantic.BaseModel)):
        raise bad(f"args must be a pydantic model class describing the call's arguments, not {args!r}")
    if task_template is not None and args is None:
        raise bad("task_template renders the fields of args=; without args the model's `task` is the message")

    async def run_as_subagent(task: str) -> Any:  # the signature the model sees; never called
        raise AssertionError("a sub-agent runs as a workflow")

    if args is None:
        model_cls = _args_model(run_as_subagent, name)
    else:
        model_cls = args
        if task_template is not None:
            try:
                task_template.format(**{f: "" for f in model_cls.model_fields})
            except (KeyError, IndexError, ValueError) as exc:
                raise bad(f"task_template {task_template!r} names what args does not have ({exc})") from None
    schema = _task_schema(model_cls) if args is None else _json_schema(model_cls)
    spec = ToolSpec(
        name=name, description=description.strip(), parameters=schema,
        agent=AgentSpec(name=name, system_prompt=system_prompt, tools=list(tools), model=model, max_steps=max_steps,
                        task_only=args is None, task_template=task_template, timeout_s=timeout_s),
    )
    return DeclaredAgent(fn=run_as_subagent, spec=spec, args_model=model_cls)


class ToolRegistry:
    """The tools one worker can execute, by name."""

    def __init__(self, tools: list[RegisteredTool] | None = None) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        for t in tools or []:
            self.add(t)

    def add(self, t: RegisteredTool) -> None:
        existing = self._tools.get(t.spec.name)
        if existing is not None and existing.fn is not t.fn:
            raise ToolRegistryError(
                f"two different tools are named {t.spec.name!r} "
                f"({existing.fn.__module__} and {t.fn.__module__}); pass name= to @tool to rename one"
            )
        self._tools[t.spec.name] = t

    @classmethod
    def from_modules(cls, module_names: list[str], *, max_arg_chars: int = DEFAULT_MAX_ARG_CHARS,
                     finders: Sequence[ToolFinder] = ()) -> "ToolRegistry":
        """The tools of the modules: their @tool functions and declared agents, and what each of
        `finders` finds there (activities/code/graphs.py: LangChain tools, and whether the module
        offers a graph)."""
        registry = cls()
        for module_name in module_names:
            module = import_tool_module(module_name)
            found = [v for v in vars(module).values() if isinstance(v, RegisteredTool)]
            offers = False
            for finder in finders:
                more, offered = finder(module, module_name)
                found += more
                offers = offers or offered
            # A module may hold pipelines or graphs alone (activities/code/pipelines.py registers those).
            if not found and not offers and not any(getattr(v, "is_rewind_pipeline", False) for v in vars(module).values()):
                raise ToolRegistryError(
                    f"tool module {module_name!r} ({getattr(module, '__file__', '?')}) defines no @tool functions, "
                    "sub-agents, @pipeline functions or LangGraph graphs"
                )
            for t in found:
                registry.add(t.with_arg_cap(max_arg_chars))
        return registry

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [self._tools[n].spec for n in self.names()]


# What else a tools module offers: (the tools it holds, whether it offers anything at all).
ToolFinder = Callable[[Any, str], "tuple[list[RegisteredTool], bool]"]


def import_tool_module(module_name: str) -> Any:
    """Import a tool module; any failure is one line: the module, the file, the line, the error."""
    try:
        return importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ToolRegistryError(
            f"tool module {module_name!r} has a syntax error at {exc.filename}:{exc.lineno}: {exc.msg}"
        ) from None
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ToolRegistryError(
                f"cannot import tool module {module_name!r}: no {module_name.replace('.', '/')}.py in the current "
                "directory or on PYTHONPATH; check --tool-modules / REWIND_TOOL_MODULES"
            ) from None
        raise ToolRegistryError(_import_failure(module_name, exc)) from None
    except Exception as exc:  # noqa: BLE001 - user code may raise anything at import
        raise ToolRegistryError(_import_failure(module_name, exc)) from None


def _import_failure(module_name: str, exc: BaseException) -> str:
    # Where the user's code failed: the innermost frame in the module's own file
    # (a @tool without type hints raises inside this file, called from there),
    # else the innermost frame outside the import machinery.
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    own = [f for f in frames if f.filename == _origin(module_name)]
    frames = own or frames
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"tool module {module_name!r} failed to import{where}: {type(exc).__name__}" + (f": {text}" if text else "")


def _origin(module_name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None else None


def set_tool_context(ctx: ToolContext) -> contextvars.Token[ToolContext]:
    return _current_context.set(ctx)


def reset_tool_context(token: contextvars.Token[ToolContext]) -> None:
    _current_context.reset(token)


__all__ = [
    "tool", "subagent", "DeclaredAgent", "tool_context", "emit", "ToolError", "ToolContext", "RegisteredTool", "ToolRegistry",
    "import_tool_module", "DEFAULT_MAX_ARG_CHARS",
]
