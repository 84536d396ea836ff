"""The `mcpServers` configuration file (the format Claude Desktop, Cursor, VS Code and
the OpenAI Agents SDK read), parsed into `activities.tools.mcp.config` data.

    {"mcpServers": {
        "fs":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
                "env": {...}, "cwd": "...",
                "rewind": {"tools": {"write_file": {"needs_approval": true, "on_repeat": "ask"}}}},
        "api": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}}}

`${VAR}` in a header or env value is the variable's value, so no secret sits in the
file. Every problem is one line naming the file and the key. The environment is
handed in (rewind/settings/config.py is the one module that reads it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from activities.tools.mcp.compensation import TemplateError, references
from activities.tools.mcp.config import OVERRIDE_KEYS, Compensation, McpServerConfig, ToolOverride
from workflows.vocabulary.errors import ConfigError

# A server's tools are offered as NAME__TOOL: the name must fit a model's tool name.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")
_SERVER_KEYS = {"type", "command", "args", "env", "cwd", "url", "headers", "rewind", "disabled", "description"}


class _Problem(Exception):
    def __init__(self, key: str, text: str) -> None:
        super().__init__(f"{key}: {text}")


def parse_mcp_config(path: Path, environ: Mapping[str, str], *, setting: str = "REWIND_MCP_CONFIG") -> list[McpServerConfig]:
    """The servers the file at `path` configures (a ConfigError names the file and the key)."""
    where = f"{setting}={path}"
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the MCP configuration file ({exc.strerror or exc}); "
                          "check the path") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON (line {getattr(exc, 'lineno', '?')}, column "
                          f"{getattr(exc, 'colno', '?')}: {getattr(exc, 'msg', exc)}); the file holds "
                          '{"mcpServers": {NAME: {...}}}') from None
    try:
        return _servers(doc, environ, str(path))
    except _Problem as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _servers(doc: Any, environ: Mapping[str, str], path: str) -> list[McpServerConfig]:
    if not isinstance(doc, dict) or "mcpServers" not in doc:
        raise _Problem("mcpServers", 'missing; the file holds {"mcpServers": {NAME: {...}}}')
    entries = doc["mcpServers"]
    if not isinstance(entries, dict):
        raise _Problem("mcpServers", f"must be an object of servers by name, not {type(entries).__name__}")
    servers = []
    for name, entry in entries.items():
        key = f"mcpServers.{name}"
        if not _SERVER_NAME.match(name) or "__" in name:
            raise _Problem(key, "a server name is 1-32 letters, digits, '-' or '_' (no '__': tools are offered as "
                                "NAME__TOOL)")
        if not isinstance(entry, dict):
            raise _Problem(key, f"must be an object, not {type(entry).__name__}")
        if entry.get("disabled") is True:
            continue
        servers.append(_server(name, entry, environ, key, path))
    # Top-level overrides name SERVER__TOOL (or SERVER.TOOL): the server must be one of the file's.
    extra = _object(doc.get("rewind", {}), "rewind")
    unknown_rewind = set(extra) - {"tools"}
    if unknown_rewind:
        raise _Problem(f"rewind.{sorted(unknown_rewind)[0]}", "unknown key; the top-level rewind block has only \"tools\"")
    by_name = {s.name: s for s in servers}
    for qualified, block in _object(extra.get("tools", {}), "rewind.tools").items():
        key = f"rewind.tools.{qualified}"
        server_name, sep, tool_name = qualified.partition("__")
        if not sep:
            server_name, sep, tool_name = qualified.partition(".")
        if not sep or not tool_name:
            raise _Problem(key, "name a tool as SERVER__TOOL, e.g. fs__write_file")
        if server_name not in by_name:
            raise _Problem(key, f"no server {server_name!r} in mcpServers (it has: {', '.join(by_name) or 'none'})")
        server = by_name[server_name]
        server.overrides[tool_name] = _override(block, key, path)
    return servers


def _server(name: str, entry: dict[str, Any], environ: Mapping[str, str], key: str, path: str) -> McpServerConfig:
    unknown = set(entry) - _SERVER_KEYS
    if unknown:
        raise _Problem(f"{key}.{sorted(unknown)[0]}", "unknown key; a server has command/args/env/cwd (stdio) or "
                                                      "url/headers (Streamable HTTP), and an optional rewind block")
    kind = entry.get("type")
    if kind is not None and kind not in ("stdio", *_HTTP_TYPES):
        hint = " (the older HTTP+SSE transport is not supported: use the server's Streamable HTTP endpoint)" \
            if kind == "sse" else ""
        raise _Problem(f"{key}.type", f"{kind!r} is not a transport Rewind speaks; use \"stdio\" or \"http\"{hint}")
    http = kind in _HTTP_TYPES or (kind is None and "url" in entry and "command" not in entry)
    rewind = _object(entry.get("rewind", {}), f"{key}.rewind")
    unknown_rewind = set(rewind) - {"tools"}
    if unknown_rewind:
        raise _Problem(f"{key}.rewind.{sorted(unknown_rewind)[0]}", "unknown key; a server's rewind block has only \"tools\"")
    overrides = {tool: _override(block, f"{key}.rewind.tools.{tool}", path)
                 for tool, block in _object(rewind.get("tools", {}), f"{key}.rewind.tools").items()}
    if http:
        url = entry.get("url")
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            raise _Problem(f"{key}.url", f"{'missing' if url is None else repr(url) + ' is not an http(s) URL'}; a "
                                         "Streamable HTTP server needs its endpoint, e.g. \"https://host/mcp\"")
        headers = {h: _expand(v, f"{key}.headers.{h}", environ)
                   for h, v in _strings(entry.get("headers", {}), f"{key}.headers").items()}
        return McpServerConfig(name=name, transport="http", url=url, headers=headers, overrides=overrides,
                               where=f"{path}: {key}")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise _Problem(f"{key}.command", "missing; a stdio server needs the command that starts it (e.g. \"npx\"), "
                                         "or give \"url\" for a Streamable HTTP server")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise _Problem(f"{key}.args", "must be a list of strings")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _Problem(f"{key}.cwd", "must be a folder path (a string)")
    env = {k: _expand(v, f"{key}.env.{k}", environ) for k, v in _strings(entry.get("env", {}), f"{key}.env").items()}
    return McpServerConfig(name=name, transport="stdio", command=command, args=tuple(args), env=env, cwd=cwd,
                           overrides=overrides, where=f"{path}: {key}")


def _object(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Problem(key, f"must be an object, not {type(value).__name__}")
    return value


def _strings(value: Any, key: str) -> dict[str, str]:
    value = _object(value, key)
    for name, item in value.items():
        if not isinstance(item, str):
            raise _Problem(f"{key}.{name}", f"must be a string, not {type(item).__name__}")
    return value


def _expand(value: str, key: str, environ: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        variable = match.group(1).removeprefix("env:")  # VS Code spells it ${env:VAR}
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", variable):
            raise _Problem(key, f"${{{match.group(1)}}} is not a variable name")
        found = environ.get(variable)
        if not found:
            raise _Problem(key, f"names ${{{variable}}}, which is not set; export {variable} for the worker")
        return found

    return _VARIABLE.sub(one, value)


def _override(block: Any, key: str, path: str) -> ToolOverride:
    block = _object(block, key)
    unknown = set(block) - set(OVERRIDE_KEYS)
    if unknown:
        raise _Problem(f"{key}.{sorted(unknown)[0]}", f"unknown option; an override sets {', '.join(OVERRIDE_KEYS)}")
    fields: dict[str, Any] = {}
    for name in ("side_effects", "idempotent", "needs_approval"):
        if name in block:
            if not isinstance(block[name], bool):
                raise _Problem(f"{key}.{name}", f"must be true or false, not {block[name]!r}")
            fields[name] = block[name]
    for name, allowed in (("on_repeat", ("reuse", "ask", "run")), ("on_timeout", ("reject", "approve"))):
        if name in block:
            if block[name] not in allowed:
                raise _Problem(f"{key}.{name}", f"must be {' or '.join(map(repr, allowed))}, not {block[name]!r}")
            fields[name] = block[name]
    for name in ("effect_key", "cache_ignore"):
        if name in block:
            items = block[name]
            if not isinstance(items, list) or not items or not all(isinstance(i, str) and i for i in items):
                raise _Problem(f"{key}.{name}", "must be a non-empty list of argument names")
            fields[name] = tuple(items)
    for name in ("timeout_s", "heartbeat_s", "approval_timeout_s"):
        if name in block:
            value = block[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 7 * 24 * 3600:
                raise _Problem(f"{key}.{name}", f"must be a positive number of seconds, not {value!r}")
            fields[name] = float(value)
    if "max_attempts" in block:
        value = block["max_attempts"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _Problem(f"{key}.max_attempts", f"must be a whole number of at least 1, not {value!r}")
        fields["max_attempts"] = value
    if "compensate" in block:
        fields["compensate"] = _compensation(block["compensate"], f"{key}.compensate")
    return ToolOverride(**fields, where=f"{path}: {key}")


def _compensation(block: Any, key: str) -> Compensation:
    shape = '{"tool": TOOL, "arguments": {...}} (a tool of the same server, its arguments may say "{arguments.NAME}")'
    block = _object(block, key)
    unknown = set(block) - {"tool", "arguments"}
    if unknown:
        raise _Problem(f"{key}.{sorted(unknown)[0]}", f"unknown key; compensate is {shape}")
    tool = block.get("tool")
    if not isinstance(tool, str) or not tool:
        raise _Problem(f"{key}.tool", f"missing; compensate is {shape}")
    arguments = _object(block.get("arguments", {}), f"{key}.arguments")
    try:
        references(arguments)
    except TemplateError as exc:
        raise _Problem(f"{key}.arguments{exc.where}", str(exc)) from None
    return Compensation(tool=tool, arguments=arguments)


__all__ = ["parse_mcp_config"]
