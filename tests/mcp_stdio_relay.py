"""A stdio relay in front of a real MCP server, for crash tests.

    python stdio_relay.py COMMAND ARGS...      (RELAY_HOLD_TOOL, RELAY_HOLD_S, RELAY_HELD_FILE)

Lines go through unchanged, except that the server's answer to a `tools/call` of
RELAY_HOLD_TOOL is held for RELAY_HOLD_S seconds, and RELAY_HELD_FILE gets a line
when it is: the server has acted, its answer has not reached the client yet. A
test SIGKILLs the client's worker then, which is the window in which a call's
effect happened and Temporal does not know it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

HOLD_TOOL = os.environ.get("RELAY_HOLD_TOOL", "")
HOLD_S = float(os.environ.get("RELAY_HOLD_S", "0") or 0)
HELD_FILE = os.environ.get("RELAY_HELD_FILE", "")


def _message(line: bytes) -> dict | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def main() -> None:
    server = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    held: set = set()

    def upstream() -> None:
        assert server.stdin is not None
        for line in sys.stdin.buffer:
            msg = _message(line)
            if msg and msg.get("method") == "tools/call" and (msg.get("params") or {}).get("name") == HOLD_TOOL:
                held.add(msg.get("id"))
            server.stdin.write(line)
            server.stdin.flush()
        server.stdin.close()

    threading.Thread(target=upstream, daemon=True).start()
    assert server.stdout is not None
    for line in server.stdout:
        msg = _message(line)
        if msg and "method" not in msg and msg.get("id") in held:
            held.discard(msg.get("id"))
            if HELD_FILE:
                with open(HELD_FILE, "a") as f:
                    f.write(f"{msg.get('id')}\n")
            time.sleep(HOLD_S)
        try:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            break
    server.terminate()


if __name__ == "__main__":
    main()
