"""A worker with a bus streams its model calls (docs/streaming.md): a reader of the run's events
(`rewind.events`) gets each call's deltas, marked with their attempt, before the call's
`model.completed`; a stream the provider breaks off goes again as a new attempt."""

from __future__ import annotations

from typing import Any

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from rewind.client import start_run, wait_for_outcome
from rewind.stores import events_bus
from rewind.watching import events
from rewind.worker.main import build_worker, model_endpoint
from rewind.worker.scripted_stream import pieces
from workflows.vocabulary.contracts import AgentInput

ANSWER = "Acme sells widgets and gadgets, and its customers come back for more every single year."


async def _watched(client: Any, settings: Any, model: Any, script: list[dict], run_id: str) -> list[Any]:
    """Run `script` on a worker with a bus, reading the run's events from its start to its end."""
    model.add_script(run_id, script)
    bus = events_bus(settings)
    publisher = await bus.start_publisher()
    registry = ToolRegistry.from_modules(["examples.research_agent"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    try:
        async with build_worker(client, settings, registry, endpoint, events=publisher):
            handle = await start_run(client, settings, AgentInput(run_id=run_id, task="Research Acme",
                                                                 model=f"script:{run_id}"))
            seen = [event async for event in events(run_id, settings=settings, client=client)]
            await wait_for_outcome(handle)
    finally:
        await bus.aclose()
    return seen


def _calls(seen: list[Any]) -> dict[str, list[Any]]:
    by_call: dict[str, list[Any]] = {}
    for event in seen:
        if event.type.startswith("model."):
            by_call.setdefault(event.data["call"], []).append(event)
    return by_call


async def test_a_broken_stream_goes_again_as_a_new_attempt(client, settings, model, events_file):
    """The provider drops the first call's stream after three tokens: the reader sees the
    retry, the second attempt's deltas from its start, and one `model.completed`."""
    model.inject_fault(200, cut_after=3)
    seen = await _watched(client, settings, model, [
        {"content": ANSWER, "stream": {"tokens_per_s": 20}},
    ], "broken-1")
    (call,) = _calls(seen).values()
    kinds = [e.type for e in call]
    assert kinds.count("model.completed") == 1 and kinds[-1] == "model.completed", kinds
    retry = next(e for e in call if e.type == "model.retrying")
    assert retry.data["attempt"] == 2 and "broke off its streamed answer" in retry.data["reason"], retry.data
    second = [e.data["text"] for e in call if e.type == "model.delta" and e.data["attempt"] == 2]
    assert second == pieces(ANSWER)  # from its start, a token a delta, never glued to the first attempt's
    first = [e.data["text"] for e in call if e.type == "model.delta" and e.data["attempt"] == 1]
    assert len(first) <= 3 and kinds.index("model.retrying") > max(
        (i for i, e in enumerate(call) if e.type == "model.delta" and e.data["attempt"] == 1), default=-1)
    completed = call[-1].data
    assert completed["message"]["content"] == ANSWER, completed
    assert any(e.type == "run.completed" for e in seen)


def test_the_offline_model_a_worker_starts_streams_at_the_configured_pace(settings):
    settings.scripted_tokens_per_s = 7.0  # REWIND_SCRIPTED_TOKENS_PER_S
    _, server = model_endpoint(settings)
    try:
        assert server.pace.tokens_per_s == 7.0 and server.pace.mode == "sse"
    finally:
        server.stop_thread()
