"""Temporal restarting under a waiting `rewind start --wait --json`: the SDK's core
retries its calls and warns about it, and none of that reaches the command's stdout
(which holds its one JSON document) or, without REWIND_DEBUG, its stderr.

The SDK's default runtime prints those warnings on stdout (rewind/temporal/runtime.py);
the soak found it when its own report came out unreadable.
"""

from __future__ import annotations

import asyncio
import json
import time

from as_user import BIN, UserWorker
from rewind.temporal.dev_server import DevServer, free_port, port_open

TOOLS = '''
import asyncio

from rewind import tool


@tool
async def pause(seconds: float) -> str:
    """Wait a little."""
    await asyncio.sleep(seconds)
    return f"paused {seconds}s"
'''


async def test_json_output_stays_one_document_while_temporal_restarts(world, tmp_path):
    port, ui_port = free_port(), free_port()
    db = tmp_path / "server" / "temporal.db"
    server = DevServer.start(db, port=port, ui_port=ui_port, headless=True)
    try:
        wdir, cli = world.folder("w"), world.folder("cli")
        (wdir / "slowtools.py").write_text(TOOLS)
        world.model.add_script("slow-steps", [
            *({"tool_calls": [{"name": "pause", "arguments": {"seconds": 1.5}}]} for _ in range(4)),
            {"content": "done after the pauses"},
        ])
        with UserWorker(wdir, world.env(wdir, TEMPORAL_ADDRESS=server.address), "--tool-modules", "slowtools") as w:
            await w.wait_ready()
            proc = await asyncio.create_subprocess_exec(
                str(BIN / "rewind"), "start", "--task", "pause a few times", "--model", "script:slow-steps",
                "--run-id", "restart-json-1", "--wait", "--json", cwd=cli, env=world.env(cli, TEMPORAL_ADDRESS=server.address),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            first = tmp_path / "store" / "runs" / "restart-json-1" / "branches" / "main" / "steps" / "00000000.json"
            deadline = time.monotonic() + 60
            while not first.exists():
                assert time.monotonic() < deadline and proc.returncode is None, "the run never wrote step 0"
                await asyncio.sleep(0.1)
            server.kill()  # while the command waits for the run
            while port_open("127.0.0.1", port):
                await asyncio.sleep(0.1)
            await asyncio.sleep(4.0)
            server = DevServer.start(db, port=port, ui_port=ui_port, headless=True)
            out, err = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        server.kill()
    stdout, stderr = out.decode(), err.decode()
    assert proc.returncode == 0, stderr
    doc = json.loads(stdout)  # the whole of stdout: its one document, no line of Temporal's core
    assert doc["status"]["state"] == "completed", doc
    assert "retried" not in stderr and "WARN" not in stderr, stderr
