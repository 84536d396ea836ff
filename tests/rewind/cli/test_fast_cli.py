"""`rewind start --fast` as a user runs it: the worker and the CLI as subprocesses."""

from __future__ import annotations

import json

from as_user import UserWorker, rewind


async def test_start_fast_runs_the_research_agent_from_the_cli(world, client):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--fast", "--task", "Research these companies: Acme, Globex",
                                      "--run-id", "fast-1", "--wait", "--json")
        assert code == 0, err + w.log()
        doc = json.loads(out)
        assert doc["status"]["state"] == "completed" and doc["status"]["step"] == 3
    code, out, err = await rewind(cli, env, "tree", "fast-1", "--json")
    assert code == 0, err
    assert [c["step_index"] for c in json.loads(out)["branches"]["main"]] == [0, 1, 2, 3]
    # The model calls and the read-only searches ran on the worker itself; save_report
    # (side effects) went through the server as an ordinary activity.
    events = [e async for e in client.get_workflow_handle("fast-1").fetch_history_events()]
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events if e.HasField("activity_task_scheduled_event_attributes")]
    assert "call_llm" not in scheduled and scheduled.count("run_tool") == 1, scheduled
