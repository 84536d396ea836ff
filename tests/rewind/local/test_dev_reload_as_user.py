"""`rewind dev` keeps going while a user works: a worker killed from another shell starts
again, an edit of the tools module is live without a second command, a syntax error is
said once and its fix recovers; runs in flight carry on on the new worker."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path

from as_user import empty_dir, rewind, rewind_json, user_env
from rewind.temporal.dev_server import free_port
from test_dev_as_user import Dev, processes_of

TOOLS = '''
import asyncio
from pathlib import Path

from rewind import tool


@tool
async def lookup_price(item: str) -> str:
    """The price of one item."""
    return f"{item}: PRICE EUR"


@tool(timeout_s=300)
async def wait_for(name: str) -> str:
    """Wait until the file `name` exists (each attempt noted in attempts.txt)."""
    with open("attempts.txt", "a") as f:
        f.write(name + "\\n")
    while not Path(name).exists():
        await asyncio.sleep(0.05)
    return f"{name} is there"
'''

SCRIPTS = {
    "price": [{"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}}]}, {"echo_tool_results": True}],
    "held": [{"tool_calls": [{"name": "wait_for", "arguments": {"name": "go"}}]},
             {"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}}]},
             {"echo_tool_results": True}],
}


def tools_folder(tmp_path: Path, name: str, price: str = "12.50") -> Path:
    folder = empty_dir(tmp_path, name)
    (folder / "shop.py").write_text(TOOLS.replace("PRICE", price))
    (folder / "scripts.json").write_text(json.dumps(SCRIPTS))
    return folder


def start_dev(folder: Path, *args: str) -> tuple[Dev, dict[str, str]]:
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0")
    return Dev(folder, env, "--tool-modules", "shop", "--scripts", "scripts.json", "--ui-port", str(free_port()),
               *args), env


def worker_pid(log: str) -> int:
    """The worker's pid as the user reads it: the banner's `worker: pid N`, or the newest
    `the worker polls again (pid N)` line."""
    pids = re.findall(r"worker:\s+pid (\d+)|the worker polls again \(pid (\d+)\)", log)
    return int(next(p for p in pids[-1] if p))


async def until(dev: Dev, text: str, count: int) -> None:
    """Until `text` is in the log `count` times."""
    deadline = time.monotonic() + 90
    while dev.log().count(text) < count:
        assert dev.process.poll() is None, f"rewind dev exited with {dev.process.returncode}:\n{dev.log()}"
        assert time.monotonic() < deadline, f"{text!r} not {count} times after 90s:\n{dev.log()}"
        await asyncio.sleep(0.1)


async def until_lines(path: Path, count: int) -> None:
    deadline = time.monotonic() + 90
    while not path.exists() or len(path.read_text().splitlines()) < count:
        assert time.monotonic() < deadline, f"{path.name} has not {count} lines after 90s"
        await asyncio.sleep(0.1)


async def until_ended(folder: Path, env: dict[str, str], run_id: str) -> dict:
    deadline = time.monotonic() + 90
    while True:
        view = await rewind_json(folder, env, "status", run_id)
        if view["state"] not in ("running", "starting"):
            return view
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.2)


async def stop(dev: Dev, folder: Path) -> None:
    if dev.process.poll() is None:
        dev.process.send_signal(signal.SIGINT)
    code = await dev.wait_exit()
    assert code == 0, dev.log()
    assert processes_of(folder) == []


async def test_dev_survives_a_killed_worker_and_an_edit_and_the_run_in_flight_completes(tmp_path):
    folder = tools_folder(tmp_path, "loop")
    dev, env = start_dev(folder)
    try:
        await dev.wait_for("Ctrl-C stops the worker and the server")
        assert "reload:      on a change to shop.py (and the .py files beside it), scripts.json" in dev.log()
        held = await rewind_json(folder, env, "start", "--task", "hold", "--model", "script:held")
        while not (folder / "attempts.txt").exists():  # the run is in its wait_for call
            await asyncio.sleep(0.05)

        # A crash, as the README's crash test makes one: SIGKILL of the pid the banner shows.
        first = worker_pid(dev.log())
        os.kill(first, signal.SIGKILL)
        await dev.wait_for(f"rewind dev: the worker (pid {first}) exited with code -9 (SIGKILL); starting it again")
        view = await rewind_json(folder, env, "status", held["run_id"])  # the server keeps serving
        assert view["state"] == "running", view
        await until(dev, "the worker polls again", 1)
        assert worker_pid(dev.log()) != first
        await until_lines(folder / "attempts.txt", 2)  # the killed call runs again, on the new worker

        # An edit of the tools module: the worker restarts on its own, a new run sees the new tool.
        # The held call is in flight: it is handed back when the old worker stops, and runs again.
        (folder / "shop.py").write_text(TOOLS.replace("PRICE", "99.00"))
        await dev.wait_for("rewind dev: shop.py changed: restarting the worker")
        await until(dev, "the worker polls again", 2)
        after = await rewind_json(folder, env, "start", "--task", "price", "--model", "script:price", "--wait")
        assert after["final_answer"] == "tea: 99.00 EUR", after

        # The run started before the kill and the edit completes on the new worker; its next
        # tool call after the edit ran the new code.
        (folder / "go").touch()
        view = await until_ended(folder, env, held["run_id"])
        assert view["state"] == "completed" and view["status"]["final_answer"] == "tea: 99.00 EUR", view
        await until_lines(folder / "attempts.txt", 3)
        assert dev.log().count("exited with code") == 1, dev.log()
    finally:
        await stop(dev, folder)


async def test_dev_says_a_syntax_error_once_and_a_fix_recovers(tmp_path):
    folder = tools_folder(tmp_path, "typo")
    dev, env = start_dev(folder)
    try:
        await dev.wait_for("Ctrl-C stops the worker and the server")
        (folder / "shop.py").write_text(TOOLS.replace("PRICE", "11.00") + "\ndef broken(:\n")
        await dev.wait_for("before it polled")
        # Nothing to do until the next change: a run started now waits for a worker.
        code, out, err = await rewind(folder, env, "start", "--task", "price", "--model", "script:price",
                                      "--run-id", "while-broken")
        assert code == 0 and "no worker is polling" in err, out + err
        (folder / "shop.py").write_text(TOOLS.replace("PRICE", "11.00"))
        await dev.wait_for("rewind dev: shop.py changed: starting the worker")
        await until(dev, "the worker polls again", 1)
        log = dev.log()
        assert log.count("syntax error at") == 1 and log.count("before it polled") == 1, log
        assert "it starts again on the next change to shop.py" in log, log

        view = await until_ended(folder, env, "while-broken")
        assert view["state"] == "completed" and view["status"]["final_answer"] == "tea: 11.00 EUR", view
    finally:
        await stop(dev, folder)


async def test_dev_no_reload_leaves_the_worker_as_it_started(tmp_path):
    folder = tools_folder(tmp_path, "still")
    dev, env = start_dev(folder, "--no-reload")
    try:
        await dev.wait_for("Ctrl-C stops the worker and the server")
        assert "reload:      off (--no-reload)" in dev.log()
        (folder / "shop.py").write_text(TOOLS.replace("PRICE", "99.00"))
        # The worker that runs this has the module as it was when rewind dev started.
        run = await rewind_json(folder, env, "start", "--task", "price", "--model", "script:price", "--wait")
        assert run["final_answer"] == "tea: 12.50 EUR", run
        assert "changed" not in dev.log()
    finally:
        await stop(dev, folder)
