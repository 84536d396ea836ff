"""Experiments from the client side: start one, ask how it stands, raise its
budget, score it, and compare its variants (the CLI's `rewind experiment`)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.checkpoints.lineage import resolve_step
from checkpoint_bridge.temporal.runs import check_tools
from checkpoint_bridge.checkpoints.store import CheckpointStore
from rewind.settings.config import Settings
from rewind.variables import variable_value
from workflows.vocabulary.errors import InvalidIdError, RewindError, RunExistsError, UsageError
from workflows.vocabulary.experiments import (
    ExperimentInput,
    ExperimentStatus,
    ScoreInput,
    ScoreResult,
    Variant,
    experiment_workflow_id,
    score_workflow_id,
)
from workflows.vocabulary.ids import checkpoint_id, echo, validate_id
from workflows.vocabulary.wire import EXPERIMENT_STATUS_QUERY, EXPERIMENT_WORKFLOW, RAISE_EXPERIMENT_BUDGET_SIGNAL, SCORE_WORKFLOW

_KEYS = ("model", "system_prompt", "tools", "temperature", "seed")


def new_experiment_id() -> str:
    return uuid.uuid4().hex[:8]


SUBAGENT_KEYS = ("model", "system_prompt")


def parse_subagent_key(key: str, where: str, prefix: str = "sub.") -> tuple[str, str]:
    """`sub.AGENT.model` -> ("AGENT", "model"): what a sub-agent runs with instead of its declaration
    (`prefix` is what the key starts with: "sub." in a variant, nothing for `fork --subagent`)."""
    agent, _, rest = key.removeprefix(prefix).partition(".")
    if not agent or rest not in SUBAGENT_KEYS:
        raise UsageError(f"{where}: {echo(key, 60)} must be {prefix}AGENT.model or {prefix}AGENT.system_prompt")
    try:
        validate_id("agent", agent)
    except InvalidIdError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return agent, rest


def parse_variant(text: str, base: Path | None = None) -> Variant:
    """`NAME:key=value[,key=value...]`: model, system_prompt (or system_prompt=@file), tools
    (names joined by +), temperature, seed, `sub.AGENT.model` / `sub.AGENT.system_prompt` (what
    sub-agent AGENT runs with), `prompt.LABEL` (or prompt.LABEL=@file) / `model.LABEL` (a
    pipeline's calls of that label); any other key sets an agent variable (JSON or text)."""
    name, sep, rest = text.partition(":")
    if not sep and "=" in name:
        raise UsageError(f"--variant {echo(text, 60)} needs a name first: NAME:key=value,...")
    fields: dict[str, Any] = {"name": name.strip()}
    variables: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"--variant {echo(text, 60)}: {echo(part, 40)} is not key=value")
        if (key == "system_prompt" or key.startswith("prompt.")) and value.startswith("@"):
            path = (base or Path.cwd()) / value[1:]
            try:
                value = path.read_text()
            except OSError as exc:
                raise UsageError(f"--variant {name}: cannot read the system prompt file {value[1:]}: "
                                 f"{exc.strerror or exc}") from exc
        if key.startswith("sub."):
            agent, key_name = parse_subagent_key(key, f"--variant {name}")
            fields.setdefault("subagents", {}).setdefault(agent, {})[key_name] = value
        elif key.startswith(("prompt.", "model.")):  # a pipeline's calls of one label
            kind, _, label = key.partition(".")
            if not label:
                raise UsageError(f"--variant {name}: {echo(key, 40)} names no label ({kind}.LABEL=...)")
            fields.setdefault(f"{kind}s", {})[label] = value
        elif key == "tools":
            fields["tools"] = [t for t in value.split("+") if t]
        elif key == "temperature":
            try:
                fields["temperature"] = float(value)
            except ValueError:
                raise UsageError(f"--variant {name}: temperature {echo(value, 20)} is not a number") from None
        elif key == "seed":
            try:
                fields["seed"] = int(value)
            except ValueError:
                raise UsageError(f"--variant {name}: seed {echo(value, 20)} is not a whole number") from None
        elif key in _KEYS:
            fields[key] = value
        else:
            variables[key] = variable_value(key, value, flag=f"--variant {name}:",
                                            literal_hint='give literal text as a JSON string ("...")')
    fields["variables"] = variables
    try:
        return Variant.model_validate(fields)
    except ValueError as exc:
        raise UsageError(f"--variant {echo(text, 60)}: {exc}") from None


