"""Traces of real runs, in process: a worker in this test process against the dev
server and the scripted model, its spans in the OpenTelemetry SDK's in-memory
exporter. The span tree, the attributes, and replays that emit nothing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporalio.worker import Replayer

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry, subagent, tool, tool_context
from rewind.temporal import tracing
from rewind.client import connect, start_run
from rewind.settings.config import Settings
from rewind.temporal.tracing_otel import Tracing
from rewind.worker.main import build_worker
from workflows.loop.agent import AgentWorkflow
from workflows.loop.compensation import CompensationWorkflow
from workflows.vocabulary.contracts import AgentInput

_EXPORTER = InMemorySpanExporter()


@tool
async def look(term: str) -> str:
    """Read-only: a repeat with the same arguments is answered from the run's cache."""
    return f"about {term}"


@tool(max_attempts=3)
async def flaky(item: str) -> str:
    """Fails its first attempt; Temporal retries it."""
    if tool_context().attempt == 1:
        raise RuntimeError("the first attempt fails")
    return f"{item} done"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The process's tracing, every span kept in memory (installed once: a process has one provider)."""
    if tracing.current() is None:
        tracing.install(Tracing.build("rewind-test", processor=SimpleSpanProcessor(_EXPORTER)))
    return _EXPORTER


@pytest.fixture
def traced(settings: Settings, exporter: InMemorySpanExporter) -> Settings:
    return dataclasses.replace(settings, tracing=True)


def _script(model, turns: list[dict]) -> str:
    name = f"trace-{uuid.uuid4().hex[:8]}"
    model.add_script(name, turns)
    return f"script:{name}"


