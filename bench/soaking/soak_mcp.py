"""The soak's MCP server (stdio), started by every soak worker (REWIND_MCP_CONFIG):

    find(term)          readOnlyHint: a deterministic answer
    post(channel, text) a side effect, idempotentHint (so retried with the same key): applied
                        once per idempotency key, the key read from the request's _meta
                        (`rewind/idempotency-key`), as a well-behaved server deduplicates

Like the soak's @tool functions (soak_tools.py) it keeps its own fsync'd ledger, one
line per execution: MCP calls carry no run or call ids, so the soak maps each effect
to its call afterwards by the idempotency key the checkpoints record.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

import soak_ledger  # this folder (the script's own)

server = MCPServer("soak-mcp")


def _ledger(**fields: object) -> None:
    soak_ledger.append("mcp", **fields)


def _key(ctx: Context) -> str | None:
    meta = ctx.request_context.meta
    if meta is None:
        return None
    dumped = meta if isinstance(meta, dict) else meta.model_dump(by_alias=True)
    return dumped.get("rewind/idempotency-key")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find(term: str) -> str:
    _ledger(tool="find", args={"term": term}, key=None)
    return f"found {term}: " + hashlib.sha256(term.encode()).hexdigest()[:16]


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
def post(channel: str, text: str, ctx: Context) -> str:
    key = _key(ctx)
    outbox = Path(os.environ["REWIND_SOAK_OUTBOX"]) / "mcp"
    outbox.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(outbox / str(key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        applied = False
    else:
        os.write(fd, f"{channel}: {text}".encode())
        os.fsync(fd)
        os.close(fd)
        applied = True
    _ledger(tool="post", args={"channel": channel, "text": text}, key=key, applied=applied)
    return f"posted to {channel}"


if __name__ == "__main__":
    server.run("stdio")
