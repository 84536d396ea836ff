"""Each MCP server's tools as RegisteredTools, so every call takes the @tool path.

A tool `write_file` of server `fs` is offered as `fs__write_file`, with the
description and input schema the server gives. Its ToolSpec carries the policy
that activities/tools/mcp/policy.py derives from its annotations (side effects,
approval, on_repeat, timeouts) and an McpToolInfo saying why; from there the
tool is one of the worker's tools like any other: its calls are `run_tool`
activities (heartbeat, timeout, Temporal's retries) on its own tool queue, its
side effects get idempotency keys, effect identities, lineage reuse and
approvals from the same code as a @tool function's.

What is particular to MCP happens inside the call: the idempotency key goes to
the server in the request's `_meta` (`rewind/idempotency-key`); a side effect
that is not idempotent is marked as sent in the payload store before it goes
out, so no attempt ever sends it twice (a later attempt that finds the mark,
without a recorded result, answers that the effect's state is unknown).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from pydantic_core import InitErrorDetails, PydanticCustomError

from activities.tools.mcp.compensation import TemplateError, fill
from activities.tools.mcp.config import McpServerConfig
from activities.tools.mcp.policy import Policy, decide
from activities.tools.mcp.results import tool_output
from activities.tools.mcp.sessions import McpServer, SentUnanswered, ServerUnavailable, ToolGone
from activities.tools.registry import RegisteredTool, tool_context
from workflows.vocabulary.contracts import McpToolInfo, ToolSpec
from workflows.vocabulary.errors import CheckpointNotFoundError, ConfigError, ToolError

log = logging.getLogger("rewind.mcp")

SEPARATOR = "__"
IDEMPOTENCY_META = "rewind/idempotency-key"
# A model's tool name: OpenAI's limit.
_MAX_NAME = 64


class _NoArguments(pydantic.BaseModel):
    """Stands in for the argument model of @tool functions: MCP arguments meet the server's JSON schema."""


