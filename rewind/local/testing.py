"""Helpers shared by the test-suite and the benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from rewind.settings.config import Settings

REPO = Path(__file__).resolve().parents[2]


class LoggedProcess:
    """A subprocess writing to a log file (stderr to its own file if `err_log` is given,
    else into the log), so a test or a benchmark can SIGKILL it like a crashed machine
    or stop it gracefully."""

    stop_grace_s = 15.0  # stop(): SIGTERM, then SIGKILL after this long

    def __init__(self, argv: list[str], log: Path, *, env: dict[str, str], cwd: Path | None = None,
                 err_log: Path | None = None) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path, self.err_path = log, err_log
        self.started_at = time.monotonic()
        with ExitStack() as files:  # the child keeps its own copies of the file descriptors
            out = files.enter_context(open(log, "ab"))
            err = files.enter_context(open(err_log, "ab")) if err_log else subprocess.STDOUT
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=err, cwd=str(cwd) if cwd else None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        """What it wrote to stderr (kept apart only with `err_log`)."""
        return self.err_path.read_text(errors="replace") if self.err_path else ""

    def log(self) -> str:
        """What it wrote: stdout (and stderr, if not kept apart), then stderr kept apart."""
        return self.log_path.read_text(errors="replace") + self.stderr()

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM (graceful), SIGKILL after `stop_grace_s`."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self.kill()


def descendants(pid: int) -> set[int]:
    """The processes `pid` started, and theirs (Linux /proc): a `--processes N` worker's N
    processes, whose pids are their identities in Temporal."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            todo += [c for c in children if c not in found]
            found.update(children)
    return found


class WorkerProcess(LoggedProcess):
    """`python worker.py --tools ...` in a subprocess, configured by environment only,
    so a test or a benchmark can SIGKILL it like a crashed machine."""

    def __init__(
        self, settings: Settings, model_base_url: str, tools: str, log: Path, *,
        extra_env: dict[str, str] | None = None, pythonpath: list[Path] | None = None, cwd: Path | None = None,
        repo: Path = REPO,
    ) -> None:
        """`repo`: the checkout whose worker runs (a benchmark times an older one beside this)."""
        env = dict(os.environ)
        env.update({
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "REWIND_TASK_QUEUE": settings.task_queue,
            "REWIND_STORE": settings.store_url,
            "REWIND_PAYLOADS": settings.payload_url,
            "REWIND_STICKY_TIMEOUT_S": f"{settings.sticky_timeout_s:g}",
            **({"AWS_ENDPOINT_URL": settings.s3_endpoint_url} if settings.s3_endpoint_url else {}),
            "OPENAI_BASE_URL": model_base_url,
            "OPENAI_API_KEY": "test-key",
            # One process (its pid is the worker's identity in Temporal), unless extra_env says otherwise.
            "REWIND_WORKER_PROCESSES": "1",
            "PYTHONPATH": os.pathsep.join([*(str(p) for p in pythonpath or []), str(repo), env.get("PYTHONPATH", "")]),
            **(extra_env or {}),
        })
        super().__init__([sys.executable, str(repo / "worker.py"), "--tool-modules", tools], log, env=env, cwd=cwd)
