"""`rewind dev` as a user meets it: one foreground command in an empty folder with a
tools module, the other commands from a second shell, Ctrl-C leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from as_user import BIN, empty_dir, one_line_error, rewind, user_env
from rewind.temporal.dev_server import free_port

SHOP = '''
from pathlib import Path
from rewind import tool


@tool
async def lookup_price(item: str) -> str:
    """The price of one item."""
    return f"{item}: 12.50 EUR"


@tool(side_effects=True)
async def place_order(item: str) -> str:
    """Place an order (counts its executions in orders.txt)."""
    with open("orders.txt", "a") as f:
        f.write(item + "\\n")
    return f"ordered {item}"
'''

SCRIPTS = {"shop": [
    {"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}}]},
    {"tool_calls": [{"name": "place_order", "arguments": {"item": "tea"}}]},
    {"content": "Ordered tea for 12.50 EUR."},
]}


def shop_folder(tmp_path: Path) -> Path:
    folder = empty_dir(tmp_path, "shop")
    (folder / "shop.py").write_text(SHOP)
    (folder / "scripts.json").write_text(json.dumps(SCRIPTS))
    return folder


def processes_of(folder: Path) -> list[str]:
    """Live processes whose command line or environment names `folder` (its server, its worker)."""
    needle = str(folder).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if stat in ("Z", "X"):
                continue
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except (OSError, IndexError):
            continue
        if needle in cmdline or needle in environ:
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"{entry.name}: {shown}")
    return found


class Dev:
    """`rewind dev ARGS...` in `folder`, its output in a file."""

    def __init__(self, folder: Path, env: dict[str, str], *args: str) -> None:
        self.log_path = folder.parent / f"{folder.name}.dev.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen([str(BIN / "rewind"), "dev", *args], cwd=folder, env=env,
                                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_for(self, text: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            assert self.process.poll() is None, f"rewind dev exited with {self.process.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout_s:.0f}s:\n{self.log()}"
            await asyncio.sleep(0.1)

    async def wait_exit(self, timeout_s: float = 60.0) -> int:
        try:
            return await asyncio.to_thread(self.process.wait, timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"rewind dev still running after {timeout_s:.0f}s:\n{self.log()}") from None


async def test_dev_runs_server_and_worker_and_sigint_leaves_nothing(tmp_path):
    folder = shop_folder(tmp_path)
    port = free_port()
    env = user_env(folder, REWIND_SCRIPTED_LATENCY_MS="0")
    dev = Dev(folder, env, "--tool-modules", "shop", "--scripts", "scripts.json", "--port", str(port),
              "--ui-port", str(free_port()))
    try:
        await dev.wait_for("Ctrl-C stops the worker and the server")
        log = dev.log()
        assert "lookup_price, place_order" in log and "Temporal UI: http://127.0.0.1:" in log, log
        assert f"TEMPORAL_ADDRESS=127.0.0.1:{port} rewind start" in log and "--model script:shop" in log, log
        assert "worker | " in log and "server | " in log, log

        # A second shell in the same folder, told the address as the banner says.
        shell = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
        code, out, err = await rewind(folder, shell, "start", "--task", "buy tea", "--model", "script:shop",
                                      "--wait", "--json")
        assert code == 0, err + dev.log()
        run = json.loads(out)
        assert run["final_answer"] == "Ordered tea for 12.50 EUR."
        run_id = run["run_id"]
        code, out, err = await rewind(folder, shell, "fork", run_id, "--step", "1", "--branch", "polite",
                                      "--system-prompt", "Be polite.", "--wait")
        assert code == 0, err + dev.log()
        code, out, err = await rewind(folder, shell, "diff", run_id, "main", "polite")
        assert code == 0 and "Be polite." in out and "fork point: step 1" in out, err + out
    finally:
        if dev.process.poll() is None:
            dev.process.send_signal(signal.SIGINT)
        code = await dev.wait_exit()
    assert code == 0, dev.log()
    assert "stopping the worker and the server" in dev.log()
    assert processes_of(folder) == []


async def test_dev_sigterm_stops_both_and_the_default_port_needs_no_address(tmp_path):
    """TEMPORAL_ADDRESS names the port (as a user's shell would); the banner then has no prefix."""
    folder = shop_folder(tmp_path)
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}")
    dev = Dev(folder, env, "--tool-modules", "shop", "--ui-port", str(free_port()))
    try:
        await dev.wait_for("Ctrl-C stops the worker and the server")
        assert "\n    rewind start --task" in dev.log(), dev.log()
        code, out, err = await rewind(folder, env, "health")
        assert code == 0, out + err
    finally:
        if dev.process.poll() is None:
            dev.process.send_signal(signal.SIGTERM)
        code = await dev.wait_exit()
    assert code == 0, dev.log()
    assert processes_of(folder) == []


async def test_dev_no_reload_with_a_broken_tool_module_says_why_and_stops_the_server(tmp_path):
    """With --no-reload nothing would start it again: one line, exit 1 (with reloading, rewind dev
    waits for the fix: test_dev_reload_as_user.py)."""
    folder = empty_dir(tmp_path, "broken")
    (folder / "shop.py").write_text("import no_such_dependency_here\n")
    dev = Dev(folder, user_env(folder), "--tool-modules", "shop", "--port", str(free_port()),
              "--ui-port", str(free_port()), "--no-reload")
    code = await dev.wait_exit()
    log = dev.log()
    assert code == 1, log
    assert "worker | rewind:" in log and "shop.py:1" in log and "ModuleNotFoundError" in log, log
    assert log.rstrip().splitlines()[-1].startswith("rewind: the worker exited with code 1"), log
    assert processes_of(folder) == []


async def test_dev_bad_inputs_are_one_line(tmp_path):
    folder = empty_dir(tmp_path, "bad")
    code, out, err = await rewind(folder, user_env(folder), "dev", "--tool-modules", "x", "--scripts", "nope.json")
    one_line_error(code, err, "--scripts nope.json: no such file")
    busy = free_port()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", busy))
        s.listen()
        code, out, err = await rewind(folder, user_env(folder), "dev", "--port", str(busy))
    one_line_error(code, err, f"port {busy} is already in use", "--port")


async def test_demo_keep_leaves_the_stack_for_the_next_commands(tmp_path):
    """`rewind demo --keep`: the fork and diff it prints work from another shell, then SIGINT stops it."""
    folder = empty_dir(tmp_path, "demo")
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0",
                   REWIND_DEMO_FAILURE_RATE="0")
    log_path = tmp_path / "demo.log"
    with open(log_path, "wb") as log:
        demo = subprocess.Popen([str(BIN / "rewind"), "demo", "--keep"], cwd=folder, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while "stops it." not in log_path.read_text():
            assert demo.poll() is None and time.monotonic() < deadline, log_path.read_text()
            await asyncio.sleep(0.2)
        lines = [line.strip() for line in log_path.read_text().splitlines()]
        fork = next(line for line in lines if line.startswith("rewind fork "))
        diff = next(line for line in lines if line.startswith("rewind diff "))
        code, out, err = await rewind(folder, env, *_split(fork))
        assert code == 0 and "completed" in out, err + out
        code, out, err = await rewind(folder, env, *_split(diff))
        assert code == 0 and "Answer in one line." in out, err + out
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(demo.wait, 60)
    assert code == 0, log_path.read_text()
    assert processes_of(folder) == []


def _split(command: str) -> list[str]:
    import shlex

    return shlex.split(command)[1:]
