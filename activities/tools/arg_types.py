"""Argument types for tools that touch files, processes and shells.

The model writes the arguments, so treat them like user input: validate them
before any side effect. Use these in a tool's signature and the validation
runs (and its rejection goes back to the model) before the tool is called:

    @tool(side_effects=True)
    async def write_note(path: RelativePath, flag: NotAnOption, body: str) -> str: ...

Every plain `str` argument is also capped at REWIND_MAX_ARG_CHARS characters
(100,000 by default; the worker's registry applies it) unless its annotation
sets its own `max_length`.
"""

from __future__ import annotations

import posixpath
from typing import Annotated

from pydantic import AfterValidator, Field


def _relative_path(value: str) -> str:
    if not value or "\x00" in value or any(ord(c) < 32 for c in value):
        raise ValueError("path must be non-empty and contain no control characters")
    if value.startswith(("/", "\\", "~")) or (len(value) > 1 and value[1] == ":"):
        raise ValueError("path must be relative (no leading '/', '\\\\', '~' or drive letter)")
    normalized = posixpath.normpath(value.replace("\\", "/"))
    if normalized == ".." or normalized.startswith("../") or "/../" in f"/{normalized}/":
        raise ValueError("path must not leave its folder ('..')")
    if "%2e" in value.lower() or "%2f" in value.lower():
        raise ValueError("path must not contain URL-encoded dots or slashes")
    return normalized


def _not_an_option(value: str) -> str:
    if value.startswith("-"):
        raise ValueError("value must not start with '-' (it would be read as a command-line option)")
    return value


RelativePath = Annotated[str, Field(max_length=1024), AfterValidator(_relative_path)]
"""A path inside the tool's own folder: relative, no '..', no control characters."""

NotAnOption = Annotated[str, Field(max_length=4096), AfterValidator(_not_an_option)]
"""A value passed to a command line that must not be taken for an option."""

