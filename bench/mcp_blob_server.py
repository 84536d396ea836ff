"""The MCP server of the MCP overhead benchmark (stdio): the same work as the bench's
@tool functions, so the difference is what an MCP call costs.

    blob(index, size)   readOnlyHint: `size` characters of deterministic text (bench.tools.blob)
    record(index)       no annotations (the MCP defaults: a non-idempotent side effect): "recorded N"
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from bench.tools import blob_text

server = MCPServer("rewind-bench")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def blob(index: int, size: int) -> str:
    return blob_text(index, size)


@server.tool()
def record(index: int) -> str:
    return f"recorded {index}"


if __name__ == "__main__":
    server.run("stdio")
