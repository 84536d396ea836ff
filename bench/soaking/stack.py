"""The soak's own stack, every piece a real server it can break:

    Temporal dev server   on a file database; SIGKILLed and restarted on the same db and ports
    moto S3 server        a subprocess that keeps its state; reached only through the fault proxy
    fault proxy           s3proxy.FaultProxy (refuse / hang / 500 / 503 windows)
    scripted model        in this process (its faults: 429 with retry-after, 500, a hang)
    K workers             `python worker.py --tool-modules soak_tools` processes, each holding a session
                          to the soak's MCP server (soak_mcp.py, stdio); SIGKILLed and replaced

Workers and the `rewind` CLI are configured only through the environment that
`env()` returns, as a user's would be.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer, free_port, port_open
from rewind.worker.scripted_model import ScriptedModelServer
from rewind.local.testing import REPO, LoggedProcess

from bench.soaking import shapes
from bench.soaking.s3proxy import FaultProxy

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
BUCKET = "soak"
TASK_QUEUE = "soak"


class Stack:
    def __init__(self, root: Path, *, store: str, workers: int, seed: int, tool_fault_rate: float) -> None:
        self.root, self.store_kind, self.worker_count = root, store, workers
        self.seed, self.tool_fault_rate = seed, tool_fault_rate
        self.db = root / "temporal" / "temporal.db"
        self.port, self.ui_port = free_port(), free_port()
        self.server: DevServer | None = None
        self.moto: subprocess.Popen[bytes] | None = None
        self.proxy: FaultProxy | None = None
        self.model = ScriptedModelServer()
        self.workers: list[LoggedProcess] = []
        self.killed: set[int] = set()  # pids the soak killed itself (not restarted by the supervisor)
        self.started_workers = 0
        self.homes: dict[int, Path] = {}
        self.ledger = root / "ledger.jsonl"
        self.outbox = root / "outbox"
        self.mcp_config = root / "mcp.json"

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.db.parent.mkdir(parents=True, exist_ok=True)
        # The MCP server every worker starts (stdio): its ledger and outbox are the soak's.
        self.mcp_config.write_text(json.dumps({"mcpServers": {shapes.MCP_SERVER: {
            "command": sys.executable, "args": [str(HERE / "soak_mcp.py")],
            "env": {"REWIND_SOAK_LEDGER": str(self.ledger), "REWIND_SOAK_OUTBOX": str(self.outbox),
                    "PYTHONPATH": str(REPO)}}}}))
        self.server = await asyncio.to_thread(self._start_server)
        self.model.start_in_thread()
        for name, turns in shapes.scripts().items():
            self.model.add_script(name, turns)
        if self.store_kind == "s3":
            moto_port = free_port()
            log = open(self.root / "moto.log", "ab")
            self.moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)],
                                         stdout=log, stderr=subprocess.STDOUT, env=self._aws_env())
            log.close()
            deadline = time.monotonic() + 60
            while not port_open("127.0.0.1", moto_port):
                if time.monotonic() > deadline or self.moto.poll() is not None:
                    raise RuntimeError(f"moto did not start; see {self.root / 'moto.log'}")
                await asyncio.sleep(0.1)
            self.proxy = FaultProxy(f"http://127.0.0.1:{moto_port}", free_port())
            await self.proxy.start()
            await asyncio.to_thread(self._create_bucket, f"http://127.0.0.1:{moto_port}")
        for _ in range(self.worker_count):
            self.start_worker()

    async def stop(self) -> None:
        for worker in self.workers:
            worker.kill()
        if self.server is not None:
            self.server.kill()
        if self.proxy is not None:
            await self.proxy.stop()
        if self.moto is not None:
            self.moto.kill()
            self.moto.wait()
        self.model.stop_thread()

    # -- configuration -----------------------------------------------------------------

    @staticmethod
    def _aws_env() -> dict[str, str]:
        return {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def env(self, home: Path | None = None, **extra: str) -> dict[str, str]:
        """What a worker or the CLI of this stack is given: nothing else of this process's."""
        env = {**self._aws_env(), "HOME": str(self.root), "LANG": "C.UTF-8", "TEMPORAL_CONFIG_FILE": os.devnull,
               "TEMPORAL_ADDRESS": f"127.0.0.1:{self.port}", "REWIND_TASK_QUEUE": TASK_QUEUE,
               "REWIND_STICKY_TIMEOUT_S": "1", "OPENAI_BASE_URL": self.model.base_url, "OPENAI_API_KEY": "soak-key",
               "REWIND_HOME": str(home or self.root / "cli-home")}
        if self.store_kind == "s3":
            assert self.proxy is not None
            env.update(REWIND_STORE=f"s3://{BUCKET}/checkpoints", REWIND_PAYLOADS=f"s3://{BUCKET}/payloads",
                       AWS_ENDPOINT_URL=self.proxy.url)
        else:
            env.update(REWIND_STORE=f"file://{self.root / 'checkpoints'}", REWIND_PAYLOADS=f"file://{self.root / 'payloads'}")
        env.update(extra)
        return env

    def settings(self) -> Settings:
        return Settings.from_env(self.env())

    # -- Temporal ------------------------------------------------------------------------

    def _start_server(self) -> DevServer:
        deadline = time.monotonic() + 30
        while port_open("127.0.0.1", self.port) and time.monotonic() < deadline:
            time.sleep(0.1)  # the killed server's port closes
        # The restart must take the same ports (clients and workers find it there). While the
        # server was down, another process (a client's ephemeral socket) can hold one of them
        # for a moment: it tries again for a minute before the fault counts as not injected (a
        # large soak once lost Temporal for most of its length to one such race).
        return DevServer.start(self.db, port=self.port, ui_port=self.ui_port, headless=True,
                               log_file=self.root / "temporal" / "temporal.log", fixed_ports_wait_s=60)

    async def kill_server(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server = None

    async def restart_server(self) -> None:
        self.server = await asyncio.to_thread(self._start_server)

    # -- S3 ------------------------------------------------------------------------------

    def _create_bucket(self, endpoint: str) -> None:
        import boto3

        env = self._aws_env()
        boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_DEFAULT_REGION"],
                     aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=BUCKET)

    # -- workers ---------------------------------------------------------------------------

    def start_worker(self) -> LoggedProcess:
        n = self.started_workers
        self.started_workers += 1
        home = self.root / "workers" / f"w{n}"
        home.mkdir(parents=True, exist_ok=True)
        env = self.env(home=home / ".rewind", PYTHONPATH=f"{HERE}{os.pathsep}{REPO}", REWIND_SOAK_LEDGER=str(self.ledger),
                       REWIND_SOAK_OUTBOX=str(self.outbox), REWIND_SOAK_SEED=str(self.seed),
                       REWIND_SOAK_TOOL_FAULT_RATE=f"{self.tool_fault_rate:g}", REWIND_LOG_LEVEL="WARNING",
                       REWIND_MCP_CONFIG=str(self.mcp_config),
                       # One process per worker: the soak's --workers are its processes, each killed alone.
                       REWIND_WORKER_PROCESSES="1")
        worker = LoggedProcess([sys.executable, str(REPO / "worker.py"), "--tool-modules", "soak_tools"],
                               home.parent / f"w{n}.log", env=env, cwd=home)
        self.workers.append(worker)
        self.homes[worker.pid] = home
        return worker

    def live_workers(self) -> list[LoggedProcess]:
        return [w for w in self.workers if w.process.poll() is None]

    def kill_worker(self, index: int) -> int:
        live = self.live_workers()
        victim = live[index % len(live)]
        self.killed.add(victim.pid)
        victim.kill()
        return victim.pid

    async def wait_workers_ready(self, timeout_s: float = 120.0) -> None:
        """Until every live worker polls (its health file is there)."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.live_workers()
            if live and all(list((self.homes[w.pid] / ".rewind").glob("worker-health.*.json")) for w in live):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"soak workers did not become ready; see {self.root / 'workers'}")
            await asyncio.sleep(0.2)


def hostname() -> str:
    return socket.gethostname()
