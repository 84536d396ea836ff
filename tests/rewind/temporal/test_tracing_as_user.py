"""Traces as a user gets them: workers and the CLI as subprocesses configured only by
OTEL_* variables, exporting over OTLP to a small receiver this test runs (OTLP/HTTP,
and gRPC), decoded with opentelemetry-proto. A worker is SIGKILLed mid-run and a
second one finishes the run: no step span twice, none lost."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from as_user import one_line_error, rewind, rewind_json, user_workers
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse

TOOLS = '''
from pathlib import Path

from activities.tools.registry import tool

GATES = Path({gates!r})


@tool
async def look(term: str) -> str:
    """Read-only."""
    return f"about {{term}}"


@tool(heartbeat_s=1, timeout_s=120, max_attempts=5)
async def gate(name: str) -> str:
    """Says it started, then waits until the test opens the gate."""
    GATES.mkdir(exist_ok=True)
    (GATES / f"{{name}}.started").write_text("")
    while not (GATES / name).exists():
        import asyncio
        await asyncio.sleep(0.05)
    return f"gate {{name}} open"
'''


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class Received:
    """The spans the receiver got, flattened: name, ids, service, attributes, status."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0

    def add(self, request: ExportTraceServiceRequest) -> None:
        self.requests += 1
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append({
                        "name": span.name, "trace": span.trace_id.hex(), "id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex() or None, "service": resource.get("service.name"),
                        "attributes": {kv.key: _value(kv.value) for kv in span.attributes},
                        "error": span.status.code == span.status.STATUS_CODE_ERROR, "start": span.start_time_unix_nano,
                    })

    def named(self, name: str, run_id: str | None = None) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name
                and (run_id is None or s["attributes"].get("rewind.run_id") == run_id)]

    async def wait_for(self, what: str, check: Any, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                names = Counter(s["name"] for s in self.spans)
                raise AssertionError(f"no {what} after {timeout_s:.0f}s; received {dict(names)}")
            await asyncio.sleep(0.05)


async def _http_receiver(received: Received) -> tuple[web.AppRunner, str]:
    async def export(request: web.Request) -> web.Response:
        received.add(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def _otel_env(endpoint: str, **more: str) -> dict[str, str]:
    # A short batch delay, so a worker's spans leave it before the test kills it.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50", **more}


def _write_tools(folder: Path, gates: Path) -> None:
    (folder / "tools.py").write_text(TOOLS.format(gates=str(gates)))


def _ancestors(span: dict[str, Any], spans: list[dict[str, Any]]) -> list[str]:
    by_id, names, parent = {s["id"]: s for s in spans}, [], span["parent"]
    while parent is not None and parent in by_id:
        names.append(by_id[parent]["name"])
        parent = by_id[parent]["parent"]
    return names


async def test_a_crashed_worker_leaves_one_span_per_step(world, tmp_path) -> None:
    received = Received()
    runner, endpoint = await _http_receiver(received)
    gates = tmp_path / "gates"
    first, second, cli = world.folder("w1"), world.folder("w2"), world.folder("cli")
    for folder in (first, second):
        _write_tools(folder, gates)
    name = "traced-" + world.queue
    world.model.add_script(name, [
        {"tool_calls": [{"name": "look", "arguments": {"term": "a"}}]},
        {"tool_calls": [{"name": "gate", "arguments": {"name": "g"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"term": "a"}}]},
        {"content": "done"},
    ])
    model, run_id = f"script:{name}", "traced-1"
    env = world.env(cli, **_otel_env(endpoint))
    try:
        async with user_workers() as start:
            crashing = start(first, world.env(first, **_otel_env(endpoint)), "--tool-modules", "tools")
            await crashing.wait_ready()
            await rewind_json(cli, env, "start", "--task", "trace me", "--model", model, "--run-id", run_id,
                              "--tools", "look,gate")
            # Step 1 ended and its span left the worker; step 2's model call too; its gate call is running.
            await received.wait_for("step 1 span", lambda: received.named("rewind.step", run_id))
            await received.wait_for("step 2 model call", lambda: len(received.named(f"chat {model}", run_id)) >= 2)
            await received.wait_for("gate call", lambda: (gates / "g.started").exists())
            # What the first worker recorded of the gate call's scheduling must have been exported
            # before the kill: a span still in its buffer dies with it (the README says so); this
            # test is about the replay on the second worker adding none.
            await received.wait_for("the gate's StartActivity span", lambda: len([  # step 1's look, step 2's gate
                s for s in received.spans if s["name"] == "StartActivity:run_tool"
                and s["trace"] == received.named("rewind.step", run_id)[0]["trace"]]) >= 2)
            crashing.kill()
            taking_over = start(second, world.env(second, **_otel_env(endpoint)), "--tool-modules", "tools")
            await taking_over.wait_ready()
            (gates / "g").write_text("")
            deadline = time.monotonic() + 120
            while (await rewind_json(cli, env, "status", run_id))["state"] != "completed":
                assert time.monotonic() < deadline, "the run did not complete on the second worker"
                await asyncio.sleep(0.2)
            await received.wait_for("run span", lambda: received.named("rewind.run", run_id))
            await received.wait_for("step 4 span", lambda: len(received.named("rewind.step", run_id)) >= 4)
            await taking_over.stop_async()  # a graceful stop exports whatever is left
    finally:
        await runner.cleanup()
    spans = received.spans

    # Every step exactly once: the second worker replayed step 1 without emitting it again.
    steps = received.named("rewind.step", run_id)
    assert sorted(s["attributes"]["rewind.step"] for s in steps) == [1, 2, 3, 4], steps
    [run] = received.named("rewind.run", run_id)
    assert {s["parent"] for s in steps} == {run["id"]} and {s["trace"] for s in steps} == {run["trace"]}
    assert run["attributes"]["rewind.state"] == "completed" and run["attributes"]["rewind.steps"] == 4

    # The trace starts at the CLI call: `rewind start`'s StartWorkflow span, from service rewind-cli.
    [started] = [s for s in spans if s["name"] == "StartWorkflow:AgentWorkflow" and s["trace"] == run["trace"]]
    assert started["service"] == "rewind-cli" and started["parent"] is None and run["parent"] == started["id"]
    assert {s["service"] for s in steps} == {"rewind-worker"}

    # Model calls: one per step, each with the model, tokens and attempt, under its step.
    chats = received.named(f"chat {model}", run_id)
    assert sorted(c["attributes"]["rewind.step"] for c in chats) == [1, 2, 3, 4]
    for chat in chats:
        a = chat["attributes"]
        assert a["gen_ai.request.model"] == model and a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert "rewind.cost_usd" in a and a["rewind.attempt"] == 1
        assert _ancestors(chat, spans)[:3] == ["RunActivity:call_llm", "StartActivity:call_llm", "rewind.step"]
    # Tool calls: look ran in step 1, was cached in step 3; the gate's killed attempt left no
    # span, the attempt that ran on the second worker is attempt 2.
    looks = sorted(received.named("execute_tool look", run_id), key=lambda s: s["attributes"]["rewind.step"])
    assert [(s["attributes"]["rewind.step"], s["attributes"]["rewind.cache_hit"]) for s in looks] == [(1, False), (3, True)]
    [gate] = received.named("execute_tool gate", run_id)
    assert gate["attributes"]["rewind.attempt"] == 2 and gate["attributes"]["gen_ai.tool.name"] == "gate"
    assert gate["attributes"]["rewind.step"] == 2 and not gate["error"]
    # Under step 2's span, through the StartActivity span the first worker emitted when it scheduled the call.
    assert _ancestors(gate, spans)[:3] == ["RunActivity:run_tool", "StartActivity:run_tool", "rewind.step"]
    by_id = {s["id"]: s for s in spans}
    scheduled = by_id[by_id[gate["parent"]]["parent"]]
    assert by_id[scheduled["parent"]]["attributes"]["rewind.step"] == 2


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    async def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the gRPC method's name
        self.received.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_traces_over_grpc(world, tmp_path) -> None:
    received = Received()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Collector(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    wdir, cli = world.folder("w"), world.folder("cli")
    _write_tools(wdir, tmp_path / "gates")
    name = "grpc-" + world.queue
    world.model.add_script(name, [{"tool_calls": [{"name": "look", "arguments": {"term": "b"}}]}, {"content": "ok"}])
    otel = _otel_env(f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc", OTEL_SERVICE_NAME="my-agents")
    env = world.env(cli, **otel)
    try:
        async with user_workers() as start:
            worker = start(wdir, world.env(wdir, **otel), "--tool-modules", "tools")
            await worker.wait_ready()
            await rewind_json(cli, env, "start", "--task", "over grpc", "--model", f"script:{name}",
                              "--run-id", "grpc-1", "--tools", "look", "--wait")
            await received.wait_for("run span", lambda: received.named("rewind.run", "grpc-1"))
    finally:
        await server.stop(None)
    assert sorted(s["attributes"]["rewind.step"] for s in received.named("rewind.step", "grpc-1")) == [1, 2]
    assert {s["service"] for s in received.spans if s["attributes"].get("rewind.run_id") == "grpc-1"} == {"my-agents"}
    assert len(received.named("execute_tool look", "grpc-1")) == 1


async def test_a_bad_protocol_is_one_line(world) -> None:
    cli = world.folder("cli")
    env = world.env(cli, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    code, _, err = await rewind(cli, env, "status", "nothing")
    one_line_error(code, err, "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'", "http/protobuf or grpc", prefix="rewind: ")
