"""Which listed workers are known to be gone: a poller identity of the SDK's default
form PID@HOST naming this machine and a process that exited (checkpoint_bridge/temporal/runs.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from checkpoint_bridge.temporal.runs import exited_here


def test_a_process_of_this_machine_that_exited_is_gone_and_nothing_else_is() -> None:
    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    assert exited_here(f"{child.pid}@{host}")
    assert not exited_here(f"{os.getpid()}@{host}")  # alive
    assert not exited_here(f"{child.pid}@another-{host}")  # another machine: only Temporal knows
    assert not exited_here("my-worker")  # an identity a user chose says nothing about a pid
    assert not exited_here(f"x{child.pid}@{host}")
