"""Where a process's CPU goes: py-spy sampling, summarised for the report.

py-spy (a PyPI package) samples the Python stacks of a running process from
outside it (`--nonblocking`: the process is never paused). The summary
groups samples two ways: by the package whose code was on the CPU (the
innermost frame; "self" time), and by the Rewind module a sample was inside
(any frame; "inclusive" time, so `activities/model/llm.py` includes the openai
client code it called). Only the thread holding the GIL is sampled
(`--gil`): Python CPU, not threads waiting in `select` or on a lock. Optional: without py-spy, or where the kernel
refuses to let one process read another's memory (ptrace), the benchmark
says so and goes on.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
# The repository's top-level packages: a frame in one of them is Rewind's code.
REWIND_PACKAGES = ("workflows", "activities", "checkpoint_bridge", "rewind", "worker.py", "bench", "examples")
# Entry points: every sample is inside them, so they say nothing about where time goes.
ENTRY_MODULES = {"worker.py", "rewind/worker/main.py", "rewind/worker/args.py", "rewind/cli/main.py"}


def _py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _package(file: str) -> str:
    """The package a frame's file belongs to: 'temporalio', 'activities/model/llm.py', 'asyncio', '<stdlib>'..."""
    path = file.replace("\\", "/")
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/")[0]
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        if part in REWIND_PACKAGES:
            return "/".join(parts[i:])
    first = parts[0].removesuffix(".py") if parts else path
    if first == "asyncio":
        return "asyncio (event loop)"
    if path.startswith("<frozen") or first in sys.stdlib_module_names:
        return "<stdlib>"
    return first


class Profiler:
    """`py-spy record` attached to `pid` until `stop()`; `summary()` after."""

    def __init__(self, pid: int, out: Path, rate: int = 97) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen[str] | None = None
        self.skipped: str | None = None

    def start(self) -> Profiler:
        exe = _py_spy()
        if exe is None:
            self.skipped = "py-spy not installed (`pip install -e '.[bench]'`)"
            return self
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--format", "raw", "--output", str(self.out),
             "--rate", str(self.rate), "--nonblocking", "--gil"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        try:
            text, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            text, _ = self.proc.communicate()
        if not self.out.exists() or self.out.stat().st_size == 0:
            last = (text or "").strip().splitlines()[-1:] or ["no output"]
            self.skipped = f"py-spy could not sample the process ({last[0][:200]})"

    def summary(self, top: int = 12) -> dict[str, Any] | None:
        if self.skipped or not self.out.exists():
            return None
        total = 0
        self_by_package: Counter[str] = Counter()
        self_by_function: Counter[str] = Counter()
        inside_module: Counter[str] = Counter()
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [m for f in stack.split(";") if (m := _FRAME.match(f))]
            if not frames:
                continue
            total += n
            leaf = frames[-1]
            self_by_package[_package(leaf["file"])] += n
            self_by_function[f"{leaf['func']} ({leaf['file'].rsplit('site-packages/', 1)[-1]})"] += n
            for module in {_package(f["file"]) for f in frames}:
                if module.endswith(".py") and module.split("/")[0] in REWIND_PACKAGES and module not in ENTRY_MODULES:
                    inside_module[module] += n
        if not total:
            return None

        def shares(counter: Counter[str]) -> list[tuple[str, float]]:
            return [(k, v / total) for k, v in counter.most_common(top)]

        return {"samples": total, "rate_hz": self.rate, "self_by_package": shares(self_by_package),
                "self_by_function": shares(self_by_function), "inside_rewind_module": shares(inside_module)}


def profile_note(summary: dict[str, Any] | None, skipped: str | None) -> str:
    if summary is None:
        return f"No CPU profile: {skipped or 'no samples'}."
    pk = ", ".join(f"{k} {v:.0%}" for k, v in summary["self_by_package"][:6])
    inside = ", ".join(f"{k} {v:.0%}" for k, v in summary["inside_rewind_module"][:6])
    return (f"CPU profile of the worker ({summary['samples']:,} py-spy samples at {summary['rate_hz']} Hz): on the CPU "
            f"(innermost frame) {pk}; inside Rewind modules (any frame, so a module includes the libraries it "
            f"calls) {inside}.")


def _self_test() -> None:  # pragma: no cover - a manual check: python -m bench.profile
    out = Path(f"/tmp/profile-{os.getpid()}.txt")
    child = subprocess.Popen([sys.executable, "-c", "import json\nfor _ in range(200000): json.dumps({'a': [1, 2]})"])
    p = Profiler(child.pid, out).start()
    child.wait()
    p.stop()
    print(p.summary(), p.skipped)


if __name__ == "__main__":  # pragma: no cover
    _self_test()
