"""A running activity's heartbeat: what `rewind status` shows of a call in flight.

The first beat goes out once the activity has run FIRST_BEAT_S (activities/liveness/heartbeat.py):
calls that end sooner send none. A call that runs longer is shown with its detail (the
tool's name) and keeps beating, so a killed worker's call is still handed over.
"""

from __future__ import annotations

import asyncio

from helpers import scripted, start_agent
from rewind.client import run_view


async def test_a_tool_call_in_flight_shows_its_tool_once_it_has_beaten(client, settings, model, worker, tmp_path,
                                                                       monkeypatch):
    gates = tmp_path / "gates"
    gates.mkdir()
    monkeypatch.setenv("REWIND_TEST_GATE_DIR", str(gates))
    name = scripted(model, [{"tool_calls": [{"name": "gate", "arguments": {"name": "open"}}]}, {"content": "done"}])
    handle = await start_agent(client, settings, "wait at the gate", model=name, tools=["gate"])
    seen = None
    for _ in range(400):
        view = await run_view(client, handle.id)
        calls = [p for p in view.pending if p["activity"] == "run_tool"]
        if calls and calls[0].get("detail"):
            seen = calls[0]
            break
        await asyncio.sleep(0.05)
    assert seen is not None and seen["detail"] == "gate", view.pending
    (gates / "open").touch()
    result = await handle.result()
    assert result.status.state == "completed"
