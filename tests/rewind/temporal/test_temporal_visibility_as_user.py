"""What the Temporal UI and CLI show of a run, read back the way a team would:
through `temporal workflow list --query` and the Temporal client.

A run started and forked with the `rewind` CLI (worker as a subprocess, env
only) is found by RewindRunId with both branches; RewindState follows the run
while it waits for approval and after it completes; every activity carries a
summary naming the tool and its arguments (model calls: model and step); the
workflow carries a memo and a one-line summary.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from as_user import rewind_json, user_workers
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from rewind.temporal.dev_server import temporal_binary

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


async def _listed(client: Client, query: str) -> list:
    return [w async for w in client.list_workflows(query)]


async def _until_listed(client: Client, query: str, count: int, timeout_s: float = 30.0) -> list:
    """Visibility is eventually consistent: wait (bounded) for `count` matches."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = await _listed(client, query)
        if len(found) == count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.2)


def _temporal_list(address: str, query: str) -> list[dict]:
    done = subprocess.run(
        [str(temporal_binary()), "workflow", "list", "--address", address, "--query", query, "--output", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    text = done.stdout.strip()
    if not text:
        return []
    if text.startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def _summaries(client: Client, workflow_id: str) -> list[str]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and event.user_metadata.HasField("summary"):
            found.append((await client.data_converter.decode([event.user_metadata.summary]))[0])
    return found


async def test_temporal_lists_a_runs_branches_and_shows_what_each_activity_does(world, temporal_server, client) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    run_id = "ui-" + world.queue
    name = "ui-" + world.queue
    world.model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "durable agents"}}]},
        {"tool_calls": [{"name": "publish", "arguments": {"text": "the report"}}]},
        {"content": "done"},
    ])
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir), "--tool-modules", "tools")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--task", "write about durable agents", "--model", f"script:{name}",
                          "--run-id", run_id)

        # Waiting for a person: Temporal says Running, RewindState says why.
        waiting = await _until_listed(client, f"RewindRunId='{run_id}' AND RewindState='waiting_for_approval'", 1)
        assert [w.id for w in waiting] == [run_id], waiting
        pending = await rewind_json(cli, env, "pending")
        (call,) = [p for p in pending["waiting"] if p["run_id"] == run_id]
        await rewind_json(cli, env, "approve", run_id, call["tool_call_id"], "--by", "ops")
        done = await _until_listed(client, f"RewindRunId='{run_id}' AND RewindState='completed'", 1)
        assert len(done) == 1, done

        forked = await rewind_json(cli, env, "fork", run_id, "--step", "2", "--branch", "alt", "--wait")
        assert forked["branch"] == "alt"

    # Both branches, by run id, through Temporal's own CLI and through the client.
    listed = _temporal_list(temporal_server.address, f"RewindRunId='{run_id}'")
    assert len(listed) == 2, listed
    branches = await _until_listed(client, f"RewindRunId='{run_id}'", 2)
    by_branch = {w.typed_search_attributes.get(_key("RewindBranch")): w for w in branches}
    assert set(by_branch) == {"main", "alt"}
    assert {w.id for w in branches} == {run_id, f"{run_id}--alt"} == {e["execution"]["workflowId"] for e in listed}
    for branch, wf in by_branch.items():
        attributes = wf.typed_search_attributes
        assert attributes.get(_key("RewindModel")) == f"script:{name}"
        assert attributes.get(_key("RewindState")) == "completed"
        desc = await client.get_workflow_handle(wf.id).describe()
        memo = await desc.memo()
        assert memo["run_id"] == run_id and memo["branch_id"] == branch
        assert memo["task"] == "write about durable agents"
        assert memo.get("forked_from") == (None if branch == "main" else f"{run_id}:main:2")
        assert await desc.static_summary() == f"{run_id} / {branch}: write about durable agents"

    main_summaries = await _summaries(client, by_branch["main"].id)
    assert f"step 1: model script:{name}" in main_summaries
    assert "step 1: lookup(term='durable agents')" in main_summaries
    assert "step 2: publish(text='the report')" in main_summaries
    assert any(s.startswith("checkpoint of step") for s in main_summaries)
    # The fork ran from step 2 on: its own calls are summarized too.
    alt_summaries = await _summaries(client, by_branch["alt"].id)
    assert f"step 3: model script:{name}" in alt_summaries, alt_summaries


def _key(name: str):
    from temporalio.common import SearchAttributeKey

    return SearchAttributeKey.for_keyword(name)
