"""The embedded stack in one async context manager: dev server, model, worker.

Used by `rewind demo` and the examples: a Temporal dev server on free ports
(state in .rewind/temporal.db, reused across runs), the scripted offline model
unless OPENAI_API_KEY is set, and an in-process worker with the given tools.
A dev server left behind by a killed run is stopped first (rewind/temporal/dev_server.py).
"""

from __future__ import annotations

import logging
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, TextIO

from temporalio.client import Client

from activities.model.llm import ModelEndpoint
from activities.code.graphs import find_langchain
from activities.tools.registry import ToolRegistry
from rewind.client import connect
from rewind.settings.config import Settings, lend_offline_model
from rewind.temporal.dev_server import DevServer, running_server
from rewind.settings.temporal import TemporalConnection


@dataclass
class Stack:
    client: Client
    settings: Settings
    server: DevServer | None  # None: a server another process runs on the same home
    endpoint: ModelEndpoint
    offline: bool
    tools: list[Any] = field(default_factory=list)  # the worker's ToolSpecs


@asynccontextmanager
async def embedded_stack(settings: Settings, tool_modules: list[str], out: TextIO = sys.stdout, *,
                         port: int | None = None, ui_port: int | None = None,
                         shared_server: bool = False, mcp_servers: list[Any] | None = None,
                         scripts: dict[str, list[Any]] | None = None, pace: Any = None) -> AsyncIterator[Stack]:
    """`port`/`ui_port`: the server's (default: free ones). `shared_server`: other
    processes of this home may use the server while it runs (`rewind demo --keep`).
    `mcp_servers`: MCP servers whose tools the worker offers too; `scripts`: turns the
    offline model can play (`--model script:NAME`); `pace`: how fast it streams
    (rewind/worker/scripted_stream.py Pace; default: the settings'). The worker publishes
    its runs' events (REWIND_EVENTS), so `rewind.events` and `rewind watch` read them live."""
    from activities.code.pipelines import PipelineRegistry
    from rewind.worker.main import build_worker, live_events, model_endpoint

    # Retried tool failures are part of the show (the demo's flaky search);
    # the worker's per-attempt tracebacks would drown the progress display.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    home = settings.home
    home.mkdir(parents=True, exist_ok=True)
    # A dev server left behind by a killed demo is stopped by DevServer.start;
    # one that `rewind server` (or another demo) runs on this home is shared.
    db_file = home / "temporal.db"
    shared = running_server(db_file)
    server = None if shared else DevServer.start(db_file, port=port, ui_port=ui_port, log_file=home / "temporal.log",
                                                 shared=shared_server)
    offline = None
    hub: Any = None
    bus: Any = None
    # Everything after the server started is inside the try: a broken pipe on the
    # first print (`rewind demo | head -1`) must not leave the server running.
    try:
        # The embedded server is plaintext on loopback: a TLS profile or API key of the
        # shell (for the team's cluster) is not for it.
        settings.temporal = TemporalConnection()
        if server is not None:
            settings.temporal_address = server.address
            print(f"Temporal dev server on {server.address} (UI: http://127.0.0.1:{server.ui_port}), state in {server.db_file}", file=out)
        else:
            settings.temporal_address = shared  # type: ignore[assignment]
            print(f"Temporal dev server already running on {shared} (state in {db_file}): using it", file=out)
        endpoint, offline = model_endpoint(settings)
        if offline is not None:  # the tools modules' own clients (a graph's ChatOpenAI()) reach it too
            lend_offline_model(endpoint.base_url)
            for name, turns in (scripts or {}).items():
                offline.add_script(name, turns)
            if pace is not None:
                offline.pace = pace
        print("model: " + ("scripted offline model at " + str(endpoint.base_url) if offline
                           else f"OpenAI-compatible API {endpoint.base_url}"), file=out)
        client = await connect(settings)
        registry = ToolRegistry.from_modules(tool_modules, max_arg_chars=settings.max_arg_chars,
                                             finders=[find_langchain])
        if mcp_servers:
            from activities.tools.mcp.tools import McpHub

            hub = McpHub(mcp_servers, approve_destructive=settings.approve_destructive, log_dir=home)
            for mcp_tool in await hub.start():
                registry.add(mcp_tool)
        pipelines = PipelineRegistry.from_modules(tool_modules)
        bus, publisher = await live_events(settings)
        async with build_worker(client, settings, registry, endpoint, mcp=hub, pipelines=pipelines, events=publisher):
            yield Stack(client, settings, server, endpoint, offline is not None, registry.specs())
    finally:
        if bus is not None:
            await bus.aclose()
        if hub is not None:
            await hub.close()
        if server is not None:
            server.stop()
        if offline is not None:
            offline.stop_thread()  # type: ignore[attr-defined]
