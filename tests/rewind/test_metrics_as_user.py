"""The worker's Prometheus endpoint (REWIND_METRICS_PORT), scraped during and after real
runs: Temporal's runtime metrics and Rewind's own, parsed with the reference parser."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request

from as_user import rewind, rewind_json, user_workers
from prometheus_client.parser import text_string_to_metric_families

TOOLS = '''
from activities.tools.registry import tool


@tool
async def lookup(term: str) -> str:
    """Read-only."""
    return f"about {term}"


@tool(side_effects=True, needs_approval=True)
async def publish(text: str) -> str:
    """Side-effecting; waits for approval."""
    return f"published {text}"
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _value(samples, name: str, **labels: str) -> float:
    """The sum over the series of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


async def test_the_worker_serves_temporal_and_rewind_metrics(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    port = _free_port()
    name = "metrics-" + world.queue
    world.model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}, {"name": "lookup", "arguments": {"term": "b"}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}]},
        {"tool_calls": [{"name": "publish", "arguments": {"text": "hello"}}]},
        {"content": "done"},
    ])
    env = world.env(cli)
    model = f"script:{name}"
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_METRICS_PORT=str(port)), "--tool-modules", "tools")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--task", "count me", "--model", model, "--run-id", "m-1")
        deadline = time.monotonic() + 60
        while True:  # scraped while the call waits for approval
            samples = _scrape(port)
            if _value(samples, "rewind_approvals_requested_total") >= 1 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert _value(samples, "rewind_approvals_requested_total", tool="publish") == 1
        assert _value(samples, "rewind_approvals_decided_total") == 0
        call = (await rewind_json(cli, env, "pending"))["waiting"][0]["tool_call_id"]
        await rewind_json(cli, env, "reject", "m-1", call, "--reason", "not today")
        while (await rewind_json(cli, env, "status", "m-1"))["state"] != "completed" and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # the last checkpoint's write is recorded after the run's end
        samples = _scrape(port)
        status = (await rewind_json(cli, env, "status", "m-1"))["status"]

        # Rewind's own: steps, tokens and cost by model, tool calls by outcome, approvals, the mirror.
        assert _value(samples, "rewind_steps_total", model=model) == 4
        assert _value(samples, "rewind_tokens_total", model=model, kind="prompt") == status["prompt_tokens"]
        assert _value(samples, "rewind_tokens_total", model=model, kind="completion") == status["completion_tokens"]
        assert _value(samples, "rewind_tool_calls_total", tool="lookup", outcome="ok") == 2
        assert _value(samples, "rewind_tool_calls_total", tool="lookup", outcome="cached") == 1
        assert _value(samples, "rewind_tool_calls_total", tool="publish", outcome="rejected") == 1
        assert _value(samples, "rewind_approvals_decided_total", tool="publish", verdict="rejected") == 1
        assert _value(samples, "rewind_checkpoint_write_ms_count") == 5  # steps 0..4
        assert _value(samples, "rewind_mirror_lag_ms_count") == 5 and _value(samples, "rewind_mirror_lag_ms_sum") > 0
        # Temporal's runtime metrics, from the same endpoint.
        assert _value(samples, "temporal_workflow_completed_total") >= 1
        assert any(n.startswith("temporal_activity_execution_latency") for n, _ in samples)

        # A second worker on the same port is refused in one line, before it polls.
        code, _, err = await rewind(wdir, world.env(wdir, REWIND_METRICS_PORT=str(port)), "worker", "--tool-modules", "tools")
        assert code != 0 and "REWIND_METRICS_PORT" in err and "Traceback" not in err, err
