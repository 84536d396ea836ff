"""An MCP server of the tests' own, for what the reference servers do not show:

    python mcp_test_server.py stdio|http PORT [--bad-schema]

    note(text)        no annotations at all: the MCP defaults (a destructive, non-idempotent
                      side effect); appends to $NOTES_FILE the text and the idempotency key the
                      request's _meta carried
    echo(text)        readOnlyHint: answers the text (not listed once $HIDE_ECHO_FILE exists)
    picture()         readOnlyHint: a small PNG (image content, stored by reference)
    --bad-schema      also lists `broken`, whose input schema is not a JSON schema
"""

from __future__ import annotations

import base64
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations

PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()

server = MCPServer("rewind-test-server")


@server.tool()
def note(text: str, ctx: Context) -> str:
    meta = ctx.request_context.meta
    key = None
    if meta is not None:
        dumped = meta if isinstance(meta, dict) else meta.model_dump(by_alias=True)
        key = dumped.get("rewind/idempotency-key")
    with open(os.environ["NOTES_FILE"], "a") as f:
        f.write(json.dumps({"text": text, "key": key}) + "\n")
    return f"noted {text!r}"


def echo(text: str) -> str:
    return text


# A server updated under a worker: once $HIDE_ECHO_FILE exists, a new start no longer lists echo.
if not os.path.exists(os.environ.get("HIDE_ECHO_FILE") or "/nonexistent"):
    server.tool(annotations=ToolAnnotations(read_only_hint=True))(echo)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> list:
    return [TextContent(type="text", text="a 1x1 picture"), ImageContent(type="image", data=PNG, mime_type="image/png")]


if "--bad-schema" in sys.argv:
    @server.tool()
    def broken(a: int) -> int:
        return a

    server._tool_manager.get_tool("broken").parameters = {"type": "object", "properties": {"a": {"type": "integr"}}}


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
