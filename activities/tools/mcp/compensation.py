"""The arguments of an MCP compensation, filled from the call it undoes.

An override `"compensate": {"tool": "move_file", "arguments": {"source": "{arguments.path}",
"destination": "{arguments.path}.rolled-back"}}` names the original call's arguments
(and `{output}`, what the server answered) in string values:

    "{arguments.path}"               the value itself, any JSON type (the whole string is one reference)
    "{arguments.path}.rolled-back"   text: the value inserted as text (JSON for objects and lists)
    "{arguments.edits.0.newText}"    a path into objects (keys) and lists (indexes)
    "{{literal}}"                    braces

Nothing else is evaluated: a reference is a path, never an expression, so a
configuration file cannot make the worker run code.
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_PATH = re.compile(r"^(arguments|output)((?:\.[A-Za-z0-9_-]+)*)$")


class TemplateError(ValueError):
    """A reference that is malformed or names nothing; `where` is the key path inside the arguments."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


def _parts(text: str, where: str) -> list[str | tuple[str, ...]]:
    """`text` as literal strings and reference paths, in order."""
    parts: list[str | tuple[str, ...]] = []
    at = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[at:match.start()])
        at = match.end()
        token = match.group(0)
        if token in ("{{", "}}"):
            parts.append(token[0])
        elif match.group(1) is None:
            raise TemplateError(where, f"a lone {token!r} in {text!r}; write {token * 2} for a literal brace")
        else:
            found = _PATH.match(match.group(1).strip())
            if not found:
                raise TemplateError(where, f"{{{match.group(1)}}} is not a reference; write {{arguments.NAME}} "
                                           "(with .KEY or .INDEX to go deeper) or {output}")
            parts.append((found.group(1), *[p for p in found.group(2).split(".") if p]))
    parts.append(text[at:])
    return [p for p in parts if p != ""]


def _walk(value: Any, where: str) -> list[tuple[str, str]]:
    """Every string of `value` with its key path: (where, text) pairs."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _walk(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _walk(v, f"{where}.{i}")]
    return []


def references(template: dict[str, Any]) -> list[tuple[str, ...]]:
    """The paths `template` names (a TemplateError for a malformed one)."""
    return [p for where, text in _walk(template, "") for p in _parts(text, where) if isinstance(p, tuple)]


def _lookup(path: tuple[str, ...], arguments: dict[str, Any], output: Any, where: str) -> Any:
    value: Any = arguments if path[0] == "arguments" else output
    for i, step in enumerate(path[1:], start=1):
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise TemplateError(where, f"{{{'.'.join(path)}}} names nothing in the call being undone "
                                       f"({'.'.join(path[:i])} has no {step!r})")
    return value


def fill(template: Any, arguments: dict[str, Any], output: Any, where: str = "") -> Any:
    """`template` with every reference replaced by what it names in the original call."""
    if isinstance(template, dict):
        return {k: fill(v, arguments, output, f"{where}.{k}") for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, arguments, output, f"{where}.{i}") for i, v in enumerate(template)]
    if not isinstance(template, str):
        return template
    parts = _parts(template, where)
    if len(parts) == 1 and isinstance(parts[0], tuple):
        return _lookup(parts[0], arguments, output, where)
    text = []
    for part in parts:
        if isinstance(part, str):
            text.append(part)
        else:
            value = _lookup(part, arguments, output, where)
            text.append(value if isinstance(value, str) else json.dumps(value))
    return "".join(text)


__all__ = ["TemplateError", "fill", "references"]
