"""Driving Rewind the way a user does: `rewind` and the worker as subprocesses,
each in its own empty folder, configured only through the environment.

`user_env` builds an environment from scratch (PATH and HOME, plus what the
test gives): nothing of the test process's own configuration leaks in.
Every wait is async and leaves the event loop running, so a server the test
runs in that loop (an S3 proxy, say) keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Self

from rewind.local.testing import LoggedProcess

BIN = Path(sys.executable).parent


def user_env(home: Path, **variables: str | None) -> dict[str, str]:
    """PATH, HOME=`home`, LANG, one worker process per `rewind worker` and `variables` (None:
    left out; "" kept, it is a value)."""
    # One process per worker unless a test says otherwise (REWIND_WORKER_PROCESSES=None: the
    # default, a process per core; tests/rewind/worker/test_worker_processes_as_user.py): the suite
    # starts workers by the dozen on a 2-core CI machine.
    env = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "REWIND_WORKER_PROCESSES": "1"}
    env.update({k: v for k, v in variables.items() if v is not None})
    for name in [k for k, v in variables.items() if v is None]:
        env.pop(name, None)
    return env


def empty_dir(tmp_path: Path, name: str) -> Path:
    """A new, empty folder under `tmp_path`."""
    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    return path


async def until(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """Poll the coroutine function `check` until it returns something true, and return that
    (visibility and the mirror lag a moment behind what a command just did)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so after {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


async def rewind(cwd: Path, env: dict[str, str], *args: str, timeout_s: float = 150.0) -> tuple[int, str, str]:
    """`rewind ARGS...` from `cwd`: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"rewind {' '.join(args)} did not finish in {timeout_s:.0f}s; stderr: {err.decode()[-2000:]}")
    return proc.returncode or 0, out.decode(), err.decode()


async def rewind_json(cwd: Path, env: dict[str, str], *args: str) -> Any:
    """`rewind ARGS... --json`, which must succeed: its document."""
    code, out, err = await rewind(cwd, env, *args, "--json")
    assert code == 0, f"rewind {' '.join(args)} exited {code}: {err}"
    return json.loads(out)


def one_line_error(code: int, err: str, *needles: str, prefix: str = "") -> None:
    """The CLI's promise for errors: non-zero, one line on stderr (starting with `prefix`), no traceback."""
    assert code != 0, f"expected a failure, got exit 0; stderr: {err!r}"
    assert err.count("\n") == 1 and err.endswith("\n"), f"expected one line on stderr, got: {err!r}"
    assert err.startswith(prefix), err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


class UserWorker(LoggedProcess):
    """`rewind worker ARGS...` (with `module`: `python -m rewind.worker ARGS...`) in its
    own folder, stdout and stderr kept apart; kill() is a crashed machine."""

    stop_grace_s = 20.0

    def __init__(self, cwd: Path, env: dict[str, str], *args: str, module: bool = False) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        command = [sys.executable, "-m", "rewind.worker"] if module else [str(BIN / "rewind"), "worker"]
        super().__init__([*command, *args], cwd.parent / f"{cwd.name}.log", env=env, cwd=cwd,
                         err_log=cwd.parent / f"{cwd.name}.err")

    async def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Until the worker polls (its health file appears), or fail with its log."""
        deadline = time.monotonic() + timeout_s
        while not list((self.cwd / ".rewind").glob("worker-health.*.json")):
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    async def wait_exit(self, timeout_s: float = 90.0) -> int:
        """Its exit code, or fail with its log if it still runs after `timeout_s`."""
        try:
            return await asyncio.to_thread(self.process.wait, timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout_s:.0f}s:\n{self.log()[-3000:]}") from None

    async def stop_async(self) -> None:
        """stop(), the event loop running meanwhile."""
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@asynccontextmanager
async def user_workers() -> AsyncIterator[Callable[..., UserWorker]]:
    """start(cwd, env, *args, module=False) starts a UserWorker; all of them stopped on the way out."""
    started: list[UserWorker] = []

    def start(cwd: Path, env: dict[str, str], *args: str, module: bool = False) -> UserWorker:
        started.append(UserWorker(cwd, env, *args, module=module))
        return started[-1]

    try:
        yield start
    finally:
        for worker in started:
            await worker.stop_async()


class UserServer(LoggedProcess):
    """`rewind serve --json --port 0 ARGS...` in its own folder: `await url()` is where it
    listens (the first line it prints), once it answers."""

    stop_grace_s = 20.0

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        super().__init__([str(BIN / "rewind"), "serve", "--json", "--port", "0", *args],
                         cwd.parent / f"{cwd.name}.out", env=env, cwd=cwd, err_log=cwd.parent / f"{cwd.name}.err")

    async def url(self, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:  # the JSON document it prints once it listens (whole once it parses)
                return json.loads(self.log_path.read_text(errors="replace"))["url"]
            except ValueError:
                pass
            if self.process.poll() is not None:
                raise AssertionError(f"rewind serve exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"rewind serve not listening after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)