def _of_run(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    """Every span of the run's trace (found through its Rewind spans)."""
    spans = exporter.get_finished_spans()
    traces = {s.context.trace_id for s in spans if (s.attributes or {}).get("rewind.run_id") == run_id}
    assert len(traces) == 1, f"the run's spans are in {len(traces)} traces"
    return [s for s in spans if s.context.trace_id in traces]


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    by_id = {s.context.span_id: s for s in spans}
    names, parent = [], span.parent
    while parent is not None:
        found = by_id.get(parent.span_id)
        if found is None:
            names.append("<missing>")
            break
        names.append(found.name)
        parent = found.parent
    return names


def _step_of(span: ReadableSpan, spans: list[ReadableSpan]) -> int:
    """The step span `span` descends from."""
    by_id = {s.context.span_id: s for s in spans}
    parent = span.parent
    while parent is not None:
        found = by_id[parent.span_id]
        if found.name == "rewind.step":
            return found.attributes["rewind.step"]
        parent = found.parent
    raise AssertionError(f"{span.name} is under no step span")


async def _run(client, settings: Settings, model, *, max_cached_workflows: int | None = None, fast: bool = False) -> Any:
    """Three steps: look + flaky (retried once); look again (cached); the answer."""
    name = _script(model, [
        {"tool_calls": [{"name": "look", "arguments": {"term": "a"}}, {"name": "flaky", "arguments": {"item": "x"}}]},
        {"tool_calls": [{"name": "look", "arguments": {"term": "a"}}]},
        {"content": "done"},
    ])
    priced = dataclasses.replace(settings, prices=json.dumps({name: {"input": 1000.0, "output": 2000.0}}))
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    run_id = f"trace-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, priced, ToolRegistry([look, flaky]), endpoint, max_cached_workflows=max_cached_workflows):
        handle = await start_run(client, priced, AgentInput(run_id=run_id, task="trace me", model=name, tools=["look", "flaky"],
                                                          fast=fast))
        result = await handle.result()
    assert result.status.state == "completed"
    return run_id, handle, result


async def test_a_run_is_one_trace_run_step_model_and_tool_spans(traced, model, exporter):
    client = await connect(traced)
    run_id, _, result = await _run(client, traced, model)
    spans = _of_run(exporter, run_id)
    status = result.status

    # The trace starts at the client's call (StartWorkflow), and the run is under it.
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["StartWorkflow:AgentWorkflow"], [r.name for r in roots]
    [run] = _named(spans, "rewind.run")
    assert run.parent.span_id == roots[0].context.span_id
    assert run.attributes["rewind.state"] == "completed" and run.attributes["rewind.steps"] == 3
    assert run.attributes["rewind.branch"] == "main" and run.attributes["gen_ai.request.model"] == status.model
    assert run.attributes["gen_ai.usage.input_tokens"] == status.ledger.prompt_tokens > 0
    assert run.attributes["gen_ai.usage.output_tokens"] == status.ledger.completion_tokens > 0
    assert run.attributes["rewind.cost_usd"] == pytest.approx(status.ledger.cost_usd) and status.ledger.cost_usd > 0

    # One span per step, children of the run, inside its time.
    steps = sorted(_named(spans, "rewind.step"), key=lambda s: s.attributes["rewind.step"])
    assert [s.attributes["rewind.step"] for s in steps] == [1, 2, 3]
    assert all(s.parent.span_id == run.context.span_id for s in steps)
    assert all(run.start_time <= s.start_time <= s.end_time <= run.end_time for s in steps)
    assert [s.attributes["rewind.step_label"] for s in steps][-1] == "final answer"

    # A model call per step, under its step (through Temporal's StartActivity / RunActivity).
    chats = _named(spans, f"chat {status.model}")
    assert sorted(_step_of(c, spans) for c in chats) == [1, 2, 3]
    for chat in chats:
        assert _ancestors(chat, spans)[:3] == ["RunActivity:call_llm", "StartActivity:call_llm", "rewind.step"]
        step = steps[_step_of(chat, spans) - 1]
        assert chat.attributes["gen_ai.operation.name"] == "chat" and chat.attributes["rewind.attempt"] == 1
        assert chat.attributes["gen_ai.usage.input_tokens"] == step.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] == step.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["rewind.cost_usd"] == pytest.approx(step.attributes["rewind.cost_usd"])
        assert chat.attributes["rewind.cost_usd"] > 0 and chat.attributes["rewind.priced"] is True
        assert chat.attributes["rewind.run_id"] == run_id

    # Tool calls: `look` ran once in step 1 and was answered from the cache in step 2.
    looks = sorted(_named(spans, "execute_tool look"), key=lambda s: s.attributes["rewind.step"])
    assert [(s.attributes["rewind.step"], s.attributes["rewind.cache_hit"]) for s in looks] == [(1, False), (2, True)]
    assert _ancestors(looks[0], spans)[:3] == ["RunActivity:run_tool", "StartActivity:run_tool", "rewind.step"]
    assert looks[1].parent.span_id == steps[1].context.span_id  # answered by the workflow itself
    assert looks[1].attributes["rewind.outcome"] == "cached" and looks[1].attributes["gen_ai.tool.name"] == "look"
    # `flaky`: one span per attempt, the first failed, the second (attempt 2) ok, both under step 1.
    flakies = sorted(_named(spans, "execute_tool flaky"), key=lambda s: s.attributes["rewind.attempt"])
    assert [s.attributes["rewind.attempt"] for s in flakies] == [1, 2]
    assert flakies[0].status.status_code == StatusCode.ERROR and flakies[0].attributes["error.type"] == "ToolRaised"
    assert "the first attempt fails" in flakies[0].status.description
    assert flakies[1].status.status_code != StatusCode.ERROR and flakies[1].attributes["rewind.outcome"] == "ok"
    assert {_step_of(s, spans) for s in flakies} == {1}
    assert steps[0].attributes["rewind.tool_calls"] == 2 and steps[1].attributes["rewind.cache_hits"] == 1


helper = subagent(name="helper", description="Looks one thing up.", system_prompt="You look things up.", tools=["look"])


