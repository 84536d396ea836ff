"""Replay recorded histories against today's workflow code.

A change to the loop that would break runs started by an older worker (an
activity added, removed or reordered without `workflow.patched`) makes this
fail, so it fails CI before it can fail a deploy.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from rewind.worker.sandbox import workflow_runner
from workflows.loop.agent import AgentWorkflow
from workflows.loop.compensation import CompensationWorkflow
from workflows.experiment.workflow import ExperimentWorkflow, ScoreWorkflow
from workflows.pipeline.workflow import PipelineWorkflow
from workflows.vocabulary.wire import PIPELINE_WORKFLOW

HISTORIES = sorted((Path(__file__).resolve().parents[1] / "histories").glob("*.json"))


def test_histories_cover_the_shapes_of_a_run():
    names = {p.stem.rsplit("-", 1)[0] if p.stem[-1].isdigit() else p.stem for p in HISTORIES}
    assert {"short", "long", "continued-as-new", "forked", "bad-output", "budget-continue",
            "outputs-by-reference", "approval", "reused-effect", "indexed", "experiment",
            "subagents", "subagent-child", "redo", "forked-seeded-tools", "carried-checkpoints",
            "pipeline-carried", "pipeline-forked", "said-once", "graph-run", "graph-forked"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path):
    import agent_graphs
    from activities.code.graphs import graphs_in

    graphs_in(agent_graphs, "agent_graphs")  # as a worker that offers the graph: LangChain's calls routed
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    # Pipelines replay in the sandbox their worker runs them in, their module imported inside it.
    replayer = Replayer(workflows=[AgentWorkflow, CompensationWorkflow, ExperimentWorkflow, ScoreWorkflow,
                                   PipelineWorkflow],
                        data_converter=pydantic_data_converter,
                        workflow_runner=workflow_runner(PIPELINE_WORKFLOW, ["agent_pipelines", "agent_graphs"], False))
    # A pipeline whose code no longer matches its history can wait for ever in replay, not fail:
    # a replay that does not end is a failure too (it ends in well under a second when it matches).
    try:
        result = await asyncio.wait_for(replayer.replay_workflow(history, raise_on_replay_failure=False), 60)
    except TimeoutError:
        pytest.fail(f"{path.name}: the replay did not end: today's code waits for something its history never gave")
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
