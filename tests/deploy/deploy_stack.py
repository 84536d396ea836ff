"""The local stand-ins of the compose services and the processes of a deployment test
(used by conftest.py's fixtures and by the tests; see conftest.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

import compose_topology as ct
from rewind.temporal.dev_server import DevServer

LOG_TAIL_LINES = 60


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


# -- the S3 stand-in ----------------------------------------------------------------

class S3Gate:
    """WSGI middleware in front of moto: while closed, requests whose path starts with
    `prefix` wait (up to `max_hold_s`) until the gate opens. Everything else passes."""

    def __init__(self, app: Any, max_hold_s: float = 30.0) -> None:
        self.app = app
        self.max_hold_s = max_hold_s
        self._open = threading.Event()
        self._open.set()
        self.prefix: str | None = None
        self.held = threading.Event()
        self.held_paths: list[str] = []

    def close(self, prefix: str) -> None:
        self.prefix = prefix
        self.held_paths = []
        self.held.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not self._open.is_set() and self.prefix and path.startswith(self.prefix):
            self.held_paths.append(f"{environ.get('REQUEST_METHOD')} {path}")
            self.held.set()
            self._open.wait(self.max_hold_s)
        return self.app(environ, start_response)


@dataclass
class Stack:
    """The stand-ins of the compose services, and how compose names map onto them."""

    compose: dict[str, Any]
    root: Path
    temporal: DevServer
    s3_endpoint: str
    gate: S3Gate
    # compose `host:port` (as containers see it) -> local address
    compose_hosts: dict[str, str]
    # published `localhost:port` / `127.0.0.1:port` (as the host sees it) -> local address
    published_hosts: dict[str, str]
    buckets: list[str]
    s3_credentials: dict[str, str]

    @property
    def services(self) -> dict[str, Any]:
        return self.compose["services"]

    def s3(self) -> Any:
        return boto3.client("s3", endpoint_url=self.s3_endpoint, region_name="us-east-1", **self.s3_credentials)

    def worker_env(self, home: Path, compose: dict[str, Any] | None = None) -> dict[str, str]:
        """The worker service's environment (from `compose`, default: the file), hosts
        mapped onto the stand-ins, plus PATH (the venv first) and HOME: nothing else."""
        services = (compose or self.compose)["services"]
        env = ct.rewrite_hosts(ct.environment(services["worker"], "worker"), self.compose_hosts)
        leftover = ct.unmapped_hosts(env, list(services))
        assert not leftover, f"worker environment names compose hosts with no stand-in here: {leftover}"
        return {**env, "PATH": f"{ct.VENV_BIN}{os.pathsep}{ct.SYSTEM_PATH}", "HOME": str(home)}


# -- processes ----------------------------------------------------------------------

@dataclass
class Proc:
    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def sigkill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout_s: float) -> int:
        """SIGTERM (what `docker compose stop` sends), SIGKILL after `timeout_s`."""
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode

    async def healthcheck(self, argv: list[str]) -> tuple[int, str]:
        """Run a service's health check command in this process's directory and environment."""
        proc = await asyncio.create_subprocess_exec(
            *ct.resolve_executable(argv, self.env), cwd=self.cwd, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, out.decode(errors="replace")


class Processes:
    """Every process a test starts; stopped (and their logs shown on failure) at teardown."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Proc] = []

    def start(self, name: str, argv: list[str], cwd: Path, env: dict[str, str]) -> Proc:
        log_path = self.logs / f"{name}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(ct.resolve_executable(argv, env), cwd=cwd, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc = Proc(name, argv, cwd, env, log_path, process)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            if proc.alive():
                proc.process.kill()
                proc.process.wait(10)

    def report(self) -> str:
        return "\n".join(f"----- {p.name} (pid {p.pid}, exit {p.process.returncode}) {p.log_path}\n{p.log()}"
                         for p in self.started)
