"""The CLI a user meets: every command a subprocess in an empty folder,
configured only through environment variables, against the real servers."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from as_user import BIN, UserWorker, one_line_error, rewind, user_env
from helpers import scripted


def write_module(folder: Path, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(body)


ALPHA = '''
import os
from activities.tools.registry import tool


@tool
async def alpha(x: str) -> str:
    """Alpha: answered by the worker that has the alpha module."""
    return f"alpha({x}) by {os.getpid()}"
'''

BETA = ALPHA.replace("alpha", "beta").replace("Alpha", "Beta")


async def test_worker_loads_tool_modules_from_its_folder_and_takes_a_task_queue(world):
    """`rewind worker --tool-modules mymod --task-queue Q` in a folder holding mymod.py: no PYTHONPATH."""
    folder = world.folder("w")
    write_module(folder, "mymod", ALPHA)
    env = world.env(folder)
    env.pop("REWIND_TASK_QUEUE")  # the queue comes from the flag
    with UserWorker(folder, env, "--tool-modules", "mymod", "--task-queue", world.queue) as w:
        await w.wait_ready()
        cli = world.folder("cli")
        name = scripted(world.model, [{"tool_calls": [{"name": "alpha", "arguments": {"x": "1"}}]}, {"content": "done"}])
        code, out, err = await rewind(cli, world.env(cli), "start", "--task", "use alpha", "--tools", "alpha",
                                      "--model", name, "--wait", "--json")
        assert code == 0, err + w.log()
        doc = json.loads(out)
        assert doc["status"]["state"] == "completed" and doc["status"]["tool_calls_done"] == 1


@pytest.mark.parametrize("body, where, what", [
    ("from activities.tools.registry import tool\n\n\ndef broken(:\n    pass\n", "broken_tools.py:4", "syntax error"),
    ("import os\nraise RuntimeError('no database configured')\n", "broken_tools.py:2",
     "RuntimeError: no database configured"),
    ("import no_such_dependency_here\n", "broken_tools.py:1", "ModuleNotFoundError"),
    ("from rewind import tool\n\n\n@tool\nasync def f(x):\n    return x\n", "broken_tools.py:4", "needs a type hint"),
])
async def test_a_broken_tool_module_is_one_line_with_file_line_and_error(world, body, where, what):
    folder = world.folder("w")
    write_module(folder, "broken_tools", body)
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "worker", "--tool-modules", "broken_tools", cwd=folder, env=world.env(folder),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    one_line_error(proc.returncode, err.decode(), where, what, "broken_tools")


@pytest.mark.parametrize("args, needle", [
    (["start", "--task", "t", "--max-steps", "0"], "--max-steps: 0 must be at least 1"),
    (["start", "--task", "t", "--max-steps", "-1"], "--max-steps: -1 must be at least 1"),
    (["start", "--task", "t", "--max-cost", "-0.5"], "--max-cost: -0.5 must be more than 0"),
    (["start", "--task", "t", "--max-tokens", "-3"], "--max-tokens: -3 must be more than 0"),
    # A zero budget would still let one paid step run before pausing.
    (["start", "--task", "t", "--max-cost", "0"], "--max-cost: 0 must be more than 0"),
    (["start", "--task", "t", "--max-tokens", "0"], "--max-tokens: 0 must be more than 0"),
    (["continue", "r", "--max-tokens", "0"], "--max-tokens: 0 must be more than 0"),
    (["start", "--task", ""], "--task: is empty"),
    (["start", "--task", "   "], "--task: is empty"),
    (["fork", "r", "--step", "1", "--branch", "b", "--max-steps", "0"], "--max-steps: 0 must be at least 1"),
    (["continue", "r", "--max-cost", "-1"], "--max-cost: -1 must be more than 0"),
    (["fork", "r", "--step", "-2", "--branch", "b"], "--step: -2 must be at least 0"),
])
async def test_impossible_budgets_and_an_empty_task_are_refused(world, args, needle):
    cli = world.folder("cli")
    code, out, err = await rewind(cli, world.env(cli), *args)
    one_line_error(code, err, needle)
    assert code == 2 and out == ""


async def test_every_command_takes_json(world):
    cli = world.folder("cli")
    env = world.env(cli)
    code, out, _ = await rewind(cli, env, "--help")
    commands = re.search(r"\{([a-z,]+)\}", out).group(1).split(",")  # type: ignore[union-attr]
    assert {"start", "status", "export", "worker", "server", "demo", "health"} <= set(commands)
    for command in commands:
        code, out, err = await rewind(cli, env, command, "--help")
        assert code == 0 and "--json" in out, (command, out, err)


async def test_broken_pipe_export_json_status_without_worker_and_ids(world, tmp_path):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Acme, Globex",
                                      "--run-id", "pipe-1", "--wait", "--json")
        assert code == 0, err + w.log()
    # The worker is gone: a finished run's status comes from Temporal's result, one state, nothing pending.
    code, out, err = await rewind(cli, env, "status", "pipe-1", "--json")
    assert code == 0, err
    view = json.loads(out)
    assert view["state"] == "completed" and view["status"]["step"] == 3 and view["pending"] == []
    assert view["source"] == "result" and view["failure"] is None
    code, out, err = await rewind(cli, env, "status", "pipe-1")
    assert code == 0 and out.splitlines()[0] == "run pipe-1 (branch main): completed", out
    assert "live status unavailable" not in out and "running " not in out and "workflow" not in out

    # The id column of `rewind tree` is what `show` takes; anything else says where ids come from.
    code, out, err = await rewind(cli, env, "tree", "pipe-1")
    shown = {line.split()[5] for line in out.splitlines()[2:] if len(line.split()) > 6}
    assert "pipe-1:main:3" in shown, out
    code, out, err = await rewind(cli, env, "show", "8430905257")
    one_line_error(code, err, "expected RUN:BRANCH:STEP", "the id column of `rewind tree RUN`")

    # `rewind show ... --json | head -1`: no BrokenPipeError, no traceback.
    shell = subprocess.run(f"'{BIN}/rewind' show pipe-1:main:3 --json | head -1", shell=True, cwd=cli, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shell.stdout == "{\n" and shell.stderr == "", shell.stderr

    code, out, err = await rewind(cli, env, "export", "pipe-1:main:3", "--out", "cp.json", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bytes"] == (cli / "cp.json").stat().st_size and doc["checkpoint"] == "pipe-1:main:3"

    # Every id every command takes is validated, and an echoed id is shortened.
    long_id = "x" * 5000
    for args in (["continue", long_id, "--max-steps", "5"], ["continue", "pipe-1", "--branch", long_id, "--max-steps", "5"],
                 ["mirror", "pipe-1", "--branch", long_id], ["diff", "pipe-1", "main", long_id],
                 ["diff", "pipe-1", long_id, "main"], ["status", "pipe-1", "--branch", long_id],
                 ["continue", "RUN--../../etc/passwd", "--max-steps", "5"], ["mirror", "pipe-1", "--branch", "../../etc/passwd"],
                 ["diff", "pipe-1", "main", "../x"], ["fork", "pipe-1", "--step", "1", "--branch", "ok", "--from-branch", long_id],
                 ["rollback", "pipe-1", "--step", "1", "--branch", long_id], ["show", long_id], ["tree", long_id]):
        code, out, err = await rewind(cli, env, *args)
        one_line_error(code, err)
        assert len(err) < 400 and "workflow not found" not in err and long_id not in err, (args, err)
        assert "id" in err, (args, err)


async def test_status_says_when_no_worker_polls_a_running_run(world):
    cli = world.folder("cli")
    env = world.env(cli)
    code, out, err = await rewind(cli, env, "start", "--task", "nobody listens", "--run-id", "lonely-1")
    assert code == 0, err
    code, out, err = await rewind(cli, env, "status", "lonely-1")
    assert code == 0, err
    assert f"no worker is polling task queue '{world.queue}'" in out, out
    code, out, err = await rewind(cli, env, "status", "lonely-1", "--json")
    assert json.loads(out)["no_worker"] and json.loads(out)["state"] != "completed"


def _run_in_pty(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float, until: str | None = None) -> str:
    """Run a command on a pseudo-terminal (what a person at a terminal sees); returns its output."""
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env={**env, "TERM": "dumb"}, stdin=child_fd, stdout=child_fd,
                            stderr=child_fd, close_fds=True)
    os.close(child_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main_fd], [], [], 0.2)
            if ready:
                try:
                    data = os.read(main_fd, 65536)
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
                if until and until in b"".join(chunks).decode(errors="replace"):
                    break
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(main_fd)
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


async def test_wait_shows_live_progress_on_a_terminal_and_is_quiet_otherwise(world):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    # Searches long enough that a poll of a loaded machine still sees one running.
    with UserWorker(wdir, world.env(wdir, REWIND_DEMO_SEARCH_LATENCY_S="4"), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        shown = await asyncio.to_thread(
            _run_in_pty, [str(BIN / "rewind"), "start", "--task", "Research these companies: Acme, Globex",
                          "--run-id", "tty-1", "--wait"], cli, env, 120)
        assert "run tty-1 started; progress:" in shown, shown + w.log()
        lines = [line for line in shown.splitlines() if line.strip().startswith("step")]
        assert len(lines) >= 2, shown
        assert all(re.search(r"step +\d+ \| \w+ +\| +\d+ tokens \| \$[0-9.]+ \| tool calls \d+ \(cache hits \d+\) \| running ", line)
                   for line in lines), lines
        assert any("running run_tool search_company" in line for line in lines), lines
        assert shown.rstrip().splitlines()[-1].startswith("run tty-1 (main): completed") or "completed" in shown
        # Not a terminal: no progress lines; --json: one document.
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Initech", "--run-id",
                                      "tty-2", "--wait")
        assert code == 0 and "progress" not in out and not any(l.strip().startswith("step") for l in out.splitlines()), out
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Initech", "--run-id",
                                      "tty-3", "--wait", "--json")
        assert code == 0 and json.loads(out)["status"]["state"] == "completed"


async def test_an_unreachable_model_endpoint_is_named_while_retries_go_on(world, client):
    cli, wdir = world.folder("cli"), world.folder("w")
    dead = "http://127.0.0.1:9/v1"
    with UserWorker(wdir, world.env(wdir, OPENAI_BASE_URL=dead), "--tool-modules", "examples.research_agent") as w:
        await w.wait_ready()
        env = world.env(cli)
        shown = await asyncio.to_thread(
            _run_in_pty, [str(BIN / "rewind"), "start", "--task", "Research these companies: Acme", "--run-id",
                          "dead-1", "--wait"], cli, env, 60, "is unreachable")
        # The progress line is polled, so which attempt it catches first depends on the machine's load.
        assert re.search(rf"retrying call_llm \(attempt \d+: model API at {re.escape(dead)} is unreachable", shown), shown
        code, out, err = await rewind(cli, env, "status", "dead-1", "--json")
        pending = json.loads(out)["pending"]
        assert pending and pending[0]["activity"] == "call_llm" and dead in pending[0]["last_failure"], out
        code, out, err = await rewind(cli, env, "status", "dead-1")
        assert "running      call_llm attempt" in out and dead in out, out
        await client.get_workflow_handle("dead-1").terminate("test over")


async def test_old_tools_spelling_on_the_worker_still_works_with_a_deprecation_line(world):
    folder = world.folder("w")
    write_module(folder, "mymod", ALPHA)
    for args, extra in ((["--tools", "mymod"], {}), ([], {"REWIND_TOOLS": "mymod"})):
        env = world.env(folder, **extra)
        proc = subprocess.Popen([str(BIN / "rewind"), "worker", "--json", *args], cwd=folder, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            assert ready["tools"] == ["alpha"] and ready["task_queue"] == world.queue
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert "deprecated" in err and ("--tool-modules" in err or "REWIND_TOOL_MODULES" in err), err


async def test_workers_with_different_tool_modules_share_a_queue(world, tmp_path):
    """Tool sets are per worker: each call reaches a worker that has the tool, whichever
    worker runs the workflow; an unknown tool is refused before anything is created."""
    a, b, cli = world.folder("a"), world.folder("b"), world.folder("cli")
    write_module(a, "alpha_tools", ALPHA)
    write_module(b, "beta_tools", BETA)
    with UserWorker(a, world.env(a), "--tool-modules", "alpha_tools") as wa, \
            UserWorker(b, world.env(b), "--tool-modules", "beta_tools") as wb:
        await wa.wait_ready()
        await wb.wait_ready()
        env = world.env(cli)
        turns = [{"tool_calls": [{"name": "alpha", "arguments": {"x": str(i)}}, {"name": "beta", "arguments": {"x": str(i)}}]}
                 for i in range(4)]
        name = scripted(world.model, [*turns, {"content": "both answered"}])
        for run in ("mixed-1", "mixed-2", "mixed-3"):
            code, out, err = await rewind(cli, env, "start", "--task", "use both", "--tools", "alpha,beta",
                                          "--model", name, "--run-id", run, "--wait", "--json")
            assert code == 0, err + wa.log() + wb.log()
            doc = json.loads(out)
            assert doc["status"]["state"] == "completed" and doc["status"]["tool_calls_done"] == 8, doc
        code, out, err = await rewind(cli, env, "show", "mixed-1:main:4", "--json")
        outputs = [r["tool_output"] for r in json.loads(out)["tool_call_cache"]]
        assert all(o.startswith("alpha(") and f"by {wa.process.pid}" in o for o in outputs if o.startswith("alpha"))
        assert all(f"by {wb.process.pid}" in o for o in outputs if o.startswith("beta"))
        assert {o.split("(")[0] for o in outputs} == {"alpha", "beta"}

        # A run with no --tools gets the tools of the worker that answers, and still works.
        code, out, err = await rewind(cli, env, "start", "--task", "use what you have", "--model",
                                      scripted(world.model, [{"content": "nothing to do"}]), "--wait", "--json")
        assert code == 0 and json.loads(out)["status"]["state"] == "completed", err

        # `fork --tools nosuchtool` is refused before anything is created; the name stays free.
        code, out, err = await rewind(cli, env, "fork", "mixed-1", "--step", "2", "--branch", "tryit", "--tools", "nosuchtool")
        one_line_error(code, err, "nosuchtool", "--tool-modules")
        code, out, err = await rewind(cli, env, "tree", "mixed-1", "--json")
        assert "tryit" not in json.loads(out)["branches"]
        code, out, err = await rewind(cli, env, "fork", "mixed-1", "--step", "2", "--branch", "tryit", "--tools", "beta",
                                      "--wait", "--json")
        assert code == 0, err
        # `start --tools nosuchtool` too.
        code, out, err = await rewind(cli, env, "start", "--task", "t", "--tools", "alpha,nosuchtool")
        one_line_error(code, err, "nosuchtool")
        # A run that fails while `--wait` waits says why on stderr, in one line, exit 1; --json on stdout.
        code, out, err = await rewind(cli, env, "start", "--task", "t", "--model", "script:nope", "--run-id",
                                      "nope-1", "--wait")
        one_line_error(code, err, "run nope-1 (main) failed: ", "no script named 'nope'")
        assert code == 1 and "failed" not in out, out
        code, out, err = await rewind(cli, env, "start", "--task", "t", "--model", "script:nope", "--run-id",
                                      "nope-2", "--wait", "--json")
        assert code == 1 and json.loads(out)["state"] == "failed" and not err, out + err


async def test_two_servers_or_demos_cannot_open_one_database(tmp_path):
    env = user_env(tmp_path, REWIND_DEMO_FAILURE_RATE="0", REWIND_DEMO_SEARCH_LATENCY_S="1")
    port = _free_port()
    first = subprocess.Popen([str(BIN / "rewind"), "server", "--port", str(port), "--ui-port", str(_free_port())],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "Temporal dev server on" in first.stdout.readline()  # type: ignore[union-attr]
        code, out, err = await rewind(tmp_path, env, "server", "--port", str(_free_port()), "--ui-port", str(_free_port()),
                                      timeout_s=60)
        one_line_error(code, err, "temporal.db is in use by process", str(first.pid), "rewind server")
        # A demo beside `rewind server` (as the README's "Using it" has one running) uses that server.
        code, out, err = await rewind(tmp_path, env, "demo", timeout_s=120)
        assert code == 0, err
        assert f"Temporal dev server already running on 127.0.0.1:{port}" in out, out
        assert "report (" in out and "# Competitive" in out, out
        assert first.poll() is None  # and leaves it running
        # The fan-out demo saves no report: it shows none, not the report the first demo left in the outbox.
        code, out, err = await rewind(tmp_path, env, "demo", "--fanout", timeout_s=120)
        assert code == 0, err
        assert "finished: completed" in out and "report (" not in out, out
    finally:
        first.terminate()
        first.wait(30)
    # Once the first is gone the database is free again. The demo holding it searches for
    # 8 s: a second `rewind demo` takes seconds just to start on a loaded machine, and must
    # find the first still running.
    holding = {**env, "REWIND_DEMO_SEARCH_LATENCY_S": "8"}
    demo = subprocess.Popen([str(BIN / "rewind"), "demo"], cwd=tmp_path, env=holding, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "started; progress" not in line:
            line = demo.stdout.readline()  # type: ignore[union-attr]
            assert line, demo.stderr.read()  # type: ignore[union-attr]
        code, out, err = await rewind(tmp_path, env, "demo", timeout_s=60)
        one_line_error(code, err, "temporal.db is in use by process", str(demo.pid), "rewind demo")
        assert demo.wait(120) == 0
    finally:
        if demo.poll() is None:
            demo.kill()


def _free_port() -> int:
    from rewind.temporal.dev_server import free_port

    return free_port()
