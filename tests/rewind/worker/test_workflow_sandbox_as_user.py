"""REWIND_WORKFLOW_SANDBOX, as a user sets it: by default the worker runs Rewind's
workflow code without Temporal's sandbox (docs/performance.md), and a run, its fork and
its checkpoints come out the same as on a worker with REWIND_WORKFLOW_SANDBOX=1."""

from __future__ import annotations

import re

from as_user import UserWorker, one_line_error, rewind, rewind_json


async def _run_and_fork(cli, env, run_id: str) -> list[list[dict]]:  # type: ignore[no-untyped-def]
    """The final messages of a research run and of a fork of it at step 1 (effect keys,
    which derive from the run id, written as KEY)."""
    started = await rewind_json(cli, env, "start", "--task", "Research these companies: Acme, Globex", "--run-id", run_id,
                                "--wait")
    assert started["status"]["state"] == "completed", started
    forked = await rewind_json(cli, env, "fork", run_id, "--step", "1", "--branch", "terse", "--system-prompt",
                               "Be terse.", "--wait")
    assert forked["status"]["state"] == "completed", forked
    finals = []
    for branch, doc in (("main", started), ("terse", forked)):
        shown = await rewind_json(cli, env, "show", f"{run_id}:{branch}:{doc['status']['step']}")
        finals.append([{"role": m["role"], "content": re.sub(r"idem-[0-9a-f]{40}", "KEY", m.get("content") or "")}
                       for m in shown["messages"]])
    return finals


async def test_a_worker_without_the_sandbox_runs_the_same_runs(world):
    cli = world.folder("cli")
    sandboxed_queue = f"{world.queue}-sandboxed"
    with UserWorker(world.folder("w0"), world.env(world.folder("w0")),
                    "--tool-modules", "examples.research_agent") as off, \
         UserWorker(world.folder("w1"), world.env(world.folder("w1"), REWIND_TASK_QUEUE=sandboxed_queue,
                                                  REWIND_WORKFLOW_SANDBOX="1"),
                    "--tool-modules", "examples.research_agent") as on:
        await off.wait_ready()
        await on.wait_ready()
        assert "workflow sandbox on (REWIND_WORKFLOW_SANDBOX=1)" in on.stderr(), on.stderr()[-2000:]
        assert "workflow sandbox" not in off.stderr(), off.stderr()[-2000:]
        without = await _run_and_fork(cli, world.env(cli), "nosandbox-1")
        with_sandbox = await _run_and_fork(cli, world.env(cli, REWIND_TASK_QUEUE=sandboxed_queue), "sandbox-1")
    for branch, a, b in zip(("main", "terse"), without, with_sandbox):
        assert len(a) == len(b), (branch, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert x == y, (branch, i, x, y)


async def test_a_bad_value_is_one_line(world):
    wdir = world.folder("w")
    code, out, err = await rewind(wdir, world.env(wdir, REWIND_WORKFLOW_SANDBOX="sometimes"), "worker")
    one_line_error(code, err, "REWIND_WORKFLOW_SANDBOX", "use 1 or 0")