async def test_a_sub_agent_is_a_span_under_its_callers_step_with_its_run_inside(traced, model, exporter):
    client = await connect(traced)
    name = _script(model, [
        {"by_user": {"find a": {"content": "a is known"},
                     "find b": {"tool_calls": [{"name": "look", "arguments": {"term": "b"}}]}},
         "tool_calls": [{"name": "helper", "arguments": {"task": "find a"}},
                        {"name": "helper", "arguments": {"task": "find b"}}]},
        {"content": None, "echo_tool_results": True},
    ])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    run_id = f"trace-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, traced, ToolRegistry([look, helper]), endpoint):
        handle = await start_run(client, traced, AgentInput(run_id=run_id, task="use helpers", model=name, tools=["helper"]))
        assert (await handle.result()).status.state == "completed"
    spans = _of_run(exporter, run_id)  # one trace: the caller's and its sub-agents'
    calls = _named(spans, "execute_tool helper")
    assert len(calls) == 2 and all(_step_of(c, spans) == 1 for c in calls)
    assert {c.attributes["rewind.outcome"] for c in calls} == {"subagent"}
    assert {c.attributes["rewind.subagent.branch"] for c in calls} == {"main.s1-call_0_0", "main.s1-call_0_1"}
    runs = {s.attributes["rewind.branch"]: s for s in _named(spans, "rewind.run")}
    assert set(runs) == {"main", "main.s1-call_0_0", "main.s1-call_0_1"}
    for call in calls:
        sub_run = runs[call.attributes["rewind.subagent.branch"]]
        # The sub-agent's run span sits under the call's span (through Temporal's child workflow spans).
        assert "execute_tool helper" in _ancestors(sub_run, spans), _ancestors(sub_run, spans)
        assert call.start_time <= sub_run.start_time and sub_run.end_time <= call.end_time
    # The sub-agent's own tool call is under the sub-agent's step.
    (look_b,) = _named(spans, "execute_tool look")
    assert look_b.attributes["rewind.branch"] == "main.s1-call_0_1"


async def test_a_pipeline_has_a_step_span_per_call_over_its_own_activities(traced, model, exporter, monkeypatch,
                                                                           tmp_path):
    """A pipeline's calls overlap (asyncio.gather): each is a step span of its own, named by its label,
    with its activity (and its retries) under it."""
    from activities.code.pipelines import PipelineRegistry
    from rewind.client import pipeline_input

    monkeypatch.setenv("REWIND_TEST_EVENTS", str(tmp_path / "events.jsonl"))
    client = await connect(traced)
    name = f"trace-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"sum": [{"content": "summed"}]})
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    inp = pipeline_input(traced, "gathered", {"terms": ["a", "b"]}, model=f"script:{name}",
                         run_id=f"trace-{uuid.uuid4().hex[:8]}")
    async with build_worker(client, traced, ToolRegistry.from_modules(["agent_tools"]), endpoint,
                            pipelines=PipelineRegistry.from_modules(["agent_pipelines"])):
        result = await (await start_run(client, traced, inp)).result()
    assert result.status.state == "completed" and result.status.final_answer == "summed"
    spans = _of_run(exporter, inp.run_id)
    [run] = _named(spans, "rewind.run")
    steps = sorted(_named(spans, "rewind.step"), key=lambda s: s.attributes["rewind.step"])
    assert [s.attributes["rewind.step"] for s in steps] == [1, 2, 3]
    assert [s.attributes["rewind.step_label"] for s in steps] == ["lookup", "lookup", "sum"]
    assert all(s.parent.span_id == run.context.span_id for s in steps)
    # The two lookups ran at once, each under its own step; the model call under the third.
    lookups = _named(spans, "execute_tool lookup")
    assert sorted(_step_of(s, spans) for s in lookups) == [1, 2]
    assert {s.attributes["rewind.step"] for s in steps[:2]} == {1, 2}
    [chat] = _named(spans, f"chat script:{name}")
    assert _ancestors(chat, spans)[:3] == ["RunActivity:call_llm", "StartActivity:call_llm", "rewind.step"]
    assert _step_of(chat, spans) == 3