@dataclass
class McpTool(RegisteredTool):
    server: McpServer | None = None
    tool: str = ""
    policy: Policy | None = None
    validator: Any = None
    hub: "McpHub | None" = field(default=None, repr=False)

    def with_arg_cap(self, cap: int) -> "RegisteredTool":
        return self  # the server's schema is the contract, as the server gave it

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        errors = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            raise pydantic.ValidationError.from_exception_data(self.spec.name, [
                InitErrorDetails(type=PydanticCustomError("json_schema", "{message}", {"message": e.message}),
                                 loc=tuple(str(p) for p in e.absolute_path), input=e.instance)
                for e in errors[:10]
            ])
        return dict(arguments)

    def validated_json(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.validate(arguments)


class McpHub:
    """The worker's MCP servers: started at worker start, their tools as McpTools."""

    def __init__(self, configs: list[McpServerConfig], *, approve_destructive: bool = False,
                 log_dir: Path | None = None) -> None:
        self.servers = [McpServer(c, log_dir) for c in configs]
        self._approve_destructive = approve_destructive
        self._payloads: Any = None  # ObjectStore: the marks of sent requests
        self.outputs: Any = None  # OutputStore: images and resources by reference

    def bind(self, payloads: Any, outputs: Any) -> None:
        """The payload store (sent marks) and output store (binary content) the worker's tools use."""
        self._payloads, self.outputs = payloads, outputs

    async def start(self) -> list[McpTool]:
        """Start every server and list its tools; any problem is a ConfigError (one line)."""
        tools: list[McpTool] = []
        try:
            for server in self.servers:
                await server.start()
                tools.extend(self._tools_of(server))
        except BaseException:
            await self.close()
            raise
        return tools

    def _tools_of(self, server: McpServer) -> list[McpTool]:
        from jsonschema import exceptions, validators

        config = server.config
        for name, override in config.overrides.items():
            if name not in server.tools:
                raise ConfigError(f"{override.where}: MCP server {server.name} lists no tool {name!r} "
                                  f"(it lists: {', '.join(sorted(server.tools)) or 'none'})")
        found = []
        for name, listed in sorted(server.tools.items()):
            qualified = f"{server.name}{SEPARATOR}{name}"
            if len(qualified) > _MAX_NAME or not all(c.isalnum() or c in "_-" for c in qualified):
                raise ConfigError(f"{config.where}: tool {name!r} of MCP server {server.name} cannot be offered as "
                                  f"{qualified!r} (a model's tool name is at most {_MAX_NAME} letters, digits, "
                                  "'_' or '-'); rename the server shorter")
            schema = dict(listed.input_schema or {"type": "object"})
            try:
                cls = validators.validator_for(schema)
                cls.check_schema(schema)
                if schema.get("type", "object") != "object":
                    raise exceptions.SchemaError(f"type is {schema.get('type')!r}, not 'object'")
            except exceptions.SchemaError as exc:
                raise ConfigError(f"{config.where}: MCP server {server.name} lists tool {name!r} with an invalid "
                                  f"input schema ({str(exc.message).splitlines()[0][:200]}); fix or update the server") \
                    from None
            annotations = _annotations(listed)
            properties = list((schema.get("properties") or {}).keys())
            policy = decide(qualified, annotations, config.overrides.get(name),
                            approve_destructive=self._approve_destructive, properties=properties)
            spec = ToolSpec(
                name=qualified, description=listed.description or listed.title or "", parameters=schema,
                side_effects=policy.side_effects,
                approval="always" if policy.needs_approval else "never",
                mcp=McpToolInfo(server=server.name, tool=name, server_version=server.server_version,
                                annotations=annotations, idempotent=policy.idempotent, policy=policy.reasons),
            )
            spec = spec.model_copy(update=policy.options)
            tool = McpTool(fn=_caller(qualified), spec=spec, args_model=_NoArguments, server=server, tool=name,
                           policy=policy, validator=cls(schema), hub=self)
            tool.fn = _bound(tool)
            found.append(tool)
        by_name = {t.tool: t for t in found}
        for tool in found:
            undo = tool.policy.compensate if tool.policy else None
            if undo is None:
                continue
            target = by_name.get(undo.tool)
            if target is None:
                where = config.overrides[tool.tool].where
                raise ConfigError(f"{where}.compensate.tool: MCP server {server.name} lists no tool {undo.tool!r} "
                                  f"(it lists: {', '.join(sorted(server.tools)) or 'none'})")
            tool.compensate = _compensator(tool, target, undo.arguments)
        return found

    async def _sent_before(self, key: str) -> bool:
        try:
            await self._payloads.get(_sent_key(key))
            return True
        except CheckpointNotFoundError:
            return False

    async def _mark_sent(self, key: str) -> None:
        await self._payloads.put_if_absent(_sent_key(key), json.dumps({"idempotency_key": key}).encode())

    async def call(self, tool: McpTool, arguments: dict[str, Any]) -> Any:
        """One call of `tool` from inside its run_tool activity (see the module docstring)."""
        from mcp import MCPError

        assert tool.server is not None and tool.policy is not None
        server, policy, name = tool.server, tool.policy, tool.spec.name
        ctx = tool_context()
        key = ctx.idempotency_key
        once = policy.side_effects and not policy.idempotent and key is not None and self._payloads is not None
        def gone() -> ToolError:
            return ToolError(f"{name} is no longer offered by MCP server {server.name} (it lists: "
                             f"{', '.join(sorted(server.tools)) or 'none'}); use another tool")

        if tool.tool not in server.tools:
            raise gone()
        if once and ctx.attempt > 1 and await self._sent_before(key):  # type: ignore[arg-type]
            raise ToolError(_unknown(name, server.name, "an earlier attempt sent the request and no answer was recorded"))

        async def before_send() -> None:
            if once:
                await self._mark_sent(key)  # type: ignore[arg-type]

        meta = {IDEMPOTENCY_META: key} if key else None
        # Our own deadline, inside the activity's: a late answer is ours to report, not a timeout to retry.
        timeout_s = max(1.0, min(tool.spec.timeout_s - 2.0, tool.spec.timeout_s * 0.9))
        try:
            result = await server.call(tool.tool, arguments, meta=meta, timeout_s=timeout_s, once=once,
                                       before_send=before_send)
        except SentUnanswered as exc:
            if once:
                raise ToolError(_unknown(name, server.name, str(exc))) from None
            raise  # read-only or idempotent: Temporal retries the call
        except ServerUnavailable:
            raise  # nothing was sent: Temporal retries the call
        except ToolGone:
            raise gone() from None
        except MCPError as exc:
            if tool.tool not in server.tools:
                raise gone() from None
            raise ToolError(f"MCP server {server.name} refused the call (error {exc.code}): {exc.message}") from None
        if result.is_error and tool.tool not in server.tools:
            raise gone()
        return await tool_output(result, name, self.outputs)

    def describe(self) -> list[str]:
        return [f"{s.name} ({s.server_version or 'no version'}, {len(s.tools)} tools)" for s in self.servers]

    async def close(self) -> None:
        for server in self.servers:
            try:
                await server.close()
            except Exception as exc:  # noqa: BLE001 - stopping anyway
                log.warning("MCP server %s did not close cleanly: %s", server.name, exc)


def _compensator(tool: McpTool, target: McpTool, template: dict[str, Any]) -> Any:
    """The `compensate` of `tool` (called by the compensate_tool activity with the original
    call's arguments and output): `target` called with `template` filled from them."""
    async def undo(arguments: dict[str, Any], output: Any) -> Any:
        assert tool.hub is not None
        try:
            filled = fill(template, arguments, output)
        except TemplateError as exc:
            raise ToolError(f"compensation of {tool.spec.name} by {target.spec.name}: arguments{exc.where}: {exc}") \
                from None
        try:
            checked = target.validate(filled)
        except pydantic.ValidationError as exc:
            raise ToolError(f"compensation of {tool.spec.name}: {target.spec.name} does not take these arguments "
                            f"({exc.errors()[0]['msg']}); fix the compensate block of {tool.tool}") from None
        return await tool.hub.call(target, checked)

    return undo


def _unknown(name: str, server: str, what: str) -> str:
    return (f"{name}: the effect's state is unknown: {what}. The server does not mark this tool idempotent, so it "
            f"is not sent again; check whether the effect happened (e.g. with a read-only tool of {server}) before "
            "calling it again")


def _sent_key(key: str) -> str:
    return f"mcp-sent/{key}.json"


def _annotations(listed: Any) -> dict[str, Any]:
    found = getattr(listed, "annotations", None)
    if found is None:
        return {}
    return {k: v for k, v in found.model_dump(by_alias=True, exclude_none=True).items()}


def _caller(qualified: str) -> Any:
    async def call(**arguments: Any) -> Any:
        raise AssertionError(f"{qualified}: not bound to its hub")

    return call


def _bound(tool: McpTool) -> Any:
    async def call(**arguments: Any) -> Any:
        assert tool.hub is not None
        return await tool.hub.call(tool, arguments)

    call.__module__ = f"mcp:{tool.spec.name}"
    return call


__all__ = ["McpHub", "McpTool", "IDEMPOTENCY_META", "SEPARATOR"]
