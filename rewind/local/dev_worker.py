"""The worker of `rewind dev`: one `rewind worker --json` child process, its output shown
with a `worker |` prefix, its announcement (the first stdout line, once it polls) read.

`rewind dev` (dev.py) starts one, and another after it dies or a watched file changes;
this module knows one child's life: start, polling, exit, stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any, TextIO

from rewind.worker.pool import die_with_parent

_WORKER_STOP_S = 15.0  # SIGTERM, then SIGKILL: the worker's graceful shutdown is 5 s


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when `rewind dev` dies, even by SIGKILL (Linux; not
    Linux: a SIGKILLed `rewind dev` leaves the worker, which the next one's port check reports)."""
    die_with_parent(signal.SIGTERM)


def exit_text(code: int | None) -> str:
    """`code 1`, `code -9 (SIGKILL)`."""
    if code is not None and code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"code {code}"


class DevWorker:
    """One worker child process (see the module docstring)."""

    def __init__(self, env: dict[str, str], out: TextIO) -> None:
        self.ready = threading.Event()
        self.announce: dict[str, Any] = {}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rewind.cli", "worker", "--json"], env=env, cwd=os.getcwd(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            # Its own process group: Ctrl-C reaches `rewind dev`, which stops the worker in order.
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        self._pumps = [threading.Thread(target=self._pump, args=(self.process.stdout, out, True), daemon=True),
                       threading.Thread(target=self._pump, args=(self.process.stderr, out, False), daemon=True)]
        for pump in self._pumps:
            pump.start()

    @property
    def pid(self) -> int:
        """The pid the worker announced (with REWIND_WORKER_PROCESSES > 1: its supervisor's), else the child's."""
        return int(self.announce.get("pid") or self.process.pid)

    def exited(self) -> int | None:
        """The exit code once the child exited (its last lines shown), else None."""
        code = self.process.poll()
        if code is not None:
            self._join()
        return code

    def stop(self) -> None:
        """SIGTERM to its group (it finishes or hands back its running calls), SIGKILL after 15 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(_WORKER_STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        try:  # anything the worker started in its group (MCP servers over stdio)
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._join()

    def _pump(self, stream: Any, out: TextIO, announces: bool) -> None:
        """Copy the child's lines to `out` with a prefix; the `--json` announcement (its first
        stdout line, once it polls) sets `ready` instead of being shown."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if announces and not self.ready.is_set() and line.startswith("{"):
                try:
                    self.announce = json.loads(line)
                    self.ready.set()
                    continue
                except ValueError:
                    pass
            try:
                print(f"worker | {line}", file=out, flush=True)
            except (ValueError, OSError):  # our own output closed: keep draining the pipe
                pass
        stream.close()

    def _join(self) -> None:
        for pump in self._pumps:
            pump.join(2.0)