async def test_replays_emit_no_span(traced, model, exporter):
    client = await connect(traced)
    # No workflow cache: every workflow task replays the run's history from its start.
    run_id, handle, _ = await _run(client, traced, model, max_cached_workflows=0)
    spans = _of_run(exporter, run_id)
    assert sorted(s.attributes["rewind.step"] for s in _named(spans, "rewind.step")) == [1, 2, 3]
    assert len(_named(spans, "rewind.run")) == 1
    assert len(_named(spans, "StartActivity:call_llm")) == 3  # Temporal's workflow spans: once too
    before = len(exporter.get_finished_spans())

    # A whole replay of the finished run, with the tracing interceptor: nothing new.
    history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentWorkflow, CompensationWorkflow], data_converter=client.data_converter,
                        interceptors=[tracing.current().interceptor])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert len(exporter.get_finished_spans()) == before


async def test_the_fast_path_is_traced_the_same(traced, model, exporter):
    """Local activities (AgentInput.fast): the model call still under its step, once per step."""
    client = await connect(traced)
    run_id, _, result = await _run(client, traced, model, fast=True)
    spans = _of_run(exporter, run_id)
    assert sorted(s.attributes["rewind.step"] for s in _named(spans, "rewind.step")) == [1, 2, 3]
    chats = _named(spans, f"chat {result.status.model}")
    assert sorted(_step_of(c, spans) for c in chats) == [1, 2, 3]
    assert all(_ancestors(c, spans)[:3] == ["RunActivity:call_llm", "StartActivity:call_llm", "rewind.step"] for c in chats)
    looks = sorted(_named(spans, "execute_tool look"), key=lambda s: s.attributes["rewind.step"])
    assert [(s.attributes["rewind.step"], s.attributes["rewind.cache_hit"]) for s in looks] == [(1, False), (2, True)]


async def test_tracing_is_off_without_an_endpoint(temporal_server, settings):
    env = {"TEMPORAL_ADDRESS": temporal_server.address, "OTEL_SERVICE_NAME": "named-but-off"}
    off = Settings.from_env(env)
    assert off.tracing is False and off.otel_service_name == "named-but-off"
    client = await connect(dataclasses.replace(settings, tracing=False))
    assert client.config()["interceptors"] == []
    worker = build_worker(client, settings, ToolRegistry([look]), ModelEndpoint(base_url="http://127.0.0.1:9", api_key="k"))
    assert all(w.config()["interceptors"] == [] for w in worker.workers)
    # On with either endpoint variable; OTEL_SDK_DISABLED turns it off again.
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).tracing
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}).tracing
    assert not Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}).tracing
    assert not Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": " "}).tracing


def test_a_protocol_rewind_cannot_export_is_one_clear_error():
    from workflows.vocabulary.errors import ConfigError

    assert Settings.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).otel_protocol == "grpc"
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                              "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}).otel_protocol == "grpc"
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'.*http/protobuf or grpc"):
        Settings.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


_WITHOUT_OTEL = """
import sys
for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.sdk"):
    sys.modules[name] = None  # as if the otel extra were not installed: importing it raises ImportError
import activities.model.llm, activities.tools.runner, workflows.loop.agent, rewind.worker.main, rewind.cli.main
from rewind.temporal import tracing
from rewind.settings.config import Settings
assert tracing.interceptors(Settings(), service="rewind-cli") == []
try:
    tracing.setup(Settings(tracing=True), service="rewind-cli")
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_without_the_otel_extra_the_product_imports_and_names_the_fix():
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_OTEL], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ConfigError OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed")
    assert "pip install 'rewind-agents[otel]'" in proc.stdout
