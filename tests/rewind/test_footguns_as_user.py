"""What a new user tripped over without a word: a JSON typo in `--set` taken as text,
a run started onto a queue nobody polls, a crashed worker that `status` did not name.
Each as the user met it: `rewind` and the worker as subprocesses, env only."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from as_user import UserWorker, one_line_error, rewind, rewind_json
from helpers import scripted

SLOW = '''
import asyncio
from pathlib import Path

from rewind import tool

STARTED = {started!r}


@tool(timeout_s=300, heartbeat_s=5)
async def slow_lookup(item: str) -> str:
    """Look an item up (slowly)."""
    Path(STARTED).write_text(item)
    await asyncio.sleep(240)
    return item
'''


async def test_a_json_typo_in_set_is_refused_and_set_text_keeps_text(world):
    cli = world.folder("cli")
    env = world.env(cli)
    for value in ('{"a":', "[1, 2", '"open'):
        code, out, err = await rewind(cli, env, "fork", "r-1", "--step", "1", "--branch", "b", "--set", f"x={value}")
        one_line_error(code, err, "--set x=", "is not valid JSON", "--set-text x=")
    code, out, err = await rewind(cli, env, "experiment", "r-1", "--step", "1", "--variant", 'v1:x={"a":')
    one_line_error(code, err, "--variant v1", "is not valid JSON", "JSON string")

    # Literal text that starts like JSON, and plain text, reach the branch as given.
    model = scripted(world.model, [{"content": "done"}])
    with UserWorker(world.folder("worker"), world.env(world.folder("worker"))) as worker:
        await worker.wait_ready()
        run = await rewind_json(cli, env, "start", "--task", "hi", "--model", model, "--run-id", "vars-1", "--wait")
        assert run["status"]["state"] == "completed", run
        forked = await rewind_json(cli, env, "fork", "vars-1", "--step", "0", "--branch", "b", "--set-text",
                                   'note={"a":', "--set", "tone=formal", "--set", 'depth={"n": 3}', "--wait")
        assert forked["status"]["state"] == "completed", forked
        head = await rewind_json(cli, env, "show", "vars-1:b:1")
    assert head["agent_variables"] == {"note": '{"a":', "tone": "formal", "depth": {"n": 3}}, head


async def test_start_and_fork_without_wait_say_when_no_worker_polls(world):
    cli = world.folder("cli")
    env = world.env(cli)
    code, out, err = await rewind(cli, env, "start", "--task", "nobody listens", "--run-id", "alone-1")
    assert code == 0 and out.strip() == "alone-1", out + err
    assert f"no worker is polling task queue '{world.queue}'" in err and "rewind worker" in err, err
    # With --json the document stays alone on stdout; the warning is still on stderr.
    code, out, err = await rewind(cli, env, "start", "--task", "nobody listens", "--run-id", "alone-2", "--json")
    assert code == 0 and out.startswith("{"), out
    assert "no worker is polling" in err, err

    # With a worker, nothing is said. This one answers from the offline model (no OPENAI_API_KEY)
    # with the scripts its --scripts names, as `rewind dev --scripts` does.
    folder = world.folder("worker")
    (folder / "scripts.json").write_text('{"hi": [{"content": "done"}]}')
    offline = world.env(folder, OPENAI_API_KEY=None, OPENAI_BASE_URL=None)
    with UserWorker(folder / "w", offline, "--scripts", "../scripts.json") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", "hi", "--model", "script:hi", "--run-id", "heard-1")
        assert code == 0 and err == "", err
        await rewind_json(cli, env, "status", "heard-1")
        for _ in range(100):
            if (view := await rewind_json(cli, env, "status", "heard-1"))["state"] == "completed":
                break
            await asyncio.sleep(0.2)
        assert view["status"]["final_answer"] == "done", view  # the script's answer
        code, out, err = await rewind(cli, env, "fork", "heard-1", "--step", "0", "--branch", "b1")
        assert code == 0 and err == "", err
    # A --scripts file that is not there stops the worker at once, in one line naming it.
    with UserWorker(folder / "w2", offline, "--scripts", "missing.json") as broken:
        one_line_error(await broken.wait_exit(), broken.stderr(), "--scripts missing.json: no such file")
    # A fork onto a queue nobody polls (a typo in REWIND_TASK_QUEUE, say) is told. (A worker
    # that just stopped stays listed by Temporal for minutes, so its queue is not the case.)
    lonely = {**env, "REWIND_TASK_QUEUE": world.queue + "-typo"}
    code, out, err = await rewind(cli, lonely, "fork", "heard-1", "--step", "0", "--branch", "b2")
    assert code == 0, err
    assert f"no worker is polling task queue '{world.queue}-typo'" in err, err


async def test_status_names_a_dead_worker_and_the_live_step(world, tmp_path: Path):
    folder = world.folder("shop")
    started = tmp_path / "started.txt"
    (folder / "slow.py").write_text(SLOW.format(started=str(started)))
    env = world.env(folder)
    model = scripted(world.model, [{"tool_calls": [{"name": "slow_lookup", "arguments": {"item": "tea"}}]},
                                   {"content": "done"}])
    cli = world.folder("cli")
    cenv = world.env(cli)
    worker = UserWorker(folder, env, "--tool-modules", "slow")
    with worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, cenv, "start", "--task", "tea?", "--model", model, "--run-id", "dead-worker-1")
        assert code == 0, err
        for _ in range(300):
            if started.exists():
                break
            await asyncio.sleep(0.1)
        assert started.exists(), worker.log()
        worker.kill()  # a crashed machine: its pollers stay listed by Temporal for a while

        began = time.monotonic()
        code, text, err = await rewind(cli, cenv, "status", "dead-worker-1")
        took = time.monotonic() - began
        assert code == 0, err
        assert f"no worker is polling task queue '{world.queue}'" in text, text
        assert "live status unavailable" not in text and "no poller seen" not in text, text
        # Its process is gone from this machine: said as such, without the wait for an answer.
        assert f"{worker.process.pid}@" in text and "a process of this machine that has exited" in text, text
        # The step it is on comes from Temporal (the running tool call), not only from the store:
        # its summary and activity (a heartbeat detail, the tool's name, only once it beat after 0.25 s).
        assert "running      step 1: slow_lookup(item='tea') (run_tool" in text, text
        assert "step         1 (live, from Temporal" in text and "step 1: slow_lookup(item='tea')" in text, text
        doc = await rewind_json(cli, cenv, "status", "dead-worker-1")
        assert doc["no_worker"] and doc["failure"] is None, doc
        assert doc["state"] == "running", doc
        print(f"status with a dead worker took {took:.2f}s")
