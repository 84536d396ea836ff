"""The README's own path, pasted as a new user would: its blocks taken from the README
itself (so the test fails when they drift), run in empty folders with only
environment variables: `rewind demo`, then mytools.py, scripts.json and `rewind dev`
in one shell and the commands that matter from a second one, then Ctrl-C.

The set-up block's install line is what `.ci/run` itself runs on a fresh clone; the
test runs the rest of every shell block of the README's user path.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

from as_user import BIN, empty_dir, user_env
from rewind.temporal.dev_server import free_port

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def _blocks(section: str, language: str) -> list[str]:
    start = README.index(f"\n## {section}\n")
    end = README.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", README[start:end if end != -1 else None], re.S)


def _shell(line: str, folder: Path, env: dict[str, str], timeout_s: float = 180.0) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, f"`{line}` exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


async def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout_s:.0f}s:\n{log.read_text()}"
        await asyncio.sleep(0.2)


def _env(folder: Path, port: int) -> dict[str, str]:
    # The user's shell: PATH with the venv's `rewind` (README: `source .venv/bin/activate`),
    # no model key (the offline model), and a Temporal port of this test's own.
    return user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0")


def _ids_and_totals_agree(first_tree: str, tree: str, diff: str) -> None:
    """`tree`'s id column is what `show` takes (the README's own `show tea-1:main:2`), and the
    totals `diff` gives "in all" are `tree`'s at each head."""
    assert " tea-1:main:2 " in first_tree, first_tree
    rows = {cells[5]: cells for line in tree.splitlines() if len(cells := line.split()) > 6 and cells[5].startswith("tea-1:")}
    (heads,) = [re.findall(r"(\S+:\d+) \(", line) for line in diff.splitlines() if line.startswith("head ")]
    (in_all,) = [re.findall(r"(\d+) tokens", line) for line in diff.splitlines() if line.startswith("in all ")]
    assert [rows[f"tea-1:{head}"][4] for head in heads] == in_all, (tree, diff)
    assert "spent after the fork point (step 1)" in diff, diff


async def test_the_set_up_block_runs_the_demo(tmp_path):
    (setup,) = _blocks("Set up", "bash")
    install, *rest = [line for line in setup.splitlines() if line.strip()]
    assert "pip install -e ." in install and rest == ["rewind demo"], setup
    folder = empty_dir(tmp_path, "demo")
    out = await asyncio.to_thread(_shell, rest[0], folder, _env(folder, free_port()))
    assert "final" in out.lower() and "report" in out.lower(), out[-2000:]


async def test_your_own_agent_then_the_commands_that_matter(tmp_path):
    (tools,) = _blocks("Your own agent", "python")
    (setup,) = _blocks("Your own agent", "bash")
    (commands,) = _blocks("The commands that matter", "bash")
    folder = empty_dir(tmp_path, "shop")
    env = _env(folder, free_port())
    name = tools.splitlines()[0].removeprefix("# ").strip()
    assert name == "mytools.py", tools
    (folder / name).write_text(tools)

    # Shell 1: the heredoc, then `rewind dev` in the foreground.
    before, dev_line = setup.rstrip().rsplit("\n", 1)
    assert dev_line.startswith("rewind dev "), setup
    _shell(before, folder, env)
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen([str(BIN / "rewind"), *shlex.split(dev_line)[1:]], cwd=folder, env=env,
                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        await _wait_for(log, "Ctrl-C stops the worker and the server", dev)
        # Shell 2: each line as pasted.
        outputs = {}
        for line in commands.splitlines():
            if line.strip():
                outputs[line.split()[1]] = await asyncio.to_thread(_shell, line, folder, env)
        assert "Ordered tea for 12.50 EUR." in outputs["start"], outputs["start"]
        assert "place_order" in outputs["show"] and "main" in outputs["tree"], outputs
        assert "[dry run]" in outputs["diff"] and "Be terse." in outputs["diff"], outputs["diff"]
        # The README's tree came before its fork: the tree as it is now, both branches in it.
        _ids_and_totals_agree(outputs["tree"], await asyncio.to_thread(_shell, "rewind tree tea-1", folder, env),
                              outputs["diff"])
        assert (folder / "tea-1.html").is_file()
        assert re.search(r"^tea-1 .* completed ", outputs["runs"], re.M), outputs["runs"]
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(dev.wait, 60)
    assert code == 0, log.read_text()
