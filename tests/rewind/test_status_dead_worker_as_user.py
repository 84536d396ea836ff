"""`rewind status` of a run whose worker died mid-step, as a user runs it.

Temporal keeps listing a killed worker among a queue's pollers for minutes,
so the live query goes to a worker that will never answer. The status still
comes back, from the newest checkpoint, saying that no worker answers.
"""

from __future__ import annotations

import asyncio
import json

from as_user import UserWorker, rewind


async def test_status_of_a_run_whose_worker_died_answers_from_its_checkpoints(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    # Searches that last long enough for the worker to die inside one.
    worker_env = world.env(wdir, REWIND_DEMO_SEARCH_LATENCY_S="60")
    with UserWorker(wdir, worker_env, "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Acme, Globex",
                                      "--run-id", "orphan-1")
        assert code == 0, err
        for _ in range(300):  # until the run is inside a search (the step's checkpoint is written)
            code, out, err = await rewind(cli, env, "status", "orphan-1", "--json")
            view = json.loads(out) if code == 0 else {}
            if any(p.get("activity") == "run_tool" for p in view.get("pending", [])):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the run never reached its search: {out} {err} {w.log()}")
        w.kill()
    code, out, err = await rewind(cli, env, "status", "orphan-1", "--json")
    assert code == 0, err
    view = json.loads(out)
    assert view["state"] == "running", view
    assert view["source"] == "checkpoint" and view["status"] is not None, view
    assert "that answers" in (view.get("no_worker") or ""), view
    assert view["failure"] is None, view
