"""The soak's own ledger of what its tools did: one JSON line per event, appended and
fsync'd before the tool goes on, so a worker or MCP server SIGKILLed right after a tool
ran still leaves its line (the effects invariant reads it, invariants.py).

Imported as a top-level module by soak_tools.py (in the workers, with this folder on
PYTHONPATH) and by soak_mcp.py (a script run from this folder)."""

from __future__ import annotations

import json
import os
import time


def append(kind: str, **fields: object) -> None:
    """Append one event to the ledger at REWIND_SOAK_LEDGER (nothing without it)."""
    path = os.environ.get("REWIND_SOAK_LEDGER")
    if not path:
        return
    line = json.dumps({"kind": kind, "at": time.time(), "pid": os.getpid(), **fields}, sort_keys=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
