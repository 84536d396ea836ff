"""`rewind worker --processes N`: N worker processes on one machine, as one worker.

One Python process runs its workflow tasks and activities on one event loop under
one GIL, so a single worker process saturates one core while the others idle. The
supervisor here starts N ordinary worker processes (`python -m rewind.worker`, the
same tool modules, task queue and environment), each polling the same queues, and:

- starts the first alone and the rest once it polls, so a configuration error (a
  store that does not answer, a tool module that does not import) is one line and
  exit 1, as with one process;
- announces (`--json`: one document, the supervisor's pid and every process's)
  once every process polls; the processes share one health file, written under
  the supervisor's pid, so `rewind health` answers for the group while any of
  them polls, and the file outlives any one of them;
- replaces a process that dies (SIGKILL, out of memory), after a pause that grows
  while replacements keep dying, as a restart policy would;
- stops them all on SIGTERM / SIGINT (each finishes its graceful shutdown), and
  when it is itself killed they die with it (Linux: the parent-death signal;
  elsewhere each process stops within a second of seeing its parent gone), so a
  SIGKILLed worker is a crashed worker, whatever N is.

The supervisor imports nothing of the worker (no Temporal client, no tools): it
stays small, and what each process loads is what a single worker loads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

# How long a stopping process may take (its graceful shutdown is 5 s) before it is killed.
STOP_GRACE_S = 15.0
# A replacement waits this long, doubled while replacements die within REPLACE_RESET_S, up to the cap.
REPLACE_PAUSE_S, REPLACE_PAUSE_MAX_S, REPLACE_RESET_S = 1.0, 30.0, 60.0


def machine_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def die_with_parent(sig: int) -> None:
    """In a child, before exec (preexec_fn): receive `sig` when the parent dies, even by
    SIGKILL (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)


def _die_with_supervisor() -> None:
    die_with_parent(signal.SIGKILL)  # a killed supervisor is a crashed worker: its processes die too


class _Process:
    """One worker process of the group, in its slot."""

    def __init__(self, slot: int, proc: asyncio.subprocess.Process) -> None:
        self.slot, self.proc, self.started = slot, proc, time.monotonic()
        self.polling: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()

    async def read_announce(self) -> None:
        """The child prints one JSON line once it polls; then its stdout stays quiet."""
        assert self.proc.stdout is not None
        doc: dict[str, Any] | None = None
        with contextlib.suppress(Exception):
            line = await self.proc.stdout.readline()
            doc = json.loads(line) if line.strip() else None
        if not self.polling.done():
            self.polling.set_result(doc)
        with contextlib.suppress(Exception):
            await self.proc.stdout.read()  # drain until it exits


class WorkerPool:
    """N `python -m rewind.worker` processes in slots 0..N-1 (see the module docstring)."""

    def __init__(self, child_argv: list[str], processes: int, health_file: Path, *, announce_json: bool) -> None:
        self.child_argv, self.n, self.health_file, self.announce_json = child_argv, processes, health_file, announce_json
        self.slots: dict[int, _Process] = {}
        self.stopping = asyncio.Event()
        self.replaced = 0

    async def _start(self, slot: int) -> _Process:
        argv = [sys.executable, "-m", "rewind.worker", *self.child_argv,
                "--supervised-by", str(os.getpid()), "--slot", str(slot), "--processes", str(self.n)]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_supervisor if sys.platform.startswith("linux") else None)
        child = _Process(slot, proc)
        asyncio.get_running_loop().create_task(child.read_announce())
        self.slots[slot] = child
        return child

    async def _until_polling(self, child: _Process) -> bool:
        """True once the child polls; False if it exited first (its error is on stderr already)."""
        exited = asyncio.ensure_future(child.proc.wait())
        try:
            await asyncio.wait({child.polling, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        return child.polling.done() and child.polling.result() is not None and child.proc.returncode is None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        try:
            first = await self._start(0)
            if not await self._until_polling(first):
                return await first.proc.wait() or 1
            rest = [await self._start(slot) for slot in range(1, self.n)]
            ready = await asyncio.gather(*(self._until_polling(c) for c in rest))
            if not all(ready):
                failed = next(c for c, ok in zip(rest, ready) if not ok)
                return await failed.proc.wait() or 1
            self._announce(first.polling.result() or {})
            await self._watch()
            return 0
        finally:
            await self._stop_all()
            self._remove_health_file()

    def _announce(self, first: dict[str, Any]) -> None:
        pids = [self.slots[s].proc.pid for s in sorted(self.slots)]
        print(f"rewind: {self.n} worker processes polling (pids {', '.join(map(str, pids))}; supervisor {os.getpid()})",
              file=sys.stderr, flush=True)
        if self.announce_json:
            print(json.dumps({**first, "pid": os.getpid(), "processes": pids}), flush=True)

    async def _watch(self) -> None:
        """Until stopped: a process that exits is replaced in its slot."""
        pause, last_death = REPLACE_PAUSE_S, 0.0
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            while not self.stopping.is_set():
                waits = {asyncio.ensure_future(c.proc.wait()): c for c in self.slots.values()}
                done, _ = await asyncio.wait({stop, *waits}, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
                if self.stopping.is_set():
                    return
                for w in done - {stop}:
                    dead = waits[w]
                    now = time.monotonic()
                    pause = REPLACE_PAUSE_S if now - last_death > REPLACE_RESET_S else min(pause * 2, REPLACE_PAUSE_MAX_S)
                    last_death = now
                    print(f"rewind: worker process {dead.proc.pid} (slot {dead.slot}) exited with "
                          f"{_exit_text(dead.proc.returncode)}; starting a replacement in {pause:g}s",
                          file=sys.stderr, flush=True)
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), pause)
                    if self.stopping.is_set():
                        return
                    self.replaced += 1
                    await self._start(dead.slot)
        finally:
            stop.cancel()

    async def _stop_all(self) -> None:
        live = [c.proc for c in self.slots.values() if c.proc.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)), STOP_GRACE_S)
        except asyncio.TimeoutError:
            for proc in live:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await asyncio.gather(*(p.wait() for p in live))

    def _remove_health_file(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(self.health_file.read_text()).get("pid") == os.getpid():
                self.health_file.unlink()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"code {code}"


def supervise(child_argv: list[str], processes: int, health_file: Path, *, announce_json: bool) -> int:
    """Run the pool until SIGTERM / SIGINT; the exit code of `rewind worker`."""
    return asyncio.run(WorkerPool(child_argv, processes, health_file, announce_json=announce_json).run())


__all__ = ["supervise", "machine_cores", "die_with_parent", "WorkerPool"]
