"""Which listed workers are known to be gone: a poller identity of the SDK's default
form PID@HOST naming this machine and a process that exited (checkpoint_bridge/temporal/runs.py);
and the one line that says no worker serves a queue."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from checkpoint_bridge.temporal.runs import exited_here, no_worker_line


def test_a_process_of_this_machine_that_exited_is_gone_and_nothing_else_is() -> None:
    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    assert exited_here(f"{child.pid}@{host}")
    assert not exited_here(f"{os.getpid()}@{host}")  # alive
    assert not exited_here(f"{child.pid}@another-{host}")  # another machine: only Temporal knows
    assert not exited_here("my-worker")  # an identity a user chose says nothing about a pid
    assert not exited_here(f"x{child.pid}@{host}")


def test_one_line_says_no_worker_serves_a_queue_and_why() -> None:
    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    start = "no worker is polling task queue 'q'"
    end = "; start one (`rewind worker`) and the run goes on"
    assert no_worker_line("q", set()) == start + end  # nobody polls
    gone = no_worker_line("q", {f"{child.pid}@{host}"})
    assert gone == (f"{start} that answers (Temporal still lists {child.pid}@{host}: a process of this machine "
                    f"that has exited){end}"), gone
    silent = no_worker_line("q", {"w@elsewhere"}, unanswered_s=1.5)
    assert silent == f"{start} that answers (the one Temporal lists did not answer in 1.5 s: it stopped, died or is stuck){end}"
