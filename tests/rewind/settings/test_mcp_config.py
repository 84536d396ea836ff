"""The mcpServers file: stdio and Streamable HTTP servers, ${VAR} in headers and env,
per-tool overrides; every bad input one line naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewind.settings.config import Settings
from workflows.vocabulary.errors import ConfigError


def _file(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _servers(path: Path, **env: str):
    return Settings.from_env({"REWIND_MCP_CONFIG": str(path), **env}).mcp_servers()


def _problem(path: Path, **env: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _servers(path, **env)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"REWIND_MCP_CONFIG={path}: "), text
    return text


def test_stdio_and_http_servers_with_variables_and_overrides(tmp_path) -> None:
    path = _file(tmp_path, {"mcpServers": {
        "fs": {"command": "node", "args": ["server.js", "/data"], "env": {"LEVEL": "${LEVEL}"}, "cwd": "/tmp",
               "rewind": {"tools": {"write_file": {"needs_approval": True, "on_repeat": "ask", "timeout_s": 5}}}},
        "api": {"type": "http", "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}", "X-Team": "a-${env:TEAM}-b"}},
        "off": {"command": "nothing", "disabled": True},
    }, "rewind": {"tools": {"api__create_ticket": {"idempotent": True}}}})
    fs, api = _servers(path, TOKEN="s3cret", TEAM="core", LEVEL="debug")
    assert (fs.name, fs.transport, fs.command, fs.args, fs.env, fs.cwd) == (
        "fs", "stdio", "node", ("server.js", "/data"), {"LEVEL": "debug"}, "/tmp")
    write = fs.overrides["write_file"]
    assert (write.needs_approval, write.on_repeat, write.timeout_s, write.side_effects) == (True, "ask", 5.0, None)
    assert (api.transport, api.url) == ("http", "https://mcp.example.com/mcp")
    assert api.headers == {"Authorization": "Bearer s3cret", "X-Team": "a-core-b"}
    assert api.overrides["create_ticket"].idempotent is True
    # Secrets never show in a repr (logs) or in describe().
    assert "s3cret" not in repr(api) and "s3cret" not in api.describe()


def test_a_compensation_names_a_tool_and_arguments_from_the_call(tmp_path) -> None:
    undo = {"tool": "move_file", "arguments": {"source": "{arguments.path}", "destination": "{arguments.path}.old"}}
    (fs,) = _servers(_file(tmp_path, {"mcpServers": {"fs": {
        "command": "node", "rewind": {"tools": {"write_file": {"compensate": undo}}}}}}))
    compensation = fs.overrides["write_file"].compensate
    assert (compensation.tool, compensation.arguments) == ("move_file", undo["arguments"])


def test_no_file_no_servers() -> None:
    assert Settings.from_env({}).mcp_servers() == []


def test_the_command_line_names_itself_in_errors(tmp_path) -> None:
    import argparse
    from rewind.worker.args import add_worker_arguments, worker_settings

    parser = argparse.ArgumentParser()
    add_worker_arguments(parser)
    path = _file(tmp_path, "{")
    settings, _ = worker_settings(parser.parse_args(["--mcp-config", str(path), "--approve-destructive"]),
                                  Settings.from_env({}), print)
    assert settings.approve_destructive
    with pytest.raises(ConfigError, match=rf"^--mcp-config={path}: not valid JSON"):
        settings.mcp_servers()


@pytest.mark.parametrize("doc, key, words", [
    ("{\"mcpServers\": {", "", "not valid JSON (line 1"),
    ({"servers": {}}, "mcpServers", "missing"),
    ({"mcpServers": []}, "mcpServers", "must be an object"),
    ({"mcpServers": {"fs": {"args": ["x"]}}}, "mcpServers.fs.command", "missing"),
    ({"mcpServers": {"fs": {"command": "  "}}}, "mcpServers.fs.command", "missing"),
    ({"mcpServers": {"fs": {"command": "node", "args": "x"}}}, "mcpServers.fs.args", "list of strings"),
    ({"mcpServers": {"fs": {"command": "node", "comand": "x"}}}, "mcpServers.fs.comand", "unknown key"),
    ({"mcpServers": {"a__b": {"command": "node"}}}, "mcpServers.a__b", "no '__'"),
    ({"mcpServers": {"web": {"type": "sse", "url": "http://h/sse"}}}, "mcpServers.web.type", "not supported"),
    ({"mcpServers": {"web": {"type": "http"}}}, "mcpServers.web.url", "missing"),
    ({"mcpServers": {"web": {"url": "ftp://h"}}}, "mcpServers.web.url", "not an http(s) URL"),
    ({"mcpServers": {"web": {"url": "http://h/mcp", "headers": {"A": 1}}}}, "mcpServers.web.headers.A", "string"),
    ({"mcpServers": {"web": {"url": "http://h/mcp", "headers": {"A": "Bearer ${NOPE}"}}}},
     "mcpServers.web.headers.A", "${NOPE}, which is not set; export NOPE"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"on_repeat": "again"}}}}}},
     "mcpServers.fs.rewind.tools.w.on_repeat", "'reuse' or 'ask' or 'run'"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"side_effect": True}}}}}},
     "mcpServers.fs.rewind.tools.w.side_effect", "unknown option"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"timeout_s": 0}}}}}},
     "mcpServers.fs.rewind.tools.w.timeout_s", "positive number"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tool": {}}}}}, "mcpServers.fs.rewind.tool", "unknown key"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"compensate": {"arguments": {}}}}}}}},
     "mcpServers.fs.rewind.tools.w.compensate.tool", "missing; compensate is {\"tool\": TOOL"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"compensate": {"tool": "m", "args": {}}}}}}}},
     "mcpServers.fs.rewind.tools.w.compensate.args", "unknown key"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"compensate": {
        "tool": "m", "arguments": {"source": "{path}"}}}}}}}},
     "mcpServers.fs.rewind.tools.w.compensate.arguments.source", "{path} is not a reference; write {arguments.NAME}"),
    ({"mcpServers": {"fs": {"command": "n", "rewind": {"tools": {"w": {"compensate": {
        "tool": "m", "arguments": {"to": ["{arguments.path}.old}"]}}}}}}}},
     "mcpServers.fs.rewind.tools.w.compensate.arguments.to.0", "a lone '}'"),
    ({"mcpServers": {"fs": {"command": "n"}}, "rewind": {"tools": {"git__commit": {"needs_approval": True}}}},
     "rewind.tools.git__commit", "no server 'git' in mcpServers (it has: fs)"),
])
def test_bad_input_is_one_line_naming_file_and_key(tmp_path, doc, key, words) -> None:
    text = _problem(_file(tmp_path, doc))
    if key:
        assert f": {key}: " in text, text
    assert words in text, text


def test_a_missing_file_is_named(tmp_path) -> None:
    text = _problem(tmp_path / "nope.json")
    assert "cannot read the MCP configuration file" in text