async def start_experiment(client: Client, settings: Settings, store: CheckpointStore, inp: ExperimentInput) -> WorkflowHandle:
    """Start the experiment's workflow after checking what can be checked here."""
    validate_id("run", inp.run_id)
    validate_id("branch", inp.from_branch)
    validate_id("experiment", inp.experiment_id)
    if not inp.variants:
        raise UsageError("an experiment needs at least one --variant NAME:key=value,...")
    names = [v.name for v in inp.variants]
    if len(set(names)) != len(names):
        raise UsageError(f"variant names must differ: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    await resolve_step(store, inp.run_id, inp.from_branch, inp.step)  # a clear error for a step that is not there
    wanted = sorted({t for v in inp.variants for t in v.tools or []})
    if wanted:
        await check_tools(client, settings.task_queue, wanted)
    if inp.scorer is not None and ":" not in inp.scorer:
        raise UsageError(f"--score {echo(inp.scorer, 60)} must be module:function")
    try:
        return await client.start_workflow(
            EXPERIMENT_WORKFLOW, inp, id=experiment_workflow_id(inp.experiment_id), task_queue=settings.task_queue,
            result_type=ExperimentStatus, id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            memo={"run_id": inp.run_id, "step": inp.step, "variants": names},
            static_summary=f"experiment {inp.experiment_id}: {inp.run_id} step {inp.step}, "
                           f"{len(names)} variant(s) x {inp.repeat}",
        )
    except WorkflowAlreadyStartedError as exc:
        raise RunExistsError(f"an experiment with id {inp.experiment_id!r} already exists; choose another --id") from exc


async def experiment_status(client: Client, experiment_id: str) -> ExperimentStatus:
    handle = client.get_workflow_handle(experiment_workflow_id(experiment_id), result_type=ExperimentStatus)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise RewindError(f"no experiment {experiment_id!r} in Temporal; check the id "
                              "(`rewind experiment ... --json` printed it)") from exc
        raise
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    try:
        return await handle.query(EXPERIMENT_STATUS_QUERY, result_type=ExperimentStatus)
    except WorkflowFailureError as exc:  # pragma: no cover - the query of a failed workflow still answers
        raise RewindError(f"experiment {experiment_id} failed: {exc.cause or exc}") from exc


async def wait_for_experiment(client: Client, experiment_id: str, poll_s: float = 0.5) -> ExperimentStatus:
    """Until the experiment completes or waits for a raised budget."""
    while True:
        status = await experiment_status(client, experiment_id)
        if status.state in ("completed", "budget_exceeded"):
            return status
        await asyncio.sleep(poll_s)


async def continue_experiment(client: Client, experiment_id: str, max_cost_usd: float) -> ExperimentStatus:
    status = await experiment_status(client, experiment_id)
    if status.state == "completed":
        raise RewindError(f"experiment {experiment_id} has completed; nothing to continue")
    if status.max_cost_usd is not None and max_cost_usd <= status.max_cost_usd:
        raise UsageError(f"--max-cost {max_cost_usd:g} is no raise: the experiment's budget is "
                         f"{status.max_cost_usd:g} already (the limit is the new total)")
    handle = client.get_workflow_handle(experiment_workflow_id(experiment_id))
    await handle.signal(RAISE_EXPERIMENT_BUDGET_SIGNAL, max_cost_usd)
    return status.model_copy(update={"max_cost_usd": max_cost_usd})


async def score_experiment(client: Client, settings: Settings, status: ExperimentStatus, scorer: str) -> ExperimentStatus:
    """`status` with the scores of `scorer` (run once per experiment and scorer, as a workflow)."""
    if ":" not in scorer:
        raise UsageError(f"--score {echo(scorer, 60)} must be module:function")
    finals = {b.branch: checkpoint_id(status.run_id, b.branch, b.final_step)
              for b in status.branches if b.final_step is not None}
    try:
        handle = await client.start_workflow(
            SCORE_WORKFLOW, ScoreInput(experiment_id=status.experiment_id, scorer=scorer, checkpoints=finals),
            id=score_workflow_id(status.experiment_id, scorer), task_queue=settings.task_queue,
            result_type=dict[str, ScoreResult],
            # Once per experiment and scorer: a second `show --score` reads the first one's scores.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        handle = client.get_workflow_handle(score_workflow_id(status.experiment_id, scorer),
                                            result_type=dict[str, ScoreResult])
    scores: dict[str, ScoreResult] = await handle.result()
    branches = [b.model_copy(update={"score": scores[b.branch].score, "score_error": scores[b.branch].error})
                if b.branch in scores else b for b in status.branches]
    return status.model_copy(update={"branches": branches, "scorer": scorer})


__all__ = ["new_experiment_id", "parse_variant", "start_experiment", "experiment_status", "wait_for_experiment",
           "continue_experiment", "score_experiment"]
