"""`rewind dev`: the embedded Temporal dev server and a worker for your own tools,
in one foreground command (as `langgraph dev` or `temporal server start-dev` are).

The server is the one `rewind server` runs (rewind/temporal/dev_server.py, state in
.rewind/temporal.db, its log in .rewind/temporal.log), on the address the
other commands of this folder use by default (TEMPORAL_ADDRESS, else
localhost:7233), shared like `rewind server`'s so a `rewind demo` here uses it.
The worker is `rewind worker` as a child process, so a tool module
that does not import is the worker's usual one line; its output is shown here
with a `worker |` prefix. SIGINT (Ctrl-C) or SIGTERM stops the worker first
(it finishes or hands back its running calls), then the server; nothing stays.
A worker that exits by itself stops the server too and is an error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer, free_port, port_open, running_server
from rewind.worker.args import existing_file
from rewind.worker.pool import die_with_parent
from workflows.errors import ConfigError

DEFAULT_UI_PORT = 8233
_WORKER_STOP_S = 15.0  # SIGTERM, then SIGKILL: the worker's graceful shutdown is 5 s


@dataclass
class DevOptions:
    tool_modules: list[str]
    scripts: str | None = None
    mcp_config: str | None = None
    port: int | None = None
    ui_port: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when `rewind dev` dies, even by SIGKILL (Linux; not
    Linux: a SIGKILLed `rewind dev` leaves the worker, which the next one's port check reports)."""
    die_with_parent(signal.SIGTERM)


