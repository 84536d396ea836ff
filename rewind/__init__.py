"""Rewind: durable, inspectable and forkable LLM agent runs on Temporal.

The public API, in one place:

    from rewind import tool, subagent, tool_context, ToolError  # writing tools and agents
    from rewind import pipeline, OutputInvalid, ToolCallFailed   # your own orchestration code (docs/pipelines.md)
    from rewind import Settings, connect, start_run, agent_input, pipeline_input, graph_input, wait_for_outcome, run_view
    from rewind import checkpoint_store, tree, fork, redo, rollback, diff, compensate, mirror_run, store_stats
    from rewind import list_runs, RunQuery                                # every run, filtered (`rewind runs`)
    from rewind import step_rows, write_parquet, run_conversations        # runs as data (`rewind export --runs`)
    from rewind import resume, select_runs, resume_runs, ResumeSelection  # resuming runs after a fix (`rewind resume`)
    from rewind import delete_run, gc                                     # erasing runs
    from rewind import approve, reject, pending_approvals                # tool calls waiting for a person
    from rewind import events, RunEvent, emit                        # watching a run live (docs/streaming.md)
    from rewind import AgentInput, RunLimits, RewindError

Names are loaded on first use, so `import rewind` (and the `rewind` command's
start-up) stays light.

The package's rooms, in floors (imports point down only, never sideways;
tests/test_layers.py):

    5  cli/          the `rewind` command: parser, commands, docs/cli.md
    4  local/        the local stack: stack, `rewind dev`, `rewind demo`, servers for tests
       serve/        `rewind serve`: the HTTP face (routes, server-sent events, the live page)
    3  worker/       the worker process: build, run, pool, health, the offline model
    2  (this level)  the client API: client.py (connect, start, fork, approve, ...),
                     stores.py, experiments.py, erasure.py, resuming.py, progress.py, variables.py,
                     watching.py (`rewind.events`: a run's event stream), starting.py (what
                     `rewind start` and POST /runs start)
    1  temporal/     reaching Temporal: connection, converter, payloads, tracing, dev server
    0  settings/     the one place that reads the environment
       __init__.py   this facade: names as strings, imports nothing until used
"""

from __future__ import annotations

import importlib
from typing import Any

# The one place the version is written (pyproject.toml reads it from here).
__version__ = "0.1.0"

_EXPORTS = {
    # writing tools
    "tool": "activities.tools.registry",
    "subagent": "activities.tools.registry",
    "tool_context": "activities.tools.registry",
    "emit": "activities.tools.registry",
    "ToolError": "workflows.vocabulary.errors",
    "RelativePath": "activities.tools.arg_types",
    # pipelines: your own orchestration code, each ctx call a checkpointed step
    "pipeline": "activities.code.pipelines",
    "PipelineContext": "workflows.pipeline.workflow",
    "PipelineError": "workflows.vocabulary.errors",
    "ModelCallFailed": "workflows.vocabulary.errors",
    "OutputInvalid": "workflows.vocabulary.errors",
    "ToolCallFailed": "workflows.vocabulary.errors",
    "pipeline_input": "rewind.client",
    "graph_input": "rewind.client",
    "NotAnOption": "activities.tools.arg_types",
    # configuration and runs
    "Settings": "rewind.settings.config",
    "TemporalConnection": "rewind.settings.temporal",
    "TemporalConnectionError": "workflows.vocabulary.errors",
    "connect": "rewind.client",
    "start_run": "rewind.client",
    "agent_input": "rewind.client",
    "new_run_id": "rewind.client",
    "wait_for_outcome": "rewind.client",
    "run_view": "rewind.client",
    "RunView": "rewind.client",
    "AgentInput": "workflows.vocabulary.contracts",
    "RunLimits": "workflows.vocabulary.contracts",
    "AgentResult": "workflows.vocabulary.contracts",
    # approvals
    "approve": "rewind.client",
    "reject": "rewind.client",
    "pending_approvals": "rewind.client",
    "PendingApproval": "workflows.vocabulary.contracts",
    "ApprovalRecord": "workflows.vocabulary.contracts",
    # checkpoints and branches
    "checkpoint_store": "rewind.stores",
    "tree": "checkpoint_bridge.views.inspect",
    "lineage": "checkpoint_bridge.checkpoints.lineage",
    "fork": "rewind.client",
    "redo": "rewind.client",
    "rollback": "rewind.client",
    "compensate": "rewind.client",
    "diff": "checkpoint_bridge.views.diff",
    "mirror_run": "checkpoint_bridge.projection.mirror",
    "store_stats": "checkpoint_bridge.views.stats",
    # experiments: one checkpoint forked N ways x K repetitions, compared
    "start_experiment": "rewind.experiments",
    "experiment_status": "rewind.experiments",
    "continue_experiment": "rewind.experiments",
    "score_experiment": "rewind.experiments",
    "experiment_table": "checkpoint_bridge.views.experiment_table",
    "ExperimentInput": "workflows.vocabulary.experiments",
    "Variant": "workflows.vocabulary.experiments",
    "StoreStats": "checkpoint_bridge.views.stats",
    # operating many runs: every run, filtered, newest first (`rewind runs`)
    "list_runs": "checkpoint_bridge.views.runs",
    "RunQuery": "checkpoint_bridge.views.runs",
    "RunList": "checkpoint_bridge.views.runs",
    # runs as data (`rewind export --runs`): a row per step, a Parquet file of them, a conversation per branch
    "step_rows": "checkpoint_bridge.views.step_rows",
    "StepRow": "checkpoint_bridge.views.step_rows",
    "write_parquet": "checkpoint_bridge.views.parquet",
    "run_conversations": "checkpoint_bridge.views.conversations",
    # resuming runs after a fix: from just before the first failed call (`rewind resume`)
    "resume": "rewind.resuming",
    "resume_runs": "rewind.resuming",
    "select_runs": "rewind.resuming",
    "plan_resume": "checkpoint_bridge.branches.resume",
    "ResumeSelection": "rewind.resuming",
    "ResumeReport": "rewind.resuming",
    # erasure: a run everywhere it lives, or every finished run older than a duration
    "delete_run": "rewind.erasure",
    "gc": "rewind.erasure",
    "ErasureReport": "rewind.erasure",
    "AgentCheckpoint": "checkpoint_bridge.document.schema",
    # watching a run live (docs/streaming.md)
    "events": "rewind.watching",
    "RunEvent": "workflows.vocabulary.events",
    # the error tree's root
    "RewindError": "workflows.vocabulary.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rewind' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
