"""What an experiment is: one checkpoint forked N ways, K times each.

The vocabulary of `ExperimentWorkflow` (workflows/experiment/workflow.py), its
activities (activities/code/experiment.py) and the client (rewind/experiments.py).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from workflows.vocabulary.contracts import RunLimits, SideEffectMode
from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import validate_id

_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,31}")

BranchState = Literal["pending", "running", "completed", "failed", "cancelled", "budget_exceeded"]
FINISHED: tuple[str, ...] = ("completed", "failed", "cancelled")
ExperimentState = Literal["running", "budget_exceeded", "scoring", "completed"]


def experiment_workflow_id(experiment_id: str) -> str:
    return f"experiment-{validate_id('experiment', experiment_id)}"


def score_workflow_id(experiment_id: str, scorer: str) -> str:
    import hashlib

    return f"{experiment_workflow_id(experiment_id)}-score-{hashlib.sha256(scorer.encode()).hexdigest()[:10]}"


def branch_name(experiment_id: str, variant: str, repetition: int) -> str:
    """`exp-<id>-<variant>-<k>`: the branch one repetition of one variant runs on."""
    return f"exp-{experiment_id}-{variant}-{repetition}"


_BRANCH_NAME = re.compile(r"exp-(?P<experiment>.+)-(?P<variant>[A-Za-z0-9][A-Za-z0-9_]{0,31})-(?P<repetition>[0-9]+)")


def parse_branch_name(name: str) -> dict[str, Any] | None:
    """{experiment, variant, repetition} of a branch `branch_name` made; None for any other branch."""
    found = _BRANCH_NAME.fullmatch(name)
    if found is None:
        return None
    return {"experiment": found["experiment"], "variant": found["variant"], "repetition": int(found["repetition"])}


class Variant(BaseModel):
    """What the forks of one variant change; None: as the source branch had it."""

    name: str
    model: str | None = None
    system_prompt: str | None = None
    tools: list[str] | None = None
    variables: dict[str, Any] = Field(default_factory=dict)
    temperature: float | None = Field(default=None, ge=0, le=2)
    # The first repetition's sampling seed; repetition k sends seed + k - 1, so the
    # repetitions are distinct samples that can be reproduced.
    seed: int | None = None
    # What a sub-agent runs with instead of its declaration: {name: {"model": M, "system_prompt": P}}
    # (`sub.research_company.model=m2`).
    subagents: dict[str, dict[str, str]] = Field(default_factory=dict)
    # A pipeline's calls by label (`prompt.synthesize=TEXT`, `model.synthesize=M`): as `rewind fork
    # --prompt LABEL=TEXT --model LABEL=M` override them.
    prompts: dict[str, str] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _short_name(cls, value: str) -> str:
        if not _VARIANT_NAME.fullmatch(value):
            raise UsageError(f"variant name {value[:40]!r} must be 1-32 letters, digits or _ (it is part of branch names)")
        return value

    def llm_overrides(self, repetition: int) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.temperature is not None:
            found["temperature"] = self.temperature
        if self.seed is not None:
            found["seed"] = self.seed + repetition - 1
        return found


class ExperimentInput(BaseModel):
    experiment_id: str
    run_id: str
    from_branch: str = "main"
    step: int = Field(ge=0)
    variants: list[Variant]
    repeat: int = Field(default=1, ge=1, le=50)
    # The whole experiment's spend; shared by its branches (see ExperimentWorkflow).
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_steps: int | None = Field(default=None, ge=1)
    concurrency: int | None = Field(default=None, ge=1)  # branches running at once (None: all)
    scorer: str | None = None  # module:function, run on each branch's final checkpoint
    # What the branches' side-effecting calls do (workflows.vocabulary.contracts.SideEffectMode):
    # exploring variants must not cost real effects, so none runs unless asked.
    side_effects: SideEffectMode = "dry-run"


class ExperimentBranch(BaseModel):
    branch: str
    variant: str
    repetition: int
    state: BranchState = "pending"
    workflow_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    final_step: int | None = None
    cost_usd: float = 0.0  # the branch's own spend (not what it inherited)
    max_cost_usd: float | None = None  # its current share of the experiment's budget
    score: float | str | None = None
    score_error: str | None = None


class ExperimentStatus(BaseModel):
    experiment_id: str
    run_id: str
    from_branch: str
    step: int
    state: ExperimentState = "running"
    max_cost_usd: float | None = None
    spent_usd: float = 0.0
    scorer: str | None = None
    variants: list[Variant] = Field(default_factory=list)
    branches: list[ExperimentBranch] = Field(default_factory=list)


class StartBranchRequest(BaseModel):
    run_id: str
    from_branch: str
    step: int
    branch: str
    variant: Variant
    repetition: int
    max_cost_usd: float | None = None
    max_steps: int | None = None
    experiment_id: str
    side_effects: SideEffectMode = "run"  # a request without it comes from an older experiment


class StartedBranch(BaseModel):
    workflow_id: str
    started_at: datetime
    limits: RunLimits  # what the branch runs with (its share of the budget raises max_cost_usd)


class WatchBranchRequest(BaseModel):
    workflow_id: str
    # The branch's current cost cap: a pause for budget counts only once the branch
    # runs with it (a raise just signalled may not have reached it yet).
    max_cost_usd: float | None = None


class BranchOutcome(BaseModel):
    state: BranchState
    step: int
    cost_usd: float  # the branch's own
    ended_at: datetime | None = None


class ScoreInput(BaseModel):
    experiment_id: str
    scorer: str
    checkpoints: dict[str, str]  # branch -> checkpoint id of its last step


class ScoreRequest(BaseModel):
    scorer: str
    checkpoint_id: str


class ScoreResult(BaseModel):
    score: float | str | None = None
    error: str | None = None


__all__ = [
    "BranchState", "FINISHED", "ExperimentState", "experiment_workflow_id", "score_workflow_id", "branch_name", "parse_branch_name",
    "Variant", "ExperimentInput", "ExperimentBranch", "ExperimentStatus", "StartBranchRequest", "StartedBranch",
    "WatchBranchRequest", "BranchOutcome", "ScoreInput", "ScoreRequest", "ScoreResult",
]
