"""Workflow code that is wrong or that changed under running workflows.

- A deterministic bug in workflow code fails the run with a visible reason
  instead of retrying its workflow task forever.
- A deploy of changed workflow code while runs are mid-loop: the change is
  guarded with `workflow.patched`, every run completes, and the recorded
  histories still replay against the new code (and do not without the guard).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowFailureError, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from helpers import start_agent
from rewind.client import run_view
from workflows.loop.agent import AgentWorkflow
from workflows.loop.compensation import CompensationWorkflow
from workflows.vocabulary.contracts import AgentInput, AgentResult

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.json"))


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class BuggyAgentWorkflow(AgentWorkflow):
    """A release with a bug: records of step 2 hit a KeyError."""

    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        return await super().run(inp)

    def _record_step(self, label, **kwargs):  # type: ignore[no-untyped-def]
        if self._state.step == 2:
            {}["missing"]
        return super()._record_step(label, **kwargs)


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class PatchedAgentWorkflow(AgentWorkflow):
    """The next release: after each step it waits a moment (a new timer command), guarded by a patch."""

    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        return await super().run(inp)

    def _record_step(self, label, **kwargs):  # type: ignore[no-untyped-def]
        super()._record_step(label, **kwargs)
        if workflow.patched("pause-after-step"):
            self._pause_after_step = True

    async def _call_model(self, inp, openai_tools):  # type: ignore[no-untyped-def]
        if getattr(self, "_pause_after_step", False):
            self._pause_after_step = False
            await workflow.sleep(timedelta(milliseconds=10))
        return await super()._call_model(inp, openai_tools)


@workflow.defn(name="AgentWorkflow", sandboxed=False)
class UnguardedAgentWorkflow(AgentWorkflow):
    """The same change without the patch guard: breaks runs started by the old code."""

    @workflow.run
    async def run(self, inp: AgentInput) -> AgentResult:
        return await super().run(inp)

    async def _call_model(self, inp, openai_tools):  # type: ignore[no-untyped-def]
        if self._state.step > 1:
            await workflow.sleep(timedelta(milliseconds=10))
        return await super()._call_model(inp, openai_tools)


def _registry() -> ToolRegistry:
    return ToolRegistry.from_modules(["examples.research_agent", "agent_tools"])


async def test_a_bug_in_workflow_code_fails_the_run_visibly(client, settings, model, events_file):
    from worker import build_worker

    endpoint = ModelEndpoint(base_url=model.base_url, api_key="k")
    async with build_worker(client, settings, _registry(), endpoint, workflows=[BuggyAgentWorkflow, CompensationWorkflow]):
        handle = await start_agent(client, settings, "Research these companies: Acme, Globex.")
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), 60)
    assert "KeyError" in repr(info.value.cause) or "missing" in str(info.value.cause)
    view = await run_view(client, handle.id)
    assert view.workflow_status == "failed"


async def test_deploy_changed_code_while_20_runs_are_mid_loop(client, settings, model, events_file, tmp_path, monkeypatch):
    from helpers import read_events
    from worker import build_worker

    monkeypatch.setenv("REWIND_TEST_GATE_DIR", str(tmp_path))
    name = f"deploy-{uuid.uuid4().hex[:6]}"
    turns = [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i}"}}]} for i in range(2)]
    turns.append({"tool_calls": [{"name": "gate", "arguments": {"name": "deploy"}}]})
    turns += [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"u{i}"}}]} for i in range(2)]
    model.add_script(name, turns + [{"content": "done"}])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="k")
    async with build_worker(client, settings, _registry(), endpoint):
        handles = [await start_agent(client, settings, f"deploy {i}", model=f"script:{name}") for i in range(20)]
        for _ in range(600):
            if len({e["run"] for e in read_events(events_file) if e["kind"] == "gate_wait"}) == 20:
                break
            await asyncio.sleep(0.05)
    # The old worker is gone with all 20 runs waiting at step 3 of 6.
    assert len({e["run"] for e in read_events(events_file) if e["kind"] == "gate_wait"}) == 20
    (tmp_path / "deploy").write_text("open")
    async with build_worker(client, settings, _registry(), endpoint,
                            workflows=[PatchedAgentWorkflow, CompensationWorkflow]):
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
    assert [r.status.state for r in results] == ["completed"] * 20
    assert all(r.status.step == 6 for r in results)


@pytest.mark.parametrize("path", HISTORIES[:4], ids=lambda p: p.stem)
async def test_recorded_histories_replay_on_the_patched_code_only(path: Path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    patched = await Replayer(workflows=[PatchedAgentWorkflow, CompensationWorkflow],
                             data_converter=pydantic_data_converter).replay_workflow(history, raise_on_replay_failure=False)
    assert patched.replay_failure is None
    unguarded = await Replayer(workflows=[UnguardedAgentWorkflow, CompensationWorkflow],
                               data_converter=pydantic_data_converter).replay_workflow(history, raise_on_replay_failure=False)
    assert unguarded.replay_failure is not None  # what the guard protects against
