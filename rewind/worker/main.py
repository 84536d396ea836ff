"""The Rewind worker: AgentWorkflow, CompensationWorkflow and their activities.

    rewind worker [--tool-modules mod1,mod2] [--task-queue Q]   (same as: python worker.py ...)

A worker polls its main task queue (workflows, model calls, the mirror) and
one task queue per tool it has (`workflows.vocabulary.wire.tool_task_queue`), so a tool
call only ever reaches a worker that holds the tool, and workers with
different tool modules can share one main queue.

Before it polls, the worker checks its configuration (the stores answer, a
second write of one key is refused, the tool modules import) and stops with
one line naming what is wrong; a Temporal server or a store that does not
answer yet is waited for, up to REWIND_STARTUP_WAIT_S (rewind/worker/startup.py). While it polls, it writes a health file that
`rewind health` reads (the container health check). With no OPENAI_API_KEY it
answers model calls from the scripted offline model, started in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import PollerBehaviorAutoscaling, Worker

from activities.code.experiment import ExperimentActivities
from activities.tools.idempotency import IdempotencyLedger
from activities.model.llm import LlmActivities, ModelEndpoint
from activities.code.pipelines import PipelineActivities, PipelineRegistry
from activities.model.pricing import PriceTable
from activities.record.redaction import Redactor
from activities.tools.runner import ToolActivities
from activities.code.graphs import find_langchain
from activities.code.graph_nodes import GraphNodeActivities
from activities.tools.registry import ToolRegistry
from activities.model.transcript import TranscriptStore
from activities.record.checkpoint_writer import CheckpointWriter
from activities.record.mirror import MirrorActivities
from checkpoint_bridge.branches.branching import Launcher
from checkpoint_bridge.checkpoints.outputs import OutputStore
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.events.bus import NoBus, Publisher
from rewind.temporal import tracing
from rewind.worker.events import EventsInterceptor
from rewind.worker import startup
from rewind.worker.sandbox import workflow_runner
from rewind.client import connect
from rewind.settings.config import Settings, lend_offline_model
from rewind.stores import check_stores, checkpoint_objects, events_bus, object_store
from rewind.temporal.runtime import core_runtime
from workflows.loop.agent import AgentWorkflow
from workflows.loop.compensation import CompensationWorkflow
from workflows.loop.describe import DescribeToolsWorkflow
from workflows.experiment.workflow import ExperimentWorkflow, ScoreWorkflow
from workflows.pipeline.workflow import PipelineWorkflow
from workflows.vocabulary.errors import ConfigError
from workflows.vocabulary.wire import PIPELINE_WORKFLOW, tool_task_queue

log = logging.getLogger("rewind.worker")

WORKFLOW_BUGS: tuple[type[BaseException], ...] = (
    TypeError, KeyError, AttributeError, IndexError, ValueError, AssertionError,
    ZeroDivisionError, NameError, LookupError, ArithmeticError,
)
HEALTH_INTERVAL_S = 5.0


def model_endpoint(settings: Settings) -> tuple[ModelEndpoint, Any]:
    """The configured endpoint, or a scripted offline model when no key is set."""
    if not settings.offline_model:
        return ModelEndpoint(base_url=settings.model_endpoint_url, api_key=settings.model_api_key), None
    from rewind.worker.scripted_model import ScriptedModelServer

    try:
        server = ScriptedModelServer(latency_ms=settings.scripted_latency_ms, dialect=settings.scripted_dialect,
                                     tokens_per_s=settings.scripted_tokens_per_s or 0.0)
    except ValueError as exc:  # the dialect: the settings checked the pace
        raise ConfigError(f"REWIND_SCRIPTED_DIALECT={settings.scripted_dialect!r}: {exc}") from None
    for name, turns in _scripts(settings).items():
        server.add_script(name, turns)
    base_url = server.start_in_thread()
    return ModelEndpoint(base_url=base_url, api_key="offline"), server


async def live_events(settings: Settings) -> tuple[Any, Publisher | None]:
    """The bus a worker publishes its runs' events on (REWIND_EVENTS), and its publisher; None
    with REWIND_EVENTS=off: nothing travels live, so nothing is streamed from the provider
    either. The caller closes the bus."""
    bus = events_bus(settings)
    return bus, None if isinstance(bus, NoBus) else await bus.start_publisher()


def _scripts(settings: Settings) -> dict[str, Any]:
    """REWIND_SCRIPTS or --scripts: a JSON file {"name": [turn, ...]}; run one with --model script:name."""
    if not settings.scripts_file:
        return {}
    named = (f"--scripts {settings.scripts_file}" if settings.scripts_source == "--scripts"
             else f"REWIND_SCRIPTS={settings.scripts_file}")
    try:
        scripts = json.loads(Path(settings.scripts_file).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{named}: cannot read a JSON object of scripts ({exc})") from None
    if not isinstance(scripts, dict):
        raise ConfigError(f"{named}: expected {{\"name\": [turns...]}}, got {type(scripts).__name__}")
    return scripts


class RewindWorker:
    """The worker's Temporal workers (main queue + one per tool) as one async context manager;
    closes the stores its activities use when it stops."""

    def __init__(self, workers: list[Worker], stores: list[Any]) -> None:
        self.workers = workers
        self._stores = stores
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> "RewindWorker":
        stack = contextlib.AsyncExitStack()
        try:
            for worker in self.workers:
                await stack.enter_async_context(worker)
        except BaseException:
            await stack.aclose()
            await self._close_stores()
            raise
        self._stack = stack
        for store in self._stores:
            if hasattr(store, "start_flusher"):  # the Redis hot tier: this worker moves its backlog on
                store.start_flusher()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            if self._stack is not None:
                await self._stack.aclose()
        finally:
            await self._close_stores()

    async def _close_stores(self) -> None:
        for store in self._stores:
            await store.aclose()


def build_worker(
    client: Client,
    settings: Settings,
    registry: ToolRegistry,
    endpoint: ModelEndpoint,
    *,
    max_cached_workflows: int | None = None,
    workflows: list[type] | None = None,
    redactor: Redactor | None = None,
    mcp: Any = None,
    pipelines: PipelineRegistry | None = None,
    events: Publisher | None = None,
) -> RewindWorker:
    """Workers for `settings.task_queue` and for each tool's queue. `workflows`
    replaces the workflow classes (tests deploy changed workflow code with it).
    `redactor` defaults to the settings' one plus the model key in use; `pipelines`
    are the @pipeline functions of the tool modules (none by default)."""
    pipelines = pipelines if pipelines is not None else PipelineRegistry()
    runtime = client.service_client.config.runtime
    objects = checkpoint_objects(settings, meter=runtime.metric_meter if runtime is not None else None)
    payloads = object_store(settings, settings.payload_url)
    if redactor is None:
        redactor = settings.redactor({"model_api_key": endpoint.api_key})
    # Large read-only tool outputs are stored once in the payload store and named
    # in history (checkpoint_bridge/checkpoints/outputs.py); one store, so one cache, serves all.
    outputs = OutputStore(payloads)
    if mcp is not None:  # activities.tools.mcp.tools.McpHub: sent marks and binary content in the payload store
        mcp.bind(payloads, outputs)
    checkpoints = CheckpointStore(objects, compression=settings.store_compression)
    # One writer for the mirror activity and the model calls that carry step records.
    writer = CheckpointWriter(checkpoints, redactor, outputs, events=events)
    llm = LlmActivities(endpoint, PriceTable.parse(settings.prices), TranscriptStore(payloads), redactor, outputs,
                        checkpoints=writer, events=events, stream=settings.model_stream)
    llm.open_client()
    # Idempotency records live with the run's live data, not in the checkpoint
    # archive (activities/tools/idempotency.py says why).
    tools = ToolActivities(registry, IdempotencyLedger(payloads), redactor,
                           max_output_bytes=settings.max_tool_output_bytes, outputs=outputs,
                           inline_fallback_bytes=settings.payload_threshold // 2,
                           pipelines=pipelines.callable_specs(registry.names()), checkpoints=writer, events=events)
    mirror = MirrorActivities(writer)
    # An experiment forks its branches from a worker, as `rewind fork` does from the CLI.
    experiment = ExperimentActivities(checkpoints, Launcher(settings.task_queue, TranscriptStore(payloads),
                                                            redactor.redact_text))
    pipeline = PipelineActivities(pipelines, registry, checkpoints)
    graph_nodes = GraphNodeActivities(pipelines, PriceTable.parse(settings.prices), checkpoints=writer, events=events)
    tool_activities = [tools.describe_tools, tools.run_tool, tools.compensate_tool, tools.check_tool_call]
    options: dict[str, Any] = {} if max_cached_workflows is None else {"max_cached_workflows": max_cached_workflows}
    # Rewind's own workflow code runs without the sandbox unless REWIND_WORKFLOW_SANDBOX=1:
    # it is Rewind's own (users write tools, which run as activities, and declare agents as
    # data), and the test suite runs it in the sandbox (its in-process workers and the
    # replay of every recorded shape), so a nondeterministic call in it fails there.
    # Without it each workflow task skips the sandbox's per-payload context lookups
    # (exec'd snippets): about a fifth of a worker's CPU per step (docs/performance.md).
    # Temporal's Go and Java SDKs have no sandbox at all. A pipeline is the user's own
    # code running as workflow code: always in the sandbox (rewind/worker/sandbox.py).
    options["workflow_runner"] = workflow_runner(PIPELINE_WORKFLOW, pipelines.modules(), settings.workflow_sandbox)
    if events is not None:  # the runs' events (docs/streaming.md): workflow code hands them over an extern
        options["interceptors"] = [EventsInterceptor(events)]
    main = Worker(
        client,
        task_queue=settings.task_queue,
        workflows=workflows or [AgentWorkflow, CompensationWorkflow, ExperimentWorkflow, ScoreWorkflow,
                                DescribeToolsWorkflow, PipelineWorkflow],
        # The tool activities stay on the main queue too, for runs started
        # before tool queues (they schedule tool calls here).
        activities=[llm.call_llm, mirror.mirror_step, mirror.mirror_steps, *tool_activities,
                    experiment.start_branch, experiment.watch_branch, experiment.score_branch,
                    pipeline.describe_pipeline, graph_nodes.run_graph_node],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_timeout_s),
        graceful_shutdown_timeout=timedelta(seconds=5),
        # A bug in workflow code fails the run visibly instead of retrying its
        # workflow task forever. Nondeterminism (a bad deploy) is not listed:
        # those tasks keep retrying, so rolling the worker back recovers them.
        workflow_failure_exception_types=list(WORKFLOW_BUGS),
        **options,
    )
    per_tool = [
        Worker(
            client,
            task_queue=tool_task_queue(settings.task_queue, name),
            activities=tool_activities,
            graceful_shutdown_timeout=timedelta(seconds=5),
            # One poller per idle tool queue, more while its calls keep coming.
            activity_task_poller_behavior=PollerBehaviorAutoscaling(minimum=1, maximum=10, initial=1),
        )
        for name in registry.names()
    ]
    return RewindWorker([main, *per_tool], [objects, payloads])


class HealthFile:
    """What `rewind health` reads: this worker polls, and Temporal answers."""

    def __init__(self, path: Path, settings: Settings, tools: list[str], group: WorkerGroup | None = None) -> None:
        self.path = path
        # The processes of a --processes N group share one file, under the supervisor's pid
        # (healthy while it lives and any of them polls; it removes the file when it stops).
        self._base = {
            "pid": os.getpid() if group is None else group.supervisor_pid, "host": socket.gethostname(),
            "task_queue": settings.task_queue, "temporal_address": settings.temporal_address, "tools": tools,
        }
        if group is not None:
            self._base.update(worker_pid=os.getpid(), processes=group.processes)

    def write(self, temporal_ok: bool, error: str | None = None) -> None:
        doc = {**self._base, "updated_at": time.time(), "temporal_ok": temporal_ok, "error": error}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            doc = json.loads(self.path.read_text())
            if doc.get("pid") == os.getpid():
                self.path.unlink()

    async def keep_fresh(self, client: Client) -> None:
        while True:
            try:
                ok = await client.service_client.check_health(timeout=timedelta(seconds=5))
                self.write(bool(ok))
            except Exception as exc:  # noqa: BLE001 - reported in the file, not fatal
                self.write(False, f"{type(exc).__name__}: {exc}"[:300])
            await asyncio.sleep(HEALTH_INTERVAL_S)


def metrics_runtime(settings: Settings) -> Any:
    """A Temporal runtime serving Prometheus metrics on REWIND_METRICS_PORT (Temporal's and
    Rewind's own, workflows/vocabulary/metrics.py), or None for connect's (no endpoint)."""
    if settings.metrics_port is None:
        return None
    try:
        return core_runtime(f"0.0.0.0:{settings.metrics_port}")
    except Exception as exc:  # noqa: BLE001 - the SDK reports a taken port as a plain error
        raise ConfigError(f"REWIND_METRICS_PORT={settings.metrics_port}: cannot serve metrics there ({exc}); "
                          "choose a free port or unset it") from None


class WorkerGroup:
    """This process is slot `slot` of `processes` worker processes under one supervisor."""

    def __init__(self, supervisor_pid: int, slot: int, processes: int) -> None:
        self.supervisor_pid, self.slot, self.processes = supervisor_pid, slot, processes

    async def watch_supervisor(self, stop: asyncio.Event) -> None:
        # Linux kills a process with its supervisor (worker_pool.die_with_parent); this is
        # for the systems without that: a parent gone means this process is reparented.
        while os.getppid() == self.supervisor_pid:
            await asyncio.sleep(1.0)
        log.warning("the worker supervisor (pid %s) is gone: stopping", self.supervisor_pid)
        stop.set()


async def run_worker(settings: Settings, tool_modules: list[str], *, announce_json: bool = False,
                     group: WorkerGroup | None = None) -> None:
    # `--tool-modules mymod` finds mymod.py in the current directory, as `python -m` would.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    # The offline model first: a tools module that builds its model client at import (a graph's
    # `ChatOpenAI()` reading OPENAI_API_KEY) finds it in the environment, as at home.
    endpoint, offline = model_endpoint(settings)
    try:
        if offline is not None:
            lend_offline_model(endpoint.base_url)
        await _import_and_serve(settings, tool_modules, endpoint, offline, announce_json, group)
    finally:
        if offline is not None:
            offline.stop_thread()


async def _import_and_serve(settings: Settings, tool_modules: list[str], endpoint: ModelEndpoint, offline: Any,
                            announce_json: bool, group: WorkerGroup | None) -> None:
    registry = ToolRegistry.from_modules(tool_modules, max_arg_chars=settings.max_arg_chars, finders=[find_langchain])
    pipelines = PipelineRegistry.from_modules(tool_modules)
    servers = settings.mcp_servers()
    give_up = startup.deadline(settings.startup_wait_s)
    await startup.when_up(lambda: check_stores(settings, probe_writes=True), give_up)
    hub = None
    if servers:
        from activities.tools.mcp.tools import McpHub

        # The worker starts its stdio servers and holds one session per server (activities/tools/mcp/).
        hub = McpHub(servers, approve_destructive=settings.approve_destructive, log_dir=settings.home)
        for mcp_tool in await hub.start():
            registry.add(mcp_tool)
        log.info("MCP servers: %s (stdio servers' stderr in %s/mcp-NAME.log)", "; ".join(hub.describe()), settings.home)
    try:
        await _serve(settings, registry, hub, announce_json, group, give_up, pipelines, endpoint, offline)
    finally:
        if hub is not None:
            await hub.close()


async def _serve(settings: Settings, registry: ToolRegistry, hub: Any, announce_json: bool,
                 group: WorkerGroup | None, give_up: float, pipelines: PipelineRegistry, endpoint: ModelEndpoint,
                 offline: Any) -> None:
    runtime = metrics_runtime(settings)
    client = await startup.when_up(lambda: connect(settings, runtime, service="rewind-worker"), give_up)
    if offline is not None:  # said once the stores and Temporal answered (a refused start is one line)
        log.warning("OPENAI_API_KEY is not set: serving model calls from the scripted offline model at %s",
                    endpoint.base_url)
    if settings.tracing:
        log.info("tracing on: spans exported over OTLP (%s)", settings.otel_protocol)
    bus, publisher = await live_events(settings)
    worker = build_worker(client, settings, registry, endpoint, mcp=hub, pipelines=pipelines, events=publisher)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    health = HealthFile(settings.worker_health_file, settings, registry.names(), group)
    try:
        async with worker:
            log.info(
                "worker on %s (namespace %r, %s), task queue %r, tools: %s, checkpoints in %s, live data in %s, "
                "model calls to %s%s%s",
                settings.temporal_address, settings.namespace, settings.temporal.describe(), settings.task_queue, ", ".join(registry.names()) or "none",
                settings.store_url, settings.payload_url,
                "the scripted offline model" if offline is not None else endpoint.base_url,
                ", workflow sandbox on (REWIND_WORKFLOW_SANDBOX=1)" if settings.workflow_sandbox else "",
                "".join(f", {what}: {', '.join(names)}" for what, names in (
                    ("pipelines", [n for n in pipelines.names() if ":" not in n]),
                    ("graphs", [n for n in pipelines.names() if ":" in n])) if names),
            )
            if announce_json:  # `rewind worker --json`: one document once the worker polls
                print(json.dumps({
                    "task_queue": settings.task_queue, "temporal_address": settings.temporal_address,
                    "tools": registry.names(), "pipelines": pipelines.names(),
                    "store": settings.store_url, "payloads": settings.payload_url,
                    "model": "scripted offline model" if offline is not None else endpoint.base_url,
                    "pid": os.getpid(),
                }), flush=True)
            beat = asyncio.create_task(health.keep_fresh(client))
            orphan = asyncio.create_task(group.watch_supervisor(stop)) if group is not None else None
            try:
                await stop.wait()
            finally:
                beat.cancel()
                if orphan is not None:
                    orphan.cancel()
                health.remove()
    finally:
        await bus.aclose()
        tracing.shutdown()  # the spans still buffered


def main(argv: list[str] | None = None) -> None:
    from rewind.worker.args import add_worker_arguments, worker_command

    parser = argparse.ArgumentParser(prog="rewind worker", description="Run a Rewind worker")
    add_worker_arguments(parser)
    args = parser.parse_args(argv)
    code = worker_command(args, run_supervised_or_single)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # see rewind.cli.main.main: the native runtime can abort at interpreter exit


def run_supervised_or_single(settings: Settings, modules: list[str], args: argparse.Namespace) -> int:
    """This process's worker: alone, or slot `args.slot` of a `--processes N` group whose
    supervisor is `args.supervised_by` (rewind/worker/pool.py)."""
    supervisor = getattr(args, "supervised_by", None)
    group = None
    if supervisor is not None:
        group = WorkerGroup(supervisor, args.slot, args.processes or 1)
        if settings.metrics_port is not None:  # one endpoint per process: REWIND_METRICS_PORT + slot
            settings.metrics_port += args.slot
    asyncio.run(run_worker(settings, modules, announce_json=getattr(args, "json", False) or group is not None,
                           group=group))
    return 0


__all__ = ["build_worker", "run_worker", "model_endpoint", "live_events", "RewindWorker", "main", "WORKFLOW_BUGS",
           "WorkerGroup"]


if __name__ == "__main__":  # `python -m rewind.worker.main ...` (rewind/worker/__main__.py is `python -m rewind.worker`)
    main()
