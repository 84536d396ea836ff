"""Helpers shared by the test-suite and the benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rewind.config import Settings

REPO = Path(__file__).resolve().parents[1]


class WorkerProcess:
    """`python worker.py --tools ...` in a subprocess, configured by environment only,
    so a test or a benchmark can SIGKILL it like a crashed machine."""

    def __init__(
        self, settings: Settings, model_base_url: str, tools: str, log: Path, *,
        extra_env: dict[str, str] | None = None, pythonpath: list[Path] | None = None, cwd: Path | None = None,
    ) -> None:
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
            "PYTHONPATH": os.pathsep.join([*(str(p) for p in pythonpath or []), str(REPO), env.get("PYTHONPATH", "")]),
            **(extra_env or {}),
        })
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log
        self._log = open(log, "ab")
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "worker.py"), "--tool-modules", tools],
            env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=str(cwd) if cwd else None,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """SIGTERM (graceful), SIGKILL after 15 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
