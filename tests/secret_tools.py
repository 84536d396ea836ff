"""Tools that leak secrets (loaded by tests/faults/test_secrets.py as module `secret_tools`).

The secrets come from the worker's environment, as a careless real tool's would:
REWIND_TEST_API_KEY (listed in REWIND_SECRET_ENV), REWIND_TEST_AKIA (an AWS
access key id, caught by pattern only), REWIND_TEST_INTERNAL (caught by a
REWIND_REDACT_PATTERNS regex only).
"""

from __future__ import annotations

import os

from activities.tools.registry import ToolError, tool


@tool
async def show_config(section: str) -> dict:
    """Returns configuration, secrets included, nested in JSON."""
    return {
        "section": section,
        "api": {"key": os.environ["REWIND_TEST_API_KEY"], "header": f"Authorization: Bearer {os.environ['REWIND_TEST_API_KEY']}"},
        "aws": [f"access key id {os.environ['REWIND_TEST_AKIA']}"],
    }


@tool
async def login(user: str) -> str:
    """Fails with a message the model should see, quoting an internal token."""
    raise ToolError(f"login of {user} refused for token {os.environ['REWIND_TEST_INTERNAL']}")


@tool(max_attempts=2)
async def connect_db(name: str) -> str:
    """Raises (retried) with the API key in a connection string."""
    raise RuntimeError(f"cannot connect to postgres://app:{os.environ['REWIND_TEST_API_KEY']}@db/{name}")


@tool
async def echo(text: str) -> str:
    """Returns its argument (shows what the model's tool call carried)."""
    return f"echo: {text}"


@tool
async def big_text(marker: str, size: int) -> str:
    """`size` characters repeating `marker` (large enough for external payload storage)."""
    line = f"{marker} lorem ipsum\n"
    return (line * (size // len(line) + 1))[:size]


@tool(max_attempts=2)
async def fail_with(marker: str) -> str:
    """Raises with `marker` in the message (failure text in history)."""
    raise RuntimeError(f"failed on {marker}")


@tool
async def show_temporal_env(prefix: str) -> dict:
    """The worker's variables starting with `prefix` (TEMPORAL_: its API key too), as a careless debugging tool returns them."""
    return {k: v for k, v in os.environ.items() if k.startswith(prefix)}
