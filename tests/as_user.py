"""Driving Rewind the way a user does: `rewind` and the worker as subprocesses,
each in its own empty folder, configured only through the environment.

`user_env` builds an environment from scratch (PATH and HOME, plus what the
test gives): nothing of the test process's own configuration leaks in.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def user_env(home: Path, **variables: str | None) -> dict[str, str]:
    env = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    env.update({k: v for k, v in variables.items() if v is not None})
    return env


async def rewind(cwd: Path, env: dict[str, str], *args: str, timeout_s: float = 120.0) -> tuple[int, str, str]:
    """`rewind ARGS...` from `cwd`: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"rewind {' '.join(args)} did not finish in {timeout_s:.0f}s; stderr: {err.decode()[-2000:]}")
    return proc.returncode or 0, out.decode(), err.decode()


def one_line_error(code: int, err: str, *needles: str) -> None:
    """The CLI's promise for errors: non-zero, one line on stderr, no traceback."""
    assert code != 0, f"expected a failure, got exit 0; stderr: {err!r}"
    assert err.count("\n") == 1 and err.endswith("\n"), f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"


class UserWorker:
    """`rewind worker ...` in its own folder; kill() is a crashed machine."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        self.cwd, self.log_path = cwd, cwd.parent / f"{cwd.name}.log"
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen([str(BIN / "rewind"), "worker", *args], cwd=cwd, env=env,
                                        stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until the worker polls (its health file appears), or fail with its log."""
        health = self.cwd / ".rewind" / "worker-health.json"
        deadline = time.monotonic() + timeout_s
        while not health.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    def wait_exit(self, timeout_s: float = 60.0) -> int:
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def __enter__(self) -> "UserWorker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
