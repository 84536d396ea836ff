"""`rewind dev`: the embedded Temporal dev server and a worker for your own tools,
in one foreground command (as `langgraph dev` or `temporal server start-dev` are).

The server is the one `rewind server` runs (rewind/temporal/dev_server.py, state in
.rewind/temporal.db, its log in .rewind/temporal.log), on the address the
other commands of this folder use by default (TEMPORAL_ADDRESS, else
localhost:7233), shared like `rewind server`'s so a `rewind demo` here uses it.
The worker is `rewind worker` as a child process, so a tool module
that does not import is the worker's usual one line; its output is shown here
with a `worker |` prefix (dev_worker.py). SIGINT (Ctrl-C) or SIGTERM stops the worker
first (it finishes or hands back its running calls), then the server; nothing stays.

The loop keeps going while you work:
- a worker that dies after it polled (a SIGKILL, a crash) is said in one line with its
  exit code and started again, after a pause that grows while restarts keep dying (the
  restart policy of `rewind worker --processes N`, rewind/worker/pool.py); the server
  keeps serving, and the runs in flight carry on on the new worker (Temporal replays them);
- a file of the worker's code (reload.py says which) that changes restarts the worker, so
  the edit is live; a worker that exits before it polls (a syntax error in a tools module)
  is said once, and the next start waits for the next change, it does not spin;
- `--no-reload` watches nothing: a worker that exits before it polls ends `rewind dev`
  with the one-line error, as a configuration error does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from rewind.local.dev_worker import DevWorker, exit_text
from rewind.local.reload import ChangeWatcher, require_watchfiles, watch_targets
from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer, free_port, port_open, running_server
from rewind.worker.args import existing_file
from rewind.worker.pool import REPLACE_PAUSE_MAX_S, REPLACE_PAUSE_S, REPLACE_RESET_S
from workflows.vocabulary.errors import ConfigError

DEFAULT_UI_PORT = 8233


@dataclass
class DevOptions:
    tool_modules: list[str]
    scripts: str | None = None
    mcp_config: str | None = None
    port: int | None = None
    ui_port: int | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    reload: bool = True  # restart the worker when a file of its code changes (--no-reload: False)


def worker_environment(settings: Settings, address: str, options: DevOptions) -> dict[str, str]:
    """The worker's environment: this shell's, less its Temporal client settings (the
    embedded server is plaintext on loopback; a profile or API key for the team's
    cluster is not for it), plus the server's address and the dev options. One worker
    process, unless REWIND_WORKER_PROCESSES says otherwise: a restart is one start, and
    the pid the banner shows is the one process that runs your tools."""
    env = {k: v for k, v in settings.environ.items() if not k.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = address
    env["TEMPORAL_CONFIG_FILE"] = os.devnull  # no profile file either: an empty one
    env["REWIND_HOME"] = str(settings.home.resolve())
    env["REWIND_TOOL_MODULES"] = ",".join(options.tool_modules)
    env.setdefault("REWIND_WORKER_PROCESSES", "1")
    if options.scripts:
        env["REWIND_SCRIPTS"] = options.scripts
    if options.mcp_config:
        env["REWIND_MCP_CONFIG"] = options.mcp_config
    env.update(options.extra_env)
    return env


def _next_commands(address: str, default_address: bool, first_script: str | None,
                   pipelines: list[str] | None = None) -> list[str]:
    """What to try next: a run of the worker's first pipeline when its modules define any, else
    of its first LangGraph graph (a graph's name has a colon: `--graph`), else the agent loop."""
    at = "" if default_address else f"TEMPORAL_ADDRESS={address} "
    model = f" --model script:{first_script}" if first_script else ""
    pipeline = next((p for p in pipelines or [] if ":" not in p), None)
    graph = next((p for p in pipelines or [] if ":" in p), None)
    if pipeline is not None:
        start = f"{at}rewind start --pipeline {pipeline} --input '{{...}}'{model} --wait   # prints the run id (RUN)"
        change = '--prompt LABEL="..."'
    elif graph is not None:
        start = f"{at}rewind start --graph {graph} --input '{{...}}'{model} --wait   # its input channels; prints RUN"
        change = "--set CHANNEL=VALUE"
    else:
        start = f'{at}rewind start --task "..."{model} --wait        # prints the run id (RUN)'
        change = '--system-prompt "..."'
    return [
        start,
        f"{at}rewind tree RUN                              # every checkpoint",
        f"{at}rewind fork RUN --step 1 --branch try2 {change} --wait",
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
    """Run until SIGINT/SIGTERM (0), or until the server exits, or (with --no-reload) until
    a worker exits before it polls (1)."""
    scripts = existing_file("--scripts", options.scripts)
    first_script = _first_script(scripts)
    mcp_config = existing_file("--mcp-config", options.mcp_config)
    options = DevOptions(options.tool_modules, scripts, mcp_config, options.port, options.ui_port, options.extra_env,
                         options.reload)
    if options.reload:
        require_watchfiles()  # before the server starts: the fix is one line, not a stack to stop
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
    loop: _WorkerLoop | None = None
    watcher: ChangeWatcher | None = None
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
        if options.reload:  # watching before the first start: an edit while it starts is not lost
            watcher = ChangeWatcher(watch_targets(options.tool_modules, [scripts, mcp_config], Path.cwd()), out)

        def banner(worker: DevWorker) -> str:
            tools = worker.announce.get("tools") or []
            ui = f"http://127.0.0.1:{server.ui_port}" if server else "(the running server's)"
            reload = (f"on a change to {watcher.targets.describe()} (--no-reload turns this off)" if watcher is not None
                      else "off (--no-reload): after an edit, Ctrl-C and run rewind dev again")
            return "\n".join([
                "",
                f"rewind dev: worker polling task queue {settings.task_queue!r} with tools: {', '.join(tools) or 'none'}",
                f"  Temporal UI: {ui}",
                f"  Temporal:    {address}" + ("" if port == default_port else f" (set TEMPORAL_ADDRESS={address} in other shells)"),
                f"  model:       {worker.announce.get('model')}",
                f"  worker:      pid {worker.pid}, started again if it exits",
                f"  reload:      {reload}",
                "  try, in another terminal in this folder:",
                *(f"    {c}" for c in _next_commands(address, port == default_port, first_script,
                                                   worker.announce.get("pipelines"))),
                "  Ctrl-C stops the worker and the server.",
                "",
            ])

        loop = _WorkerLoop(worker_environment(settings, address, options), out, watcher, stopping, banner)
        loop.run(server)
        print("rewind dev: stopping the worker and the server", file=out, flush=True)
        return 0
    finally:
        # A second Ctrl-C while stopping must not cut the stop short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if watcher is not None:
                watcher.stop()
            if loop is not None and loop.worker is not None:
                loop.worker.stop()
            if server is not None:
                server.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class _WorkerLoop:
    """Keeps a worker running until `stopping` (see the module docstring): started again
    when it dies, restarted when a watched file changes."""

    def __init__(self, env: dict[str, str], out: TextIO, watcher: ChangeWatcher | None, stopping: threading.Event,
                 banner: Any) -> None:
        self.env, self.out, self.watcher, self.stopping, self.banner = env, out, watcher, stopping, banner
        self.worker: DevWorker | None = None
        self.polled_before = False  # the full banner once; after that, one line per new worker
        self.shown = False  # this worker's polling was said
        self.pause, self.last_death = REPLACE_PAUSE_S, float("-inf")

    def say(self, text: str) -> None:
        print(f"rewind dev: {text}", file=self.out, flush=True)

    def start(self) -> None:
        if self.watcher is not None:
            self.watcher.take()  # what changed until now is what this worker loads
        self.worker, self.shown = DevWorker(self.env, self.out), False

    def changes(self) -> list[Path]:
        return self.watcher.take() if self.watcher is not None else []

    def run(self, server: DevServer | None) -> None:
        self.start()
        while not self.stopping.is_set():
            if server is not None and server.process.poll() is not None:
                raise ConfigError(f"the Temporal dev server exited with code {server.process.returncode}; "
                                  f"see {server.log_file}")
            changed = self.changes()
            worker = self.worker
            if worker is None:  # it exited before it polled: it starts again on a change
                if changed:
                    self.say(f"{_names(changed)} changed: starting the worker")
                    self.start()
                else:
                    time.sleep(0.1)
                continue
            if changed:
                self.say(f"{_names(changed)} changed: restarting the worker (pid {worker.pid})")
                worker.stop()
                self.start()
                continue
            code = worker.exited()
            if worker.ready.is_set() and not self.shown:
                self.shown = True
                if self.polled_before:
                    tools = ", ".join(worker.announce.get("tools") or []) or "none"
                    self.say(f"the worker polls again (pid {worker.pid}) with tools: {tools}")
                else:
                    print(self.banner(worker), file=self.out, flush=True)
                self.polled_before = True
            if code is None:
                time.sleep(0.1)
            elif not worker.ready.is_set():
                self.exited_before_polling(code)
            else:
                self.died(worker, code)

    def exited_before_polling(self, code: int) -> None:
        if self.watcher is None:
            raise ConfigError(f"the worker exited with {exit_text(code)} before it polled "
                              "(its lines above, prefixed `worker |`, say why)")
        self.say(f"the worker exited with {exit_text(code)} before it polled (its lines above, prefixed `worker |`, "
                 f"say why); it starts again on the next change to {self.watcher.targets.describe()}")
        self.worker = None

    def died(self, worker: DevWorker, code: int) -> None:
        """A worker that polled exited: start another after a pause that grows while they keep dying."""
        now = time.monotonic()
        self.pause = REPLACE_PAUSE_S if now - self.last_death > REPLACE_RESET_S else min(self.pause * 2, REPLACE_PAUSE_MAX_S)
        self.last_death = now
        self.say(f"the worker (pid {worker.pid}) exited with {exit_text(code)}; starting it again in {self.pause:g}s "
                 "(the server keeps serving)")
        deadline = now + self.pause
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if self.watcher is not None and self.watcher.take():  # an edit: the likely fix, start at once
                break
            time.sleep(0.1)
        if self.stopping.is_set():
            self.worker = None
            return
        self.start()


def _names(paths: list[Path]) -> str:
    cwd = Path.cwd().resolve()
    shown = sorted(str(p.relative_to(cwd)) if p.is_relative_to(cwd) else str(p) for p in paths)
    return ", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else "")
