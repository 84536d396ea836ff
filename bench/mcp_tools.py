"""The @tool side of the MCP overhead benchmark: `record`, a side effect doing what the
MCP server's `record` does (bench/mcp_blob_server.py); `blob` comes from bench.tools."""

from __future__ import annotations

from activities.tools.registry import tool


@tool(side_effects=True)
async def record(index: int) -> str:
    """A side effect: 'recorded N'."""
    return f"recorded {index}"