def worker_environment(settings: Settings, address: str, options: DevOptions) -> dict[str, str]:
    """The worker's environment: this shell's, less its Temporal client settings (the
    embedded server is plaintext on loopback; a profile or API key for the team's
    cluster is not for it), plus the server's address and the dev options."""
    env = {k: v for k, v in settings.environ.items() if not k.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = address
    env["TEMPORAL_CONFIG_FILE"] = os.devnull  # no profile file either: an empty one
    env["REWIND_HOME"] = str(settings.home.resolve())
    env["REWIND_TOOL_MODULES"] = ",".join(options.tool_modules)
    if options.scripts:
        env["REWIND_SCRIPTS"] = options.scripts
    if options.mcp_config:
        env["REWIND_MCP_CONFIG"] = options.mcp_config
    env.update(options.extra_env)
    return env


def _pump(stream: Any, out: TextIO, prefix: str, ready: threading.Event | None, announce: list[dict[str, Any]]) -> None:
    """Copy a child's lines to `out` with a prefix; the worker's `--json` announcement
    (its first stdout line, once it polls) sets `ready` instead of being shown."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if ready is not None and not ready.is_set() and line.startswith("{"):
            try:
                announce.append(json.loads(line))
                ready.set()
                continue
            except ValueError:
                pass
        try:
            print(f"{prefix}{line}", file=out, flush=True)
        except (ValueError, OSError):  # our own output closed: keep draining the pipe
            pass
    stream.close()


def _next_commands(address: str, default_address: bool, first_script: str | None) -> list[str]:
    at = "" if default_address else f"TEMPORAL_ADDRESS={address} "
    model = f" --model script:{first_script}" if first_script else ""
    return [
        f'{at}rewind start --task "..."{model} --wait        # prints the run id (RUN)',
        f"{at}rewind tree RUN                              # every checkpoint",
        f"{at}rewind fork RUN --step 1 --branch try2 --system-prompt \"...\" --wait",
        f"{at}rewind diff RUN main try2",
        f"{at}rewind view RUN --out run.html",
    ]


def _first_script(path: str | None) -> str | None:
    if not path:
        return None
    try:
        scripts = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--scripts {path}: cannot read a JSON object of scripts ({exc})") from None
    if not isinstance(scripts, dict):
        raise ConfigError(f"--scripts {path}: expected {{\"name\": [turns...]}}, got {type(scripts).__name__}")
    return next(iter(scripts), None)


def run_dev(settings: Settings, options: DevOptions, out: TextIO = sys.stdout) -> int:
    """Run until SIGINT/SIGTERM (0), or until the worker or the server exits (1)."""
    scripts = existing_file("--scripts", options.scripts)
    first_script = _first_script(scripts)
    mcp_config = existing_file("--mcp-config", options.mcp_config)
    options = DevOptions(options.tool_modules, scripts, mcp_config, options.port, options.ui_port, options.extra_env)
    default_port = int(settings.temporal_address.rsplit(":", 1)[-1])
    port = options.port or default_port
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    db_file = home / "temporal.db"
    stopping = threading.Event()

    def stop(*_: Any) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    server: DevServer | None = None
    worker: subprocess.Popen[bytes] | None = None
    pumps: list[threading.Thread] = []
    try:
        shared = running_server(db_file)
        if shared:
            address = shared
            print(f"Temporal dev server already running on {shared} (state in {db_file}): using it", file=out)
        else:
            ui_port = options.ui_port or (DEFAULT_UI_PORT if not port_open("127.0.0.1", DEFAULT_UI_PORT) else free_port())
            server = DevServer.start(db_file, port=port, ui_port=ui_port, log_file=home / "temporal.log", shared=True)
            address = server.address
            print(f"server | Temporal dev server on {address}, state in {db_file}, log in {server.log_file}", file=out)
        env = worker_environment(settings, address, options)
        worker = subprocess.Popen(
            [sys.executable, "-m", "rewind.cli", "worker", "--json"], env=env, cwd=os.getcwd(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            # Its own process group: Ctrl-C reaches `rewind dev`, which stops the worker in order.
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        ready = threading.Event()
        announce: list[dict[str, Any]] = []
        pumps = [threading.Thread(target=_pump, args=(worker.stdout, out, "worker | ", ready, announce), daemon=True),
                 threading.Thread(target=_pump, args=(worker.stderr, out, "worker | ", None, announce), daemon=True)]
        for pump in pumps:
            pump.start()
        while not ready.is_set():
            if stopping.is_set():
                return 0
            if worker.poll() is not None:
                _join(pumps)
                raise ConfigError(f"the worker exited with code {worker.returncode} before it polled "
                                  "(its lines above, prefixed `worker |`, say why)")
            time.sleep(0.05)
        tools = announce[0].get("tools") or []
        ui = f"http://127.0.0.1:{server.ui_port}" if server else "(the running server's)"
        lines = [
            "",
            f"rewind dev: worker polling task queue {settings.task_queue!r} with tools: {', '.join(tools) or 'none'}",
            f"  Temporal UI: {ui}",
            f"  Temporal:    {address}" + ("" if port == default_port else f" (set TEMPORAL_ADDRESS={address} in other shells)"),
            f"  model:       {announce[0].get('model')}",
            "  try, in another terminal in this folder:",
            *(f"    {c}" for c in _next_commands(address, port == default_port, first_script)),
            "  Ctrl-C stops the worker and the server.",
            "",
        ]
        print("\n".join(lines), file=out, flush=True)
        while not stopping.is_set():
            if worker.poll() is not None:
                _join(pumps)
                raise ConfigError(f"the worker exited with code {worker.returncode} (its lines above, "
                                  "prefixed `worker |`, say why); the server is stopped too")
            if server is not None and server.process.poll() is not None:
                raise ConfigError(f"the Temporal dev server exited with code {server.process.returncode}; "
                                  f"see {server.log_file}")
            time.sleep(0.1)
        print("rewind dev: stopping the worker and the server", file=out, flush=True)
        return 0
    finally:
        # A second Ctrl-C while stopping must not cut the stop short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if worker is not None:
                _stop_worker(worker)
                _join(pumps)
            if server is not None:
                server.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(_WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    try:  # anything the worker started in its group (it starts none today)
        os.killpg(worker.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _join(pumps: list[threading.Thread]) -> None:
    for pump in pumps:
        pump.join(2.0)
