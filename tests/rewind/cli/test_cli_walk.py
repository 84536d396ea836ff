"""What a new user met walking the README: each case as they ran it, the CLI
and the worker as subprocesses in empty folders, configured by environment."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time

from as_user import BIN, UserWorker, one_line_error, rewind, user_env

RESEARCH = "Research these companies: Acme, Globex"  # three steps with the scripted model


async def _start_wait(cli, env, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "start", *args, "--wait", cwd=cli, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )


async def _until_running(cli, env, run_id: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code, out, _ = await rewind(cli, env, "status", run_id, "--json")
        if code == 0 and json.loads(out)["state"] == "running" and json.loads(out)["status"]:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"run {run_id} never showed as running")


async def test_wait_on_a_cancelled_run_exits_3_and_cancel_of_an_ended_run_is_refused(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    # Slow searches keep the run going while it is cancelled.
    with UserWorker(wdir, world.env(wdir, REWIND_DEMO_SEARCH_LATENCY_S="10"), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        waiting = await _start_wait(cli, env, "--task", RESEARCH, "--run-id", "cancel-1")
        await _until_running(cli, env, "cancel-1")
        code, out, err = await rewind(cli, env, "cancel", "cancel-1")
        assert code == 0, err
        out_b, err_b = await asyncio.wait_for(waiting.communicate(), 60)
        assert waiting.returncode == 3, (out_b, err_b)  # stopped without completing: not a failure
        assert "cancel-1 (main): cancelled" in out_b.decode() and "failed" not in out_b.decode()
        code, out, err = await rewind(cli, env, "status", "cancel-1", "--json")
        assert json.loads(out)["state"] == "cancelled"
        code, out, err = await rewind(cli, env, "cancel", "cancel-1")
        one_line_error(code, err, "has already ended (cancelled); nothing to cancel")


async def test_the_budget_hint_is_a_command_that_continues_the_run(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", RESEARCH, "--run-id", "hint-1", "--max-steps", "1", "--wait")
        assert code == 3, out + err
        for _ in range(3):  # each pause names the command that raises its budget; paste it
            hint = re.search(r"`(rewind continue [^`]+)`", out)
            assert hint, out
            words = hint.group(1).split()
            assert words[:3] == ["rewind", "continue", "hint-1"], words
            code, out, err = await rewind(cli, env, *words[1:], "--wait")
            if code == 0:
                break
            assert code == 3, out + err
        assert code == 0 and "hint-1 (main): completed" in out, out + err
        # On a fork, the hint names the branch too.
        code, out, err = await rewind(cli, env, "fork", "hint-1", "--step", "1", "--branch", "b2", "--max-steps", "2", "--wait")
        assert code == 3 and "rewind continue hint-1 --branch b2 --max-steps 4" in out, out + err
        code, out, err = await rewind(cli, env, "continue", "hint-1", "--branch", "b2", "--max-steps", "4", "--wait")
        assert code == 0, out + err
        # Tiny cost budgets read as numbers, not as 1e-07.
        code, out, err = await rewind(cli, env, "start", "--task", RESEARCH, "--run-id", "hint-2",
                                      "--max-cost", "0.0000001", "--model", "gpt-4o-mini", "--wait")
        assert code == 3 and "would pass $0.0000001" in out and "e-0" not in out, out + err


async def test_revision_names_work_wherever_a_branch_is_named(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", RESEARCH, "--run-id", "rev-1", "--wait")
        assert code == 0, err
        code, out, err = await rewind(cli, env, "rollback", "rev-1", "--step", "1", "--wait")
        assert code == 0, out + err
        # `main` now is its revision main.r1; both names reach it.
        code, out, err = await rewind(cli, env, "diff", "rev-1", "main", "main.r1", "--json")
        assert code == 0, err
        assert json.loads(out)["b"]["name"] == "main.r1"
        code, out, err = await rewind(cli, env, "fork", "rev-1", "--step", "2", "--from-branch", "main.r1",
                                      "--branch", "from-r1", "--wait", "--json")
        assert code == 0 and json.loads(out)["fork_point"] == "rev-1:main.r1:2", out + err
        code, out, err = await rewind(cli, env, "rollback", "rev-1", "--step", "1", "--branch", "main.r1", "--wait", "--json")
        assert code == 0, out + err
        second = json.loads(out)
        # Only what this rollback undid: main.r1's own steps. Its save_report repeated the report
        # main had saved (discarded by the first rollback), so it was reused, not run: no effect to list.
        assert second["invalidated"] == ["rev-1:main.r1:2", "rev-1:main.r1:3"], second
        assert second["side_effects"] == [], second["side_effects"]
        # main.r1 is an older revision now: it cannot be continued in place...
        code, out, err = await rewind(cli, env, "rollback", "rev-1", "--step", "1", "--branch", "main.r1")
        one_line_error(code, err, "'main.r1' is not the newest revision of branch 'main' (that is 'main.r2')")
        # ...but it can be forked and compared, as can the original main (main.r0).
        code, out, err = await rewind(cli, env, "fork", "rev-1", "--step", "1", "--from-branch", "main.r1",
                                      "--branch", "from-old", "--json")
        assert code == 0 and json.loads(out)["fork_point"] == "rev-1:main:1", out + err
        for a, b in (("main.r1", "main.r2"), ("main.r0", "main")):
            code, out, err = await rewind(cli, env, "diff", "rev-1", a, b, "--json")
            assert code == 0, err
            d = json.loads(out)
            assert d["fork_point"]["checkpoint_id"] == "rev-1:main:1", d["fork_point"]
            assert d["a"]["head_checkpoint_id"] == f"rev-1:{'main.r1' if a == 'main.r1' else 'main'}:3", d["a"]
        code, out, err = await rewind(cli, env, "fork", "rev-1", "--step", "1", "--branch", "said", "--wait")
        assert code == 0 and out.startswith("forked rev-1:main:1 into branch said\n"), out + err


async def test_status_shows_the_live_run_while_the_checkpoint_store_is_down(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    # Searches that take longer than the test: the run is still running when it ends (cancelled).
    with UserWorker(wdir, world.env(wdir, REWIND_DEMO_SEARCH_LATENCY_S="60"), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        env = world.env(cli)
        waiting = await _start_wait(cli, env, "--task", RESEARCH, "--run-id", "down-1")
        await _until_running(cli, env, "down-1")
        # The CLI's store is an S3 endpoint nobody answers on.
        down = world.env(cli, REWIND_STORE="s3://gone/cp", AWS_ENDPOINT_URL="http://127.0.0.1:9",
                         AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
        code, out, err = await rewind(cli, down, "status", "down-1")
        assert code == 0, err
        assert out.splitlines()[0] == "run down-1 (branch main): running", out
        assert "store        unreachable: REWIND_STORE=s3://gone/cp" in out, out
        code, out, err = await rewind(cli, down, "status", "down-1", "--json")
        view = json.loads(out)
        assert view["state"] == "running" and view["source"] == "query" and "gone" in view["store_error"]
        code, out, err = await rewind(cli, env, "cancel", "down-1")
        assert code == 0, err
        await asyncio.wait_for(waiting.communicate(), 90)


async def test_export_to_stdout_version_and_tools_nobody_can_check(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    code, out, err = await rewind(cli, env, "--version")
    assert code == 0 and re.fullmatch(r"rewind \d+\.\d+\.\d+\n", out), out + err
    # --tools with no worker at all on the queue: said, and the run waits for one.
    code, out, err = await rewind(cli, env, "start", "--task", "t", "--tools", "lookup", "--run-id", "later-1")
    assert code == 0 and out.strip() == "later-1", out + err
    # In the words of `rewind status`, with what the start adds.
    assert err.startswith(f"rewind: no worker is polling task queue {world.queue!r}; start one (`rewind worker`)"), err
    assert "; --tools could not be checked (the run waits" in err and err.count("\n") == 1, err
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        # A tool no worker has is refused, naming what the workers offer (and the name meant).
        code, out, err = await rewind(cli, env, "start", "--task", "t", "--tools", "search_compny,save_report")
        one_line_error(code, err, "'search_compny' (did you mean search_company?)",
                       "a worker of the queue offers save_report, search_company", "--tool-modules")
        code, out, err = await rewind(cli, env, "start", "--task", RESEARCH, "--run-id", "out-1", "--wait")
        assert code == 0, err
    code, out, err = await rewind(cli, env, "export", "out-1:main:3", "--out", "-")
    assert code == 0 and err == "", err
    assert json.loads(out)["checkpoint_id"] == "out-1:main:3"
    assert not (cli / "-").exists()


async def test_ctrl_c_while_waiting_says_the_run_goes_on(world):
    cli = world.folder("cli")
    env = world.env(cli)  # no worker: the run waits for one, and so does `--wait`
    proc = subprocess.Popen([str(BIN / "rewind"), "start", "--task", "t", "--run-id", "ctrlc-1", "--wait"], cwd=cli,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # until the run exists, then interrupt the wait
            code, out, _ = await rewind(cli, env, "status", "ctrlc-1", "--json")
            if code == 0:
                break
            assert time.monotonic() < deadline, "the run was never started"
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "stopped waiting; run ctrlc-1 (main) goes on (`rewind status ctrlc-1`)" in err, err
    assert "Traceback" not in err
    code, out, _ = await rewind(cli, env, "status", "ctrlc-1", "--json")
    assert json.loads(out)["state"] == "running"


async def test_demo_into_a_closed_pipe_leaves_no_server_behind(tmp_path):
    env = user_env(tmp_path, REWIND_DEMO_FAILURE_RATE="0")
    demo = subprocess.Popen([str(BIN / "rewind"), "demo"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    first = demo.stdout.readline()  # type: ignore[union-attr]
    assert "Temporal dev server on" in first, first
    demo.stdout.close()  # type: ignore[union-attr]  # `rewind demo | head -1`
    assert demo.wait(120) == 0
    db = str(tmp_path / ".rewind" / "temporal.db")
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, ".rewind/temporal.db", str(tmp_path))]
    assert not leftovers, f"dev server(s) {leftovers} on {db} outlived the demo"


def _cmdline_has(pid: str, *needles: str) -> bool:
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return "start-dev" in cmdline and needles[0] in cmdline and cwd.startswith(needles[1])


async def test_health_says_gone_for_a_killed_worker_not_yet_reaped(world):
    wdir = world.folder("w")
    worker = subprocess.Popen([str(BIN / "rewind"), "worker", "--tool-modules", "examples.research_agent"], cwd=wdir,
                              env=world.env(wdir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while not list((wdir / ".rewind").glob("worker-health.*.json")):
            assert time.monotonic() < deadline and worker.poll() is None, "worker never became ready"
            await asyncio.sleep(0.1)
        code, out, err = await rewind(wdir, world.env(wdir), "health")
        assert code == 0, out + err
        os.kill(worker.pid, signal.SIGKILL)  # a crash: nobody has reaped it yet (a zombie)
        await asyncio.sleep(0.3)
        code, out, err = await rewind(wdir, world.env(wdir), "health")
        assert code == 1 and f"worker process {worker.pid} is gone" in out, out + err
    finally:
        worker.kill()
        worker.wait()


async def test_health_per_task_queue_and_waiting_on_nobody_is_said(world):
    folder = world.folder("both")  # two workers of different queues in one folder, as the README's try-it does
    env_a, env_b = world.env(folder), world.env(folder, REWIND_TASK_QUEUE=world.queue + "-try")
    with UserWorker(folder / "a", env_a, "--tool-modules", "examples.research_agent") as a, \
            UserWorker(folder / "b", env_b, "--tool-modules", "examples.research_agent") as b:
        await a.wait_ready()
        await b.wait_ready()
        b.kill()
        code, out, err = await rewind(folder / "b", env_b, "health")
        assert code == 1 and "gone" in out, out + err  # b's own file: it does not report a's health
        code, out, err = await rewind(folder / "a", env_a, "health")
        assert code == 0, out + err
    cli = world.folder("cli")
    nobody = world.env(cli, REWIND_TASK_QUEUE=world.queue + "-nobody")
    waiting = await _start_wait(cli, nobody, "--task", "t", "--run-id", "nobody-1")
    line = await asyncio.wait_for(waiting.stderr.readline(), 60)
    assert b"no worker is polling task queue" in line and b"Ctrl-C stops the waiting, not the run" in line, line
    code, out, err = await rewind(cli, nobody, "cancel", "nobody-1")
    assert code == 0 and "so it takes effect when one picks the run up" in out, out + err
    code, out, err = await rewind(cli, nobody, "status", "nobody-1")
    assert "a cancellation is requested" in out, out
    waiting.kill()
    await waiting.wait()
    for bad in ("inf", "nan"):
        code, out, err = await rewind(cli, nobody, "start", "--task", "t", "--max-cost", bad)
        one_line_error(code, err, f"--max-cost: '{bad}' is not a finite number")
