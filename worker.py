"""Start a Rewind worker: registers AgentWorkflow and the model/tool activities.

    python worker.py [--tools mod1,mod2]      (same as `rewind worker`)

With no OPENAI_API_KEY the worker serves the model calls from the scripted
offline model, started in this process, so everything runs without a key.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.idempotency import IdempotencyLedger
from activities.llm import LlmActivities, ModelEndpoint
from activities.pricing import PriceTable
from activities.tool_runner import ToolActivities
from activities.tools import ToolRegistry
from activities.transcript import TranscriptStore
from checkpoint_bridge.mirror import MirrorActivities
from checkpoint_bridge.objects import open_object_store
from checkpoint_bridge.store import CheckpointStore
from rewind.client import connect
from rewind.config import Settings
from rewind.redaction import Redactor
from workflows.agent import AgentWorkflow
from workflows.compensation import CompensationWorkflow

log = logging.getLogger("rewind.worker")

WORKFLOW_BUGS: tuple[type[BaseException], ...] = (
    TypeError, KeyError, AttributeError, IndexError, ValueError, AssertionError,
    ZeroDivisionError, NameError, LookupError, ArithmeticError,
)


def model_endpoint() -> tuple[ModelEndpoint, object | None]:
    """The configured endpoint, or a scripted offline model when no key is set."""
    endpoint = ModelEndpoint.from_env()
    if endpoint.api_key:
        return endpoint, None
    from rewind.scripted_model import ScriptedModelServer

    server = ScriptedModelServer()
    base_url = server.start_in_thread()
    log.warning("OPENAI_API_KEY is not set: serving model calls from the scripted offline model at %s", base_url)
    return ModelEndpoint(base_url=base_url, api_key="offline"), server


class _ClosingWorker(Worker):
    """A Worker that closes the stores its activities use when it shuts down."""

    def __init__(self, stores: list[object], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stores = stores

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await super().__aexit__(*exc_info)
        finally:
            for store in self._stores:
                await store.aclose()  # type: ignore[attr-defined]


def build_worker(
    client: Client,
    settings: Settings,
    registry: ToolRegistry,
    endpoint: ModelEndpoint,
    *,
    max_cached_workflows: int | None = None,
    workflows: list[type] | None = None,
    redactor: Redactor | None = None,
) -> Worker:
    """A worker for `settings.task_queue`. `workflows` replaces the workflow
    classes (tests use it to deploy changed workflow code). `redactor`
    defaults to one built from the environment now (REWIND_SECRET_ENV,
    REWIND_REDACT_PATTERNS) plus the model key in use, shared by every activity."""
    objects = open_object_store(settings.store_url)
    payloads = open_object_store(settings.payload_url)
    if redactor is None:
        redactor = Redactor.from_env(secrets={"model_api_key": endpoint.api_key})
    llm = LlmActivities(endpoint, PriceTable.from_env(), TranscriptStore(payloads), redactor)
    tools = ToolActivities(registry, IdempotencyLedger(objects), redactor)
    mirror = MirrorActivities(CheckpointStore(objects), redactor)
    options = {} if max_cached_workflows is None else {"max_cached_workflows": max_cached_workflows}
    return _ClosingWorker(
        [objects, payloads],
        client,
        task_queue=settings.task_queue,
        workflows=workflows or [AgentWorkflow, CompensationWorkflow],
        activities=[llm.call_llm, tools.describe_tools, tools.run_tool, tools.compensate_tool, mirror.mirror_step],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.sticky_timeout_s),
        graceful_shutdown_timeout=timedelta(seconds=5),
        # A bug in workflow code fails the run visibly instead of retrying its
        # workflow task forever. Nondeterminism (a bad deploy) is not listed:
        # those tasks keep retrying, so rolling the worker back recovers them.
        workflow_failure_exception_types=list(WORKFLOW_BUGS),
        **options,
    )


async def run_worker(settings: Settings, tool_modules: list[str]) -> None:
    registry = ToolRegistry.from_modules(tool_modules)
    endpoint, offline = model_endpoint()
    client = await connect(settings)
    worker = build_worker(client, settings, registry, endpoint)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker on %s, task queue %r, tools: %s", settings.temporal_address, settings.task_queue,
        ", ".join(registry.names()) or "none",
    )
    async with worker:
        await stop.wait()
    if offline is not None:
        offline.stop_thread()  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a Rewind worker")
    parser.add_argument("--tools", help="comma-separated tool modules (default: REWIND_TOOLS)")
    parser.add_argument("--task-queue", help="task queue (default: REWIND_TASK_QUEUE or 'rewind')")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.task_queue:
        settings.task_queue = args.task_queue
    modules = [m.strip() for m in args.tools.split(",") if m.strip()] if args.tools else settings.tool_modules
    logging.basicConfig(level=os.environ.get("REWIND_LOG_LEVEL", "INFO"), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(run_worker(settings, modules))


if __name__ == "__main__":
    main()
