"""Fork and rollback: new workflows seeded from a checkpoint.

A fork starts a new branch of a run from any checkpoint, optionally with a
new system prompt, model or tool set. A rollback stops a branch's running
workflow, marks its checkpoints after the chosen step invalidated (kept, never
deleted) and continues the branch from that step in a new workflow, under the
next revision of the branch (see lineage.py).

Either way the new workflow gets a `LoopState` built from the checkpoint: the
conversation (written to the transcript store), the read-only tool-result
cache, the step index and the totals. Tool calls answered before the fork
point are therefore never executed again on the new branch. It also gets the
side effects of its lineage (`lineage_effects_of`): those before the fork
point, those the source branch inherited, and those of the steps a rollback
discards (unless compensated), so a call that repeats one of them follows
its tool's `on_repeat` instead of causing the effect twice.

Everything is checked before anything is changed: a bad id, an unknown run, a
step out of range, a taken branch name or a corrupt checkpoint raises before
any workflow is started or stopped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from checkpoint_bridge.branches.compensation import SideEffect, run_compensations
from checkpoint_bridge.checkpoints.lineage import (
    current_name,
    display_name,
    lineage,
    resolve_step,
    revision_branch,
    revisions,
    revisions_among,
    StoredSteps,
    split_revision,
    validate_branch_name,
)
from checkpoint_bridge.projection.projector import chain_events, first_events, first_started_event, log_of
from checkpoint_bridge.temporal.runs import (
    branch_workflows,
    check_limits,
    check_tools,
    start_agent,
)
from checkpoint_bridge.document.migrations import validate_document
from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointSummary, code_kind
from checkpoint_bridge.checkpoints.chain import gc_paused
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.canonical import canonical_json
from workflows.vocabulary.contracts import (
    DEFAULT_MODEL,
    AgentInput,
    AgentResult,
    DescribeToolsResponse,
    GraphTurn,
    Ledger,
    LineageEffect,
    LoopState,
    RedoPlan,
    SIDE_EFFECT_MODES,
    StateSet,
    STOPPED_MIRROR_DRAIN_S,
    RunLimits,
    ToolSpec,
)
from workflows.vocabulary.errors import (
    CheckpointNotUsableError,
    RunActiveError,
    RunExistsError,
    StepNotFoundError,
    UsageError,
)
from workflows.vocabulary.ids import parse_subagent_branch, validate_id, workflow_id_for
from workflows.vocabulary.tool_calls import NOT_EXECUTED, with_system_prompt
from workflows.vocabulary.wire import DESCRIBE_TOOLS, RUN_TOOL

# How long a rollback waits for the run it cancels to end before it terminates
# it: longer than the run's own wait for the checkpoints it recorded, so they
# are written before the rollback's markers.
STOP_TIMEOUT_S = STOPPED_MIRROR_DRAIN_S + 10.0


class TranscriptWriter(Protocol):
    """Where a seeded conversation is written (activities.model.transcript.TranscriptStore)."""

    async def append(self, head: str | None, head_len: int, messages: list[dict[str, Any]]) -> str: ...


@dataclass(frozen=True)
class Launcher:
    """What fork and rollback need to start a workflow, passed in by the caller:
    the workers' task queue, where the seeded conversation goes (the payload
    store every worker reads), and how to redact a new task or system prompt."""

    task_queue: str
    transcripts: TranscriptWriter
    redact: Callable[[str], str] = field(default=lambda text: text)



# What a branch runs besides its source's input: `then(input, step it starts from)` (with_turn).
Then = Callable[[AgentInput, int], AgentInput]


@dataclass
class ForkResult:
    run_id: str
    branch: str
    storage_branch: str
    workflow_id: str
    fork_point: str
    handle: WorkflowHandle[Any, AgentResult] = field(repr=False)




@dataclass
class RollbackResult:
    run_id: str
    branch: str
    step: int
    stopped_workflow: str | None
    invalidated_steps: list[str]
    side_effects: list[SideEffect]
    continued: ForkResult
    compensations: list[dict[str, Any]] = field(default_factory=list)


def ledger_of(cp: AgentCheckpoint) -> Ledger:
    """Cumulative totals at a checkpoint (estimated from its content for old documents)."""
    if cp.ledger and isinstance(cp.ledger.get("total"), dict):
        return Ledger.model_validate(cp.ledger["total"])
    records = cp.tool_call_cache
    executed = [r for r in records if not r.served_from_cache]
    return Ledger(
        prompt_tokens=cp.prompt_tokens, completion_tokens=cp.completion_tokens,
        total_tokens=cp.llm_tokens_used, cost_usd=cp.llm_cost_usd,
        model_calls=sum(1 for m in cp.messages if m.get("role") == "assistant"),
        tool_calls=sum(1 for r in executed if not (r.error or "").startswith(NOT_EXECUTED)),
        cache_hits=len(records) - len(executed),
        tool_time_ms=sum(r.duration_ms for r in executed),
    )


def tool_cache_of(cp: AgentCheckpoint) -> dict[str, Any]:
    """The read-only tool results a branch inherits: answered calls are never re-run."""
    return {r.cache_key: r.tool_output for r in cp.tool_call_cache if not r.side_effects and r.error is None}


def lineage_effects_of(
    cp: AgentCheckpoint, source: AgentInput | None, discarded: list[LineageEffect] | None = None,
) -> list[LineageEffect]:
    """The side effects a branch started from `cp` must not cause again: the ones
    its checkpoint records (every step of its lineage up to `cp`), the ones the
    source branch was seeded with, and `discarded` (a rollback's undone steps)."""
    found: list[LineageEffect] = []
    for r in cp.tool_call_cache:
        executed = r.side_effects and r.error is None and r.idempotency_key and not r.served_from_cache
        rejected = bool(r.approval) and (r.approval or {}).get("verdict") == "rejected"
        # A reuse caused nothing (its original is listed), nor did a dry run.
        if executed and not rejected and r.reused is None and not r.dry_run:
            found.append(LineageEffect(tool_name=r.tool_name, arguments=r.tool_input, output=r.tool_output,
                                       idempotency_key=r.idempotency_key or "", branch_id=cp.branch_id,
                                       step=None, tool_call_id=r.tool_call_id, origin="ancestor"))
    if source is not None and source.resume is not None:
        found.extend(source.resume.lineage_effects)
    found.extend(discarded or [])
    unique: dict[str, LineageEffect] = {}
    for effect in found:
        unique.setdefault(canonical_json([effect.idempotency_key, effect.tool_name, effect.arguments]), effect)
    return list(unique.values())


async def seed_from(
    cp: AgentCheckpoint, transcripts: TranscriptWriter, system_prompt: str | None,
    lineage_effects: list[LineageEffect] | None = None, *, conversation: bool = True,
) -> LoopState:
    """The state a branch from `cp` starts with. `conversation`: the loop's branch continues the
    checkpoint's conversation (written to the transcript store); a pipeline's runs its code
    again against its record instead (workflows/pipeline/workflow.py), so it needs none."""
    messages = [dict(m) for m in cp.messages] if conversation else []
    if system_prompt is not None:
        messages = with_system_prompt(messages, system_prompt)
    head = await transcripts.append(None, 0, messages) if conversation else None
    totals = ledger_of(cp)
    return LoopState(
        step=cp.step_index, parent_checkpoint=cp.checkpoint_id,
        transcript_head=head, transcript_len=len(messages),
        totals=totals, inherited=totals, tool_cache=tool_cache_of(cp),
        announce_system_prompt=system_prompt, lineage_effects=list(lineage_effects or []),
    )


async def checkpoint_at(store: CheckpointStore, point: CheckpointSummary,
                        stored: StoredSteps | None = None) -> AgentCheckpoint:
    """The checkpoint `point` names (as `resolve_step` found it), to start a branch from.

    Validated from the store's shared document instead of `store.load`, which first copies
    the whole document so that callers may change it (3-6 ms at 500 steps of 2 KB tool
    outputs, several times that on a loaded machine) and lists the branch's rollback
    markers (a request of its own on S3). A fork only reads the checkpoint: it copies the
    messages it seeds and changes nothing else; the status comes with `point`
    (resolve_step applied the markers). `stored`: the run's listing (`store.stored_steps`), when
    the caller made it: how far each branch got tells which packs hold the chain's blocks now."""
    ends = {branch: max(steps) for branch, (steps, _cutoff) in stored.items() if steps} if stored else None
    doc = await store.document(point.checkpoint_id, branch_ends=ends)
    # Validating a long conversation allocates a node per value: without the pause, the collector
    # walks them again and again (60 ms of a 9 MB document's 70, as `store.load` found).
    with gc_paused():
        cp = validate_document(doc, point.checkpoint_id)
    if point.status == "invalidated":
        cp.status = "invalidated"
    return usable(cp)


async def gather_in_order(*steps: Awaitable[Any]) -> list[Any]:
    """Run independent checks and reads at once; raise the first failure in the order given,
    so what a user is told does not depend on which answer came first."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def _none() -> None:
    return None


def usable(cp: AgentCheckpoint) -> AgentCheckpoint:
    if cp.status == "invalidated":
        raise CheckpointNotUsableError(
            f"checkpoint {cp.checkpoint_id} was invalidated by a rollback; pick a step of the branch's "
            "live line (see `rewind tree`)"
        )
    if cp.status == "failed":
        raise CheckpointNotUsableError(
            f"checkpoint {cp.checkpoint_id} records a failed step; fork from step {cp.step_index - 1}, "
            "the last good one"
        )
    return cp


@dataclass(frozen=True)
class Source:
    """What a branch's workflow was started with and what its tools were, from its history."""

    input: AgentInput | None  # its first run's input; None past Temporal's retention
    tools: list[ToolSpec] | None = None  # the specs its newest run was described at its start, if found


# How many events of the source's newest run are read for its tool specs: its first activity
# is describe_tools, completed by about the tenth event (twelfth for a branch that described
# while its first model call ran). One page either way; past it, the branch describes first.
DESCRIBED_WITHIN = 24


async def source_of(client: Client, workflow_id: str, *, tools: bool = True) -> Source:
    """The input the branch's workflow was started with (first run of its chain) and, with
    `tools`, the tool specs its newest run was described, read from the same first page."""
    try:
        head = await first_events(client, workflow_id, DESCRIBED_WITHIN if tools else 1)
        started = head[0]
        previous = started.workflow_execution_started_event_attributes.continued_execution_run_id
        if previous:
            started = await first_started_event(client, workflow_id, previous)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return Source(None)  # past Temporal's retention: rebuild what we can from the checkpoint
        raise
    attrs = started.workflow_execution_started_event_attributes
    (inp,) = await client.data_converter.decode(attrs.input.payloads, [AgentInput])
    return Source(inp, await _described(client, head) if tools else None)


async def _described(client: Client, events: list[Any]) -> list[ToolSpec] | None:
    """The specs the run's first describe_tools answered with, if it found every tool (a tool
    described on its own queue, or an answer past these events: None, the branch describes)."""
    from temporalio.api.enums.v1 import EventType

    scheduled: int | None = None
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == DESCRIBE_TOOLS:
                if scheduled is not None:
                    return None
                scheduled = event.event_id
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            if scheduled is not None and attrs.scheduled_event_id == scheduled:
                (found,) = await client.data_converter.decode(attrs.result.payloads, [DescribeToolsResponse])
                return None if found.missing else found.tools
    return None


async def source_input(client: Client, workflow_id: str) -> AgentInput | None:
    """The input the branch's workflow was started with (first run of its chain)."""
    return (await source_of(client, workflow_id, tools=False)).input


def check_side_effects(mode: str) -> None:
    if mode not in SIDE_EFFECT_MODES:
        raise UsageError(f"--side-effects {mode!r}: choose one of {', '.join(SIDE_EFFECT_MODES)}")


def input_for(cp: AgentCheckpoint, source: AgentInput | None) -> AgentInput:
    if source is not None:
        return source
    task = next((m.get("content") for m in cp.messages if m.get("role") == "user"), "")
    system = next((m.get("content") for m in cp.messages if m.get("role") == "system"), None)
    fields: dict[str, Any] = {"run_id": cp.run_id, "task": str(task or ""), "model": cp.model or DEFAULT_MODEL}
    if system:
        fields["system_prompt"] = system
    return AgentInput(**fields)


async def _branch_taken(client: Client, store: CheckpointStore, run_id: str, name: str) -> bool:
    # The store's branches and Temporal's workflows at once; a stored branch answers alone.
    stored, started = await asyncio.gather(revisions(store, run_id, name), branch_workflows(client, run_id, name),
                                           return_exceptions=True)
    if isinstance(stored, BaseException):
        raise stored
    if stored:
        return True
    if isinstance(started, BaseException):
        raise started
    return bool(started)


async def fork(
    client: Client, launcher: Launcher, store: CheckpointStore, run_id: str, step: int, *,
    branch: str, from_branch: str = "main", system_prompt: str | None = None, model: str | None = None,
    tools: list[str] | None = None, variables: dict[str, Any] | None = None, limits: RunLimits | None = None,
    limit_overrides: dict[str, Any] | None = None, llm_overrides: dict[str, Any] | None = None,
    subagent_overrides: dict[str, dict[str, str]] | None = None, side_effects: str = "run",
    prompts: dict[str, str] | None = None, models: dict[str, str] | None = None,
    then: Then | None = None,
) -> ForkResult:
    """Start branch `branch` of `run_id` from checkpoint `step` of `from_branch`.

    `then(input, step)`: what the branch runs besides, from the input it would run with (a graph
    run's next invocation on its thread, `with_turn`).

    A pipeline's branch runs its code again, each call recorded up to the fork point answered
    from the record: `prompts` / `models` ({label: ...}; a plain `model` is every call's)
    change the calls made after it, and `variables` are set in its ctx.state at the fork point.

    `side_effects` ("run", "reuse" or "dry-run", workflows.vocabulary.contracts.SideEffectMode): what the
    branch's side-effecting calls do; "run" unless told, whatever the source branch did.

    `limit_overrides` / `llm_overrides` change single fields of the source's limits
    and model-call options (an experiment's per-branch budget, temperature, seed);
    `subagent_overrides` what the branch's sub-agents run with ({name: {"model": M,
    "system_prompt": P}}) instead of their declarations."""
    validate_id("run", run_id)
    validate_branch_name(branch)
    validate_id("branch", from_branch)
    check_side_effects(side_effects)
    if limits is not None:
        check_limits(limits.max_steps, limits.max_cost_usd, limits.max_tokens)

    async def at_point() -> tuple[list[str], AgentCheckpoint, Source]:
        # One listing of the run answers both where the step is and whether the name is taken.
        stored = await store.stored_steps(run_id)
        point = await resolve_step(store, run_id, from_branch, step, stored=stored)
        cp, source = await gather_in_order(
            checkpoint_at(store, point, stored), source_of(client, workflow_id_for(run_id, point.branch_id)))
        return revisions_among(list(stored), branch), cp, source

    # Reads only, and independent of each other: at once (one store or Temporal round trip
    # each, where they used to follow one another); nothing is written or started before
    # all of them answered, and the first failure in this order is the one raised. Tools
    # are checked before anything is created, so a refused fork leaves the branch name free.
    (taken, cp, source), started, _ = await gather_in_order(
        at_point(), branch_workflows(client, run_id, branch),
        check_tools(client, launcher.task_queue, tools) if tools else _none(),
    )
    if taken or started:
        raise RunExistsError(f"run {run_id!r} already has a branch {branch!r}; choose another --branch")
    base = input_for(cp, source.input)
    if base.pipeline is not None and (set(prompts or {}) | set(models or {})) - {"*"}:
        await check_labels(store, run_id, from_branch, prompts or {}, models or {})
    if limit_overrides or llm_overrides:
        base = base.model_copy(update={"limits": (limits or base.limits).model_copy(update=limit_overrides or {}),
                                       "llm": base.llm.model_copy(update=llm_overrides or {})})
        limits = None
    base = with_pipeline_overrides(base, system_prompt=system_prompt, tools=tools, prompts=prompts, models=models,
                                   model=model)
    if base.pipeline is not None:
        model = None
    if then is not None:
        base = then(base, cp.step_index)
    return await start_from(client, launcher, cp, base, branch, branch,
                             system_prompt=system_prompt, model=model, tools=tools, variables=variables, limits=limits,
                             effects=lineage_effects_of(cp, source.input) + await subagent_effects(store, cp)
                             + (await sibling_effects(store, run_id) if side_effects == "reuse" else []),
                             subagent_overrides=subagent_overrides, side_effects=side_effects,
                             described=source.tools if tools is None else None)


async def check_labels(store: CheckpointStore, run_id: str, branch: str, prompts: dict[str, str],
                       models: dict[str, str]) -> None:
    """A fork's `--prompt LABEL=` / `--model LABEL=` name labels the branch's calls used (a
    pipeline's call labels, a graph's nodes): one it never used changes nothing, so it is refused."""
    head = (await lineage(store, run_id, branch))[-1]
    used: set[str] = set()
    for found in await store.recorded_calls(head.checkpoint_id):
        call = found.call
        used.update(str(n) for n in call.get("nodes") or [])
        used.update(str(c.get("label")) for c in call.get("calls") or [] if c.get("kind") in ("llm", "node"))
        if "superstep" not in call and call.get("kind") == "llm":
            used.add(str(call.get("label")))
    for option, given in (("--prompt", prompts), ("--model", models)):
        unknown = sorted(set(given) - used - {"*"})
        if unknown:
            raise UsageError(f"{option} {unknown[0]}=... names a label run {run_id!r} never used on {branch!r}; "
                             f"its labels: {', '.join(sorted(used)) or 'none'}")


async def sibling_effects(store: CheckpointStore, run_id: str) -> list[LineageEffect]:
    """The side effects every branch of the run caused (each branch's newest checkpoint): a fork
    with `--side-effects reuse` answers a repeat of any of them with its recorded result, so the
    same report is not saved again by a branch forked from before it was."""
    heads: dict[str, Any] = {}
    for summary in await store.list_checkpoints(run_id):
        if summary.status == "invalidated":
            continue
        known = heads.get(summary.branch_id)
        if known is None or summary.step_index > known.step_index:
            heads[summary.branch_id] = summary
    found = []
    for summary in heads.values():
        head = await store.load(summary.checkpoint_id)
        found += [e.model_copy(update={"origin": "sibling"}) for e in lineage_effects_of(head, None)]
    return found


def with_pipeline_overrides(base: AgentInput, *, system_prompt: str | None = None, tools: list[str] | None = None,
                            prompts: dict[str, str] | None = None, models: dict[str, str] | None = None,
                            model: str | None = None) -> AgentInput:
    """A pipeline branch's input: its source's overrides by label plus these. The loop's
    options that a pipeline has not (its code names its own prompts and tools) are refused,
    and the label overrides on a loop run."""
    if base.pipeline is None:
        if prompts or models:
            raise UsageError("--prompt LABEL=TEXT and --model LABEL=M override a pipeline's calls by label; this run "
                             "is an agent run: use --system-prompt and --model M")
        return base
    if system_prompt is not None or tools is not None:
        raise UsageError("a pipeline's code names its own prompts and tools: override a call's system prompt with "
                         "--prompt LABEL=TEXT (and its model with --model LABEL=M)")
    every = {"*": model} if model else {}
    pipeline = base.pipeline.model_copy(update={
        "prompts": {**base.pipeline.prompts, **(prompts or {})},
        "models": {**base.pipeline.models, **every, **(models or {})},
    })
    return base.model_copy(update={"pipeline": pipeline})


def pipeline_from(base: AgentInput, fork_point: int, variables: dict[str, Any] | None) -> AgentInput:
    """A pipeline branch from step `fork_point`: the state its lineage set at fork points up to
    there (a later one belongs to steps the branch does not have), and `variables` at its own."""
    if base.pipeline is None:
        return base
    sets = [s for s in base.pipeline.state_sets if s.after_step <= fork_point]
    if variables:
        sets.append(StateSet(after_step=fork_point, values=dict(variables)))
    return base.model_copy(update={"pipeline": base.pipeline.model_copy(update={"state_sets": sets})})


async def start_from(
    client: Client, launcher: Launcher, cp: AgentCheckpoint, base: AgentInput, name: str, storage: str, *,
    system_prompt: str | None = None, model: str | None = None, tools: list[str] | None = None,
    variables: dict[str, Any] | None = None, limits: RunLimits | None = None,
    effects: list[LineageEffect] | None = None, adjust: Callable[[LoopState], None] | None = None,
    subagent_overrides: dict[str, dict[str, str]] | None = None, side_effects: str | None = None,
    described: list[ToolSpec] | None = None,
) -> ForkResult:
    """`described`: the source's tool specs, when the branch keeps its tools: its first model
    call goes out with them while its workflow describes the tools again (LoopState.tool_specs)."""
    looped = base.pipeline is None
    if system_prompt is None and looped:
        # The branch keeps its own system prompt, also when it continues from a
        # checkpoint of the branch it was forked from (a rollback to its fork
        # point): that checkpoint still holds the parent branch's prompt.
        current = next((m.get("content") for m in cp.messages if m.get("role") == "system"), None)
        if current is not None and current != base.system_prompt:
            system_prompt = base.system_prompt
    seed = await seed_from(cp, launcher.transcripts, system_prompt, effects, conversation=looped)
    if not looped:
        base, variables = pipeline_from(base, cp.step_index, variables), None
    seed.tool_specs = described
    if adjust is not None:
        adjust(seed)
    inp = base.model_copy(update={
        "run_id": cp.run_id,
        "branch_id": storage,
        "system_prompt": system_prompt if system_prompt is not None else base.system_prompt,
        "model": model or base.model,
        "tools": list(tools) if tools is not None else base.tools,
        "variables": {**base.variables, **(variables or {})},
        "limits": limits or base.limits,
        "resume": seed,
        "subagent_overrides": {**base.subagent_overrides, **(subagent_overrides or {})},
        "side_effects": side_effects if side_effects is not None else base.side_effects,
    })
    handle = await start_agent(client, launcher.task_queue, inp, launcher.redact, verify_tools=False)
    return ForkResult(cp.run_id, name, storage, handle.id, cp.checkpoint_id, handle)


async def _stop(handle: WorkflowHandle[Any, Any], reason: str) -> bool:
    """Cancel a running workflow and wait for it to end; terminate it if it will not. True if it was running."""
    desc = await handle.describe()
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return False
    await handle.cancel()
    deadline = asyncio.get_running_loop().time() + STOP_TIMEOUT_S
    while asyncio.get_running_loop().time() < deadline:
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return True
        await asyncio.sleep(0.1)
    await handle.terminate(reason=f"{reason} (did not stop within {STOP_TIMEOUT_S:.0f}s of cancellation)")
    return True


async def side_effects_after(client: Client, workflow_ids: list[str], step: int) -> list[SideEffect]:
    """Completed side-effecting tool calls of steps after `step`, read from Temporal history:
    the branch's own, and those of the sub-agents its steps after `step` called (counted at
    the step that called them, under the branch's workflow)."""
    found: list[SideEffect] = []
    for workflow_id in workflow_ids:
        found += await _effects_of(client, workflow_id, step)
    return sorted(found, key=lambda e: (e.step, e.idempotency_key))


async def _effects_of(client: Client, workflow_id: str, after: int, *, called_at: int | None = None,
                      owner: str | None = None, depth: int = 0) -> list[SideEffect]:
    from temporalio.api.enums.v1 import EventType

    from workflows.vocabulary.contracts import AgentInput as ChildInput
    from workflows.vocabulary.contracts import ToolOutcome, ToolRequest

    found: list[SideEffect] = []
    scheduled: dict[int, ToolRequest] = {}
    children: list[tuple[str, int]] = []
    for event in await chain_events(client, workflow_id):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == RUN_TOOL:
                (request,) = await client.data_converter.decode(attrs.input.payloads, [ToolRequest])
                # A dry run caused nothing to undo.
                if request.idempotency_key and not request.dry_run and (called_at is not None or request.step > after):
                    scheduled[event.event_id] = request
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs = event.activity_task_completed_event_attributes
            request = scheduled.get(attrs.scheduled_event_id)
            if request is not None:
                (outcome,) = await client.data_converter.decode(attrs.result.payloads, [ToolOutcome])
                if outcome.error is None:
                    found.append(SideEffect(called_at if called_at is not None else request.step, request.tool_name,
                                            request.arguments, outcome.output, request.idempotency_key or "",
                                            owner or workflow_id))
        elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED and depth < 8:
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            (child,) = await client.data_converter.decode(attrs.input.payloads, [ChildInput])
            if child.called_by is not None and (called_at is not None or child.called_by.step > after):
                children.append((attrs.workflow_id, called_at if called_at is not None else child.called_by.step))
    for child_id, at in children:
        try:
            found += await _effects_of(client, child_id, after, called_at=at, owner=owner or workflow_id, depth=depth + 1)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:  # a sub-agent that never started: nothing it did
                raise
    return found


async def rollback(
    client: Client, launcher: Launcher, store: CheckpointStore, run_id: str, step: int, *,
    branch: str = "main", compensate: bool = False, then: Then | None = None,
) -> RollbackResult:
    """Roll branch `branch` back to `step` in place and continue it from there (`then`: as fork's)."""
    validate_id("run", run_id)
    validate_id("branch", branch)
    if parse_subagent_branch(split_revision(branch)[0]) is not None:
        raise UsageError(
            f"branch {branch!r} is a sub-agent's run, which its caller waits for; redo the call instead: "
            f"`rewind redo {run_id} --step N --call CALL` on the caller's step (`rewind tree {run_id}` shows both)")
    branch = await current_name(store, run_id, branch)
    line = await lineage(store, run_id, branch)
    point = await resolve_step(store, run_id, branch, step)
    cp = await checkpoint_at(store, point)
    workflows = await branch_workflows(client, run_id, branch)
    running = bool(workflows) and (await workflows[-1][1].describe()).status == WorkflowExecutionStatus.RUNNING
    resuming = False
    if line[-1].step_index <= step and not running:
        # A rollback to this step that stopped the branch and wrote its markers, then
        # failed before its continuation started (Temporal restarting, the process
        # killed): the branch's last workflow has this step's marker and no workflow
        # came after it. Its retry finishes it, from the line as it was before.
        marked = workflows and (await store.stored_steps(run_id)).get(workflows[-1][0], (set(), None))[1] == step
        if not marked:
            raise CheckpointNotUsableError(
                f"nothing to roll back: step {step} is the head of branch {branch!r}; fork it instead to try "
                "something else"
            )
        resuming = True
        line = await lineage(store, run_id, branch, ignoring_rollback_to=step)
    reason = f"rolled back to step {step} by rewind rollback"
    stopped = None
    if running and await _stop(workflows[-1][1], reason):
        stopped = workflows[-1][1].id
    # What this rollback undoes: the live steps after `step` on the branch's current
    # line (and the step in flight of the workflow it stops, or that the interrupted
    # try stopped), not what an earlier rollback
    # already invalidated and reported.
    storage_of = {h.id: storage for storage, h in workflows}
    undone = {(s.branch_id, s.step_index) for s in line if s.step_index > step}
    head = line[-1]
    effects = [
        e for e in await side_effects_after(client, [h.id for _, h in workflows], step)
        if (storage_of.get(e.workflow_id), e.step) in undone
        or ((running or resuming) and e.workflow_id == workflows[-1][1].id and e.step > head.step_index)
    ]
    stored = await revisions(store, run_id, branch)
    live_after = {s.checkpoint_id for s in await store.list_checkpoints(
                      run_id, ignoring_rollback_to=step if resuming else None)
                  if s.branch_id in stored and s.step_index > step and s.status != "invalidated"}
    invalidated = sorted(live_after)
    for storage in stored:
        await store.invalidate_after(run_id, storage, step, reason)
    next_revision = max([split_revision(b)[1] for b in stored] + [len(workflows) - 1]) + 1
    source = await source_of(client, workflows[-1][1].id) if workflows else Source(None)
    # Compensated first, so the continuation knows which discarded effects still stand:
    # a compensated effect is no longer one of its lineage, and a repeat of it runs again.
    compensations = (await run_compensations(client, launcher.task_queue, run_id, branch, step, effects)
                     if compensate and effects else [])
    undone_keys = {c["idempotency_key"] for c in compensations if c.get("status") in ("compensated", "already_compensated")}
    standing = [LineageEffect(tool_name=e.tool_name, arguments=e.arguments, output=e.output,
                              idempotency_key=e.idempotency_key, branch_id=storage_of.get(e.workflow_id) or branch,
                              step=e.step, origin="discarded")
                for e in effects if e.idempotency_key not in undone_keys]
    base = input_for(cp, source.input)
    continued = await start_from(client, launcher, cp, then(base, step) if then is not None else base, branch,
                                  revision_branch(branch, next_revision),
                                  effects=lineage_effects_of(cp, source.input, standing) + await subagent_effects(store, cp),
                                  described=source.tools)
    result = RollbackResult(run_id, branch, step, stopped, sorted(invalidated), effects, continued, compensations)
    return result


def turns_until(base: AgentInput, step: int) -> AgentInput:
    """A `then` for a branch of a graph run from `step`: without the turns given after it (they
    belong to the line the branch leaves behind)."""
    if base.pipeline is None or not base.pipeline.turns:
        return base
    kept = [t for t in base.pipeline.turns if t.after_step <= step]
    return base.model_copy(update={"pipeline": base.pipeline.model_copy(update={"turns": kept})})


def with_turn(graph_input: dict[str, Any] | None = None, command: dict[str, Any] | None = None) -> Then:
    """A `then` that invokes a graph run again on its thread (PipelineRun.turns): with `graph_input`,
    or with LangGraph's Command (`resume`, `update`, `goto`), after the step the branch starts from."""

    def then(base: AgentInput, step: int) -> AgentInput:
        if base.pipeline is None or ":" not in base.pipeline.name:
            raise UsageError(f"run {base.run_id!r} is not a graph run: only a graph run is invoked again on its thread")
        turn = GraphTurn(after_step=step, input=graph_input, command=command)
        base = turns_until(base, step)
        assert base.pipeline is not None
        return base.model_copy(update={"pipeline": base.pipeline.model_copy(update={
            "turns": [*base.pipeline.turns, turn]})})

    return then


async def continue_branch(
    client: Client, launcher: Launcher, store: CheckpointStore, run_id: str, then: Then, *, branch: str = "main",
    stop: str | None = None,
) -> ForkResult:
    """The next revision of `branch`, from its head (its last step that did not fail), running what
    `then(input, head)` adds: a graph run invoked again on its thread. Nothing of the line before the
    head runs again. A branch that still runs is stopped first when `stop` says why (its steps so
    far are kept: they are the head), else refused (RunActiveError)."""
    validate_id("run", run_id)
    branch = await current_name(store, run_id, validate_id("branch", branch))
    workflows = await branch_workflows(client, run_id, branch)
    if workflows and (await workflows[-1][1].describe()).status == WorkflowExecutionStatus.RUNNING:
        if stop is None:
            raise RunActiveError(f"branch {branch!r} of run {run_id!r} still runs; wait for it, or stop it first")
        await _stop(workflows[-1][1], stop)
    line = await lineage(store, run_id, branch)
    head = next((s for s in reversed(line) if s.status != "failed"), line[0])
    cp = await checkpoint_at(store, await resolve_step(store, run_id, branch, head.step_index))
    source = await source_of(client, workflows[-1][1].id) if workflows else Source(None)
    stored = await revisions(store, run_id, branch)
    next_revision = max([split_revision(b)[1] for b in stored] + [len(workflows) - 1]) + 1
    return await start_from(client, launcher, cp, then(input_for(cp, source.input), cp.step_index), branch,
                            revision_branch(branch, next_revision),
                            effects=lineage_effects_of(cp, source.input) + await subagent_effects(store, cp),
                            described=source.tools)


async def subagent_effects(store: CheckpointStore, cp: AgentCheckpoint, depth: int = 0) -> list[LineageEffect]:
    """The side effects the sub-agents of `cp`'s lineage caused (their runs' checkpoints), so
    a branch started from `cp` does not cause them again through a new sub-agent call."""
    found: list[LineageEffect] = []
    for record in cp.tool_call_cache:
        sub = record.subagent or {}
        branch = sub.get("branch_id")
        if not branch or depth > 8:
            continue
        head = await store.load_latest(cp.run_id, branch)
        if head is None:
            continue  # not mirrored (or erased): nothing to go by
        found += lineage_effects_of(head, None) + await subagent_effects(store, head, depth + 1)
    return found


# A redo's plan rides in its workflow's start input: recorded answers beyond this are refused.
REDO_PLAN_MAX_BYTES = 1_000_000


async def redo(
    client: Client, launcher: Launcher, store: CheckpointStore, run_id: str, step: int, call_id: str | None, *,
    branch: str | None = None, from_branch: str = "main", system_prompt: str | None = None, model: str | None = None,
    side_effects: str = "run",
) -> ForkResult:
    """`rewind redo`: a new branch from step `step` of `from_branch` (the step whose model call
    asked for tool calls) on which every call of that step keeps its recorded answer except
    `call_id`, which runs again: a sub-agent as a new run of its own (with `system_prompt`
    or `model` instead of its declaration's, if given), a read-only tool afresh; the run then
    goes on from there. The model call of that step is not made again."""
    validate_id("run", run_id)
    validate_id("branch", from_branch)
    check_side_effects(side_effects)
    point = await resolve_step(store, run_id, from_branch, step)
    cp = await checkpoint_at(store, point)
    if cp.pipeline is not None:
        return await _redo_call(client, launcher, store, cp, from_branch, branch, system_prompt, model, side_effects)
    if cp.parent_id is None:
        raise StepNotFoundError(f"step {step} of {from_branch!r} is the run's start: it made no tool calls to redo")
    if call_id is None:
        raise UsageError(f"say which tool call of step {step} runs again: --call CALL_ID (`rewind show "
                         f"{point.checkpoint_id}` lists them)")
    before = usable(await store.load(cp.parent_id))
    added = cp.messages[len(before.messages):]
    message = next((m for m in added if m.get("role") == "assistant" and m.get("tool_calls")), None)
    calls = [str(c.get("id")) for c in (message or {}).get("tool_calls") or []]
    if message is None or call_id not in calls:
        listed = ", ".join(calls) or "none"
        raise StepNotFoundError(f"step {step} of {from_branch!r} has no tool call {call_id!r}; its calls: {listed} "
                                f"(`rewind show {point.checkpoint_id}` lists them)")
    records = {r.tool_call_id: r for r in cp.tool_call_cache[len(before.tool_call_cache):]}
    redone = records.get(call_id)
    if redone is not None and redone.side_effects and not redone.subagent:
        raise UsageError(f"call {call_id} ({redone.tool_name}) is a side effect; redo runs sub-agents and read-only "
                         "tools again, not effects (fork from the step before to let the model ask anew)")
    if (system_prompt or model) and (redone is None or not redone.subagent):
        raise UsageError(f"--system-prompt and --model change the sub-agent a call runs; {call_id} is not a sub-agent call")
    name = branch or f"redo-{step}-{call_id}"
    validate_branch_name(name)
    if await _branch_taken(client, store, run_id, name):
        raise RunExistsError(f"run {run_id!r} already has a branch {name!r}; choose another --branch")
    source = await source_input(client, workflow_id_for(run_id, point.branch_id))
    base = input_for(cp, source)
    step_ledger = Ledger.model_validate((cp.ledger or {}).get("step") or {})
    old = Ledger.model_validate((redone.subagent or {}).get("ledger") or {}) if redone is not None else Ledger()
    # The branch inherits the step as recorded, but for what the redone call's old run spent.
    kept = step_ledger.minus(old.rolled_up() if redone is not None and redone.subagent else Ledger())
    plan = RedoPlan(
        step=step, source_checkpoint=cp.checkpoint_id, message=message, call_id=call_id,
        answers={cid: log_of(r, step) for cid, r in records.items() if cid != call_id},
        system_prompt=system_prompt, model=model, model_ledger=kept,
    )
    size = len(plan.model_dump_json())
    if size > REDO_PLAN_MAX_BYTES:
        raise UsageError(f"the recorded answers of step {step} are {size:,} bytes, too many to carry into a redo "
                         f"(at most {REDO_PLAN_MAX_BYTES:,}); fork from step {step - 1} instead")

    def adjust(seed: LoopState) -> None:
        seed.totals = seed.inherited = seed.totals.plus(kept)
        seed.tool_cache = tool_cache_of(cp)
        seed.redo = plan

    return await start_from(client, launcher, before, base, name, name, adjust=adjust,
                             effects=lineage_effects_of(cp, source) + await subagent_effects(store, cp),
                             side_effects=side_effects)


async def _redo_call(client: Client, launcher: Launcher, store: CheckpointStore, cp: AgentCheckpoint, from_branch: str,
                     branch: str | None, system_prompt: str | None, model: str | None, side_effects: str) -> ForkResult:
    """`rewind redo` of a pipeline's call (the step `cp`): a new branch from the head of
    `from_branch` whose code runs again with every recorded call answered from the record but
    this one; what depends on its new answer runs live, the rest keeps its answers."""
    call = cp.pipeline or {}
    if code_kind(call) == "graph":
        return await _redo_graph_step(client, launcher, store, cp, from_branch, branch, model, side_effects)
    record = cp.tool_call_cache[-1] if call.get("kind") != "llm" and cp.tool_call_cache else None
    if record is not None and record.side_effects and not record.subagent:
        raise UsageError(f"step {cp.step_index} is {record.tool_name}, a side effect; redo runs model calls, sub-agents "
                         "and read-only tools again, not effects")
    if system_prompt is not None and call.get("kind") == "llm":
        raise UsageError("a model call's system prompt is changed with `rewind fork --prompt LABEL=TEXT`; redo's "
                         "--system-prompt and --model are a sub-agent's")
    name = branch or f"redo-{cp.step_index}"
    validate_branch_name(name)
    if await _branch_taken(client, store, cp.run_id, name):
        raise RunExistsError(f"run {cp.run_id!r} already has a branch {name!r}; choose another --branch")
    line = await lineage(store, cp.run_id, from_branch)
    head = await checkpoint_at(store, line[-1])
    source = await source_input(client, workflow_id_for(cp.run_id, line[-1].branch_id))
    base = input_for(head, source)
    assert base.pipeline is not None
    label = str(call.get("label", ""))
    models = {label: model} if model and call.get("kind") == "llm" else {}
    agent = {str(record.tool_name): {k: v for k, v in {"model": model, "system_prompt": system_prompt}.items() if v}} \
        if record is not None and record.subagent and (model or system_prompt) else None
    base = base.model_copy(update={"pipeline": base.pipeline.model_copy(update={
        "redo_steps": [*base.pipeline.redo_steps, cp.step_index], "models": {**base.pipeline.models, **models}})})
    def adjust(seed: LoopState) -> None:
        # A read-only tool's call runs again: not answered from the run's cache of its own result.
        if record is not None and record.cache_key:
            seed.tool_cache.pop(record.cache_key, None)

    return await start_from(client, launcher, head, base, name, name, subagent_overrides=agent, adjust=adjust,
                             effects=lineage_effects_of(head, source) + await subagent_effects(store, head),
                             side_effects=side_effects)


async def _redo_graph_step(client: Client, launcher: Launcher, store: CheckpointStore, cp: AgentCheckpoint,
                           from_branch: str, branch: str | None, model: str | None, side_effects: str) -> ForkResult:
    """`rewind redo` of a graph's step (a super-step, one task of a Send fan-out, a subgraph's
    super-step): a new branch from the step before it, whose calls recorded at that step run
    again while every other call recorded on `from_branch` up to its head is answered from the
    record where the graph asks it again (the other sends of a fan-out, and what comes after
    when the redone step's answers lead to the same calls)."""
    call = cp.pipeline or {}
    if cp.parent_id is None:
        raise StepNotFoundError(f"step {cp.step_index} is the run's start: it made no calls to redo")
    name = branch or f"redo-{cp.step_index}"
    validate_branch_name(name)
    if await _branch_taken(client, store, cp.run_id, name):
        raise RunExistsError(f"run {cp.run_id!r} already has a branch {name!r}; choose another --branch")
    line = await lineage(store, cp.run_id, from_branch)
    before = usable(await store.load(cp.parent_id))
    source = await source_input(client, workflow_id_for(cp.run_id, line[-1].branch_id))
    base = input_for(before, source)
    assert base.pipeline is not None
    nodes = [str(n) for n in call.get("nodes") or []]
    models = {n: model for n in nodes} if model else {}
    base = base.model_copy(update={"pipeline": base.pipeline.model_copy(update={
        "redo_steps": [*base.pipeline.redo_steps, cp.step_index], "models": {**base.pipeline.models, **models},
        "record_until": line[-1].checkpoint_id})})
    return await start_from(client, launcher, before, base, name, name,
                             effects=lineage_effects_of(cp, source) + await subagent_effects(store, cp),
                             side_effects=side_effects)


__all__ = ["fork", "rollback", "redo", "continue_branch", "with_turn", "turns_until", "Launcher", "ForkResult", "RollbackResult", "SideEffect", "display_name", "input_for", "start_from"]
