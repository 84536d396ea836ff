"""The scripted model in a process of its own, noting when it writes each token's chunk.

    python -m bench.stream_model          prints its base URL, serves until SIGTERM

The streaming benchmark (bench/b17_streaming.py) times a watcher's deltas against the
moment the provider wrote each token: the server's `chunk_times` (a time per token chunk in
its request log, rewind/worker/scripted_model.py). In a process of its own, its writes are
not held back by the benchmark's readers (one interpreter lock), nor theirs by it.
`ModelProcess` starts it and talks to its admin routes (scripts, the request log, a reset).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from rewind.worker.scripted_model import ScriptedModelServer, serve_until_stopped


class ModelProcess:
    """`python -m bench.stream_model` as a subprocess; `base_url` once it listens."""

    def __init__(self, log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        self._err = open(log, "ab")
        self.process = subprocess.Popen([sys.executable, "-m", "bench.stream_model"], stdout=subprocess.PIPE,
                                        stderr=self._err, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()  # its URL, once it listens
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"bench.stream_model did not start (it printed {line!r}); see {log}")
        self.base_url = line
        self._admin = self.base_url.removesuffix("/v1") + "/_admin"
        self._http = httpx.Client(timeout=60)

    def add_script(self, name: str, turns: list[dict[str, Any]]) -> None:
        self._http.post(f"{self._admin}/scripts/{name}", json={"turns": turns}).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        """The request log (each streamed request's `chunk_times` with it)."""
        response = self._http.get(f"{self._admin}/requests")
        response.raise_for_status()
        return response.json()["requests"]

    def reset(self) -> None:
        """Forget the request log (and scripts): a long benchmark's log stays small."""
        self._http.post(f"{self._admin}/reset", json={}).raise_for_status()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if hasattr(self, "_http"):
            self._http.close()
        self._err.close()


if __name__ == "__main__":
    asyncio.run(serve_until_stopped(ScriptedModelServer(chunk_times=True)))
