"""Comparing two branches of one run: what each did after the point where they split.

Pure functions over *lineages*: for each branch, its checkpoints from step 0 to
its head, following parent links (a fork's lineage starts with the checkpoints
it shares with its parent branch). Nothing here reads a store, so the CLI, a
notebook and the tests all diff the same way.

Checkpoint totals (tokens, cost) are cumulative along a lineage, so what a branch
spent after the fork point is its head's total minus the fork point's; each side also
carries its head's totals ("in all", from step 0: the figures `rewind tree` shows).
"""

from __future__ import annotations

import json
import textwrap
from workflows.vocabulary.text import usd
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict

from checkpoint_bridge.document.schema import AgentCheckpoint, CheckpointStatus, code_kind
from checkpoint_bridge.views.approval_text import decision_text
from workflows.vocabulary.errors import LineageError

if TYPE_CHECKING:
    from checkpoint_bridge.checkpoints.store import CheckpointStore

__all__ = ["LineageError", "ForkPoint", "StepRow", "ToolCallRow", "Tokens", "BranchSide", "BranchDiff", "RedoneCall",
           "PipelineCallPair",
           "fork_point", "diff_branches", "diff_text", "diff_json"]

ARGUMENTS_CHARS = 40
MAX_ROWS = 20  # steps or tool calls listed per side in text; the rest are counted
ANSWER_LINES = 8



class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ForkPoint(_Row):
    checkpoint_id: str
    step_index: int
    step_label: str


class StepRow(_Row):
    step_index: int
    step_label: str
    status: CheckpointStatus
    checkpoint_id: str


class ToolCallRow(_Row):
    step_index: int | None
    """The step whose assistant message asked for the call; None if no message names its id."""
    tool_name: str
    arguments: str
    """``name="value", ...``, shortened to about ARGUMENTS_CHARS characters."""
    served_from_cache: bool
    error: str | None
    side_effects: bool
    decision: str | None = None
    """A person's decision on the call: ``approved by NAME``, ``approved by NAME, edited``
    or ``rejected by NAME: REASON`` (``timeout`` as NAME when the wait ran out)."""
    reused: bool = False
    """The call returned the result of an effect its lineage already caused, without running."""
    subagent: str | None = None
    """A sub-agent call: how its run ended (completed, failed, ...)."""
    kept: bool = False
    """`rewind redo`: the call kept its recorded answer instead of running again."""
    dry_run: bool = False
    """A dry-run branch's side-effecting call: the effect did not happen."""
    mcp_policy: list[str] = []
    """An MCP server's tool: what decided its durability, one line per decision (cached or an
    effect, retried or sent once, approval) and the annotation or override that said so."""


class Tokens(_Row):
    total: int
    prompt: int
    completion: int


class BranchSide(_Row):
    name: str
    head_checkpoint_id: str
    head_status: CheckpointStatus
    model: str | None
    system_prompt: str | None
    """The branch's system prompt; None for a pipeline, whose calls name their own."""
    steps: list[StepRow]
    tool_calls: list[ToolCallRow]
    tool_calls_executed: int
    tool_calls_from_cache: int
    tool_calls_reused: int = 0
    """Side-effecting calls answered with an effect of the lineage instead of running again."""
    tool_calls_rejected: int = 0
    tool_calls_dry_run: int = 0
    """Side-effecting calls of a dry-run branch: answered without the effect happening."""
    tool_errors: int
    tokens: Tokens
    """Spent after the fork point (the head's totals minus the fork point's); with no fork point, all."""
    cost_usd: float
    """Spent after the fork point, as ``tokens``."""
    tokens_in_all: Tokens
    """The head's totals, counted from step 0 through the fork point: `rewind tree`'s figures at the head."""
    cost_usd_in_all: float
    final_answer: str | None


class CallResult(_Row):
    result: str
    """The call's output, or ``error: ...``."""
    subagent_state: str | None = None
    subagent_branch: str | None = None


class RedoneCall(_Row):
    """A call `rewind redo` ran again: its result on each side."""

    step_index: int
    tool_call_id: str
    tool_name: str
    a: CallResult
    b: CallResult


class PipelineCallPair(_Row):
    """A pipeline's call as each branch made it after the fork point, aligned by its place in
    the code (position, label and repair attempt), not by step number: the answers side by side."""

    position: int
    label: str
    kind: str
    attempt: int = 0
    a: str | None = None
    """The answer on branch a (the model's text, the tool's output or ``error: ...``); None: not made there."""
    b: str | None = None
    a_step: int | None = None
    b_step: int | None = None
    a_prompt: str | None = None
    """A model call's system prompt on branch a (a fork's `--prompt LABEL=TEXT` changes it)."""
    b_prompt: str | None = None
    a_model: str | None = None
    """The model that answered on branch a (a fork's `--model LABEL=M` changes it)."""
    b_model: str | None = None


class BranchDiff(_Row):
    run_id: str
    fork_point: ForkPoint | None
    """The last checkpoint both lineages share; None when they share none."""
    a: BranchSide
    b: BranchSide
    same_final_answer: bool
    """Plain equality: two branches that both ended without an answer count as the same."""
    redone: list[RedoneCall] = []
    """Calls one branch ran again in place of the other's (`rewind redo`), results side by side."""
    calls: list[PipelineCallPair] = []
    """A pipeline run's calls after the fork point, aligned by call (empty for the agent loop)."""


def _check(lineage: Sequence[AgentCheckpoint], name: str, *, rolled_back: bool = False) -> None:
    if not lineage:
        raise LineageError(f"the lineage of {name!r} is empty; pass its checkpoints from step 0 to its head")
    for i, cp in enumerate(lineage):
        if cp.status == "invalidated" and not rolled_back:
            raise LineageError(f"checkpoint {cp.checkpoint_id} in the lineage of {name!r} is invalidated; "
                               "leave rolled-back checkpoints out of lineages")
        if i and cp.parent_id != lineage[i - 1].checkpoint_id:
            raise LineageError(f"checkpoint {cp.checkpoint_id} in the lineage of {name!r} has parent "
                               f"{cp.parent_id}, not the checkpoint before it ({lineage[i - 1].checkpoint_id}); "
                               "pass a lineage in step order, following parent links")


def _fork_indexes(a: Sequence[AgentCheckpoint], b: Sequence[AgentCheckpoint]) -> tuple[int, int] | None:
    in_b = {cp.checkpoint_id: i for i, cp in enumerate(b)}
    for i in range(len(a) - 1, -1, -1):
        if a[i].checkpoint_id in in_b:
            return i, in_b[a[i].checkpoint_id]
    return None


def fork_point(lineage_a: Sequence[AgentCheckpoint], lineage_b: Sequence[AgentCheckpoint]) -> AgentCheckpoint | None:
    """The last checkpoint both lineages share (same checkpoint_id), or None."""
    _check(lineage_a, "lineage_a")
    _check(lineage_b, "lineage_b")
    found = _fork_indexes(lineage_a, lineage_b)
    return None if found is None else lineage_a[found[0]]


def _text(content: Any) -> str | None:
    """A message's content as text; OpenAI content parts are joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _arguments(tool_input: dict[str, Any]) -> str:
    if set(tool_input) == {"_unparsed_arguments"}:  # the model sent arguments that were not JSON
        text = str(tool_input["_unparsed_arguments"])
    else:
        text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, sort_keys=True)}" for k, v in tool_input.items())
    return _shorten(" ".join(text.split()), ARGUMENTS_CHARS)


def _side(name: str, lineage: Sequence[AgentCheckpoint], start: int, base: AgentCheckpoint | None) -> BranchSide:
    """``lineage[start:]`` is what the branch did after ``base`` (its fork point, or nothing)."""
    head, after = lineage[-1], lineage[start:]
    # The step of each tool call: the step that added the assistant message naming its id, or
    # (a pipeline's call, which no model message names) the step that recorded it.
    call_steps: dict[str, int] = {}
    recorded: dict[str, int] = {}
    seen = len(base.messages) if base else 0
    kept = len(base.tool_call_cache) if base else 0
    for cp in after:
        for m in cp.messages[seen if seen <= len(cp.messages) else 0:]:
            if m.get("role") == "assistant":
                for call in m.get("tool_calls") or []:
                    if isinstance(call, dict) and isinstance(call.get("id"), str):
                        call_steps.setdefault(call["id"], cp.step_index)
        for r in cp.tool_call_cache[kept if kept <= len(cp.tool_call_cache) else 0:]:
            if r.tool_call_id:
                recorded.setdefault(r.tool_call_id, cp.step_index)
        seen, kept = len(cp.messages), len(cp.tool_call_cache)
    call_steps = {**recorded, **call_steps}
    records = head.tool_call_cache[len(base.tool_call_cache) if base else 0:]
    calls = [ToolCallRow(step_index=call_steps.get(r.tool_call_id or ""), tool_name=r.tool_name,
                         arguments=_arguments(r.tool_input), served_from_cache=r.served_from_cache,
                         error=r.error, side_effects=r.side_effects, decision=decision_text(r.approval),
                         reused=r.reused is not None, subagent=(r.subagent or {}).get("state"),
                         kept=r.answered_from is not None, dry_run=r.dry_run,
                         mcp_policy=list((r.mcp or {}).get("policy") or [])) for r in records]
    # A pipeline has no one system prompt (each call names its own: `calls` shows them).
    pipeline = any(code_kind(cp.pipeline) == "pipeline" for cp in lineage)
    system = None if pipeline else next((m for m in head.messages if m.get("role") == "system"), None)
    last = next((m for m in reversed(head.messages) if m.get("role") == "assistant"), None)
    answer = None
    if head.status == "completed" and last is not None and not last.get("tool_calls"):
        answer = _text(last.get("content"))
    def spent(field: str) -> Any:  # totals are cumulative along a lineage
        return getattr(head, field) - (getattr(base, field) if base else 0)

    return BranchSide(
        name=name, head_checkpoint_id=head.checkpoint_id, head_status=head.status, model=head.model,
        system_prompt=_text(system.get("content")) if system else None,
        steps=[StepRow(step_index=cp.step_index, step_label=cp.step_label, status=cp.status,
                       checkpoint_id=cp.checkpoint_id) for cp in after],
        tool_calls=calls,
        tool_calls_executed=sum(not (c.served_from_cache or c.reused or c.kept or c.dry_run or _rejected(c))
                                for c in calls),
        tool_calls_from_cache=sum(c.served_from_cache for c in calls),
        tool_calls_reused=sum(c.reused for c in calls),
        tool_calls_rejected=sum(_rejected(c) for c in calls),
        tool_calls_dry_run=sum(c.dry_run for c in calls),
        tool_errors=sum(c.error is not None for c in calls),
        tokens=Tokens(total=spent("llm_tokens_used"), prompt=spent("prompt_tokens"),
                      completion=spent("completion_tokens")),
        cost_usd=round(spent("llm_cost_usd"), 10),  # 0.0012, not 0.0012000000000000001
        tokens_in_all=Tokens(total=head.llm_tokens_used, prompt=head.prompt_tokens, completion=head.completion_tokens),
        cost_usd_in_all=head.llm_cost_usd,
        final_answer=answer,
    )


def _rejected(c: ToolCallRow) -> bool:
    return (c.decision or "").startswith("rejected")


def diff_branches(run_id: str, name_a: str, lineage_a: Sequence[AgentCheckpoint],
                  name_b: str, lineage_b: Sequence[AgentCheckpoint], *, rolled_back: Sequence[str] = ()) -> BranchDiff:
    """What each branch did after the last checkpoint they share (everything, if none).

    `rolled_back`: names of lineages that may hold invalidated checkpoints (a
    revision a rollback replaced, named as `main.r0`, `main.r1`, ...)."""
    for name, lineage in ((name_a, lineage_a), (name_b, lineage_b)):
        _check(lineage, name, rolled_back=name in rolled_back)
        stray = next((cp for cp in lineage if cp.run_id != run_id), None)
        if stray is not None:
            raise LineageError(f"checkpoint {stray.checkpoint_id} in the lineage of {name!r} is not of run {run_id!r}")
    i, j = _fork_indexes(lineage_a, lineage_b) or (-1, -1)
    base = lineage_a[i] if i >= 0 else None
    a, b = _side(name_a, lineage_a, i + 1, base), _side(name_b, lineage_b, j + 1, base)
    return BranchDiff(
        run_id=run_id,
        fork_point=None if base is None else ForkPoint(
            checkpoint_id=base.checkpoint_id, step_index=base.step_index, step_label=base.step_label),
        a=a, b=b, same_final_answer=a.final_answer == b.final_answer,
        redone=_redone(lineage_a[i + 1:], lineage_b[j + 1:]),
        calls=_pipeline_calls(lineage_a[i:], lineage_b[j:]) or _graph_nodes(lineage_a[i:], lineage_b[j:]),
    )


class _CallMade(NamedTuple):
    label: str
    kind: str
    answer: str
    step: int
    prompt: str | None  # a model call's system prompt
    model: str | None  # a model call's model


def _call_answers(since: Sequence[AgentCheckpoint]) -> dict[tuple[int, int], _CallMade]:
    """(position, attempt) -> the calls of a pipeline branch after the fork point (`since[0]`): an
    llm step's last message is its answer, a tool or agent step's last record its result."""
    found: dict[tuple[int, int], _CallMade] = {}
    for before, cp in zip(since, since[1:]):
        call = cp.pipeline
        if code_kind(call) != "pipeline":
            continue
        prompt = model = None
        if call.get("kind") == "llm":
            last = cp.messages[-1] if cp.messages else {}
            answer = _text(last.get("content")) or json.dumps(last.get("tool_calls") or [], sort_keys=True)
            # The messages this call sent are the ones its step added (the checkpoint holds every call's).
            system = next((m for m in cp.messages[len(before.messages):] if m.get("role") == "system"), None)
            prompt, model = (_text(system.get("content")) if system else None), cp.model
        else:
            answer = _result(cp.tool_call_cache[-1]).result if cp.tool_call_cache else ""
        found[(int(call.get("position", 0)), int(call.get("attempt", 0)))] = _CallMade(
            str(call.get("label", "")), str(call.get("kind", "")), answer, cp.step_index, prompt, model)
    return found


def _pipeline_calls(since_a: Sequence[AgentCheckpoint], since_b: Sequence[AgentCheckpoint]) -> list[PipelineCallPair]:
    """The calls both branches made after their fork point (`since_a[0]`, `since_b[0]`), aligned."""
    a, b = _call_answers(since_a), _call_answers(since_b)
    pairs = []
    for key in sorted(set(a) | set(b)):
        one, other = a.get(key), b.get(key)
        first = one or other
        assert first is not None
        pairs.append(PipelineCallPair(
            position=key[0], attempt=key[1], label=first.label, kind=first.kind,
            a=one.answer if one else None, b=other.answer if other else None,
            a_step=one.step if one else None, b_step=other.step if other else None,
            a_prompt=one.prompt if one else None, b_prompt=other.prompt if other else None,
            a_model=one.model if one else None, b_model=other.model if other else None))
    return pairs


def _node_updates(line: Sequence[AgentCheckpoint]) -> dict[tuple[str, int], tuple[int, str, int]]:
    """(node, n-th time it ran) -> (super-step, what it wrote, step) of a graph branch's steps after
    its first checkpoint (the fork point): the channels it changed and the messages it added."""
    found: dict[tuple[str, int], tuple[int, str, int]] = {}
    seen: dict[str, int] = {}
    for before, cp in zip(line, line[1:]):
        step = cp.pipeline
        if not isinstance(step, dict) or "superstep" not in step:
            continue
        changed = {k: v for k, v in cp.agent_variables.items() if before.agent_variables.get(k, object()) != v}
        added = [_text(m.get("content")) or "" for m in cp.messages[len(before.messages):]]
        wrote = json.dumps(changed, sort_keys=True) if changed else ""
        if added:
            wrote = (wrote + " " if wrote else "") + "messages: " + " / ".join(added)
        label = cp.step_label
        seen[label] = seen.get(label, 0) + 1
        found[(label, seen[label])] = (int(step["superstep"]), wrote or "(no change)", cp.step_index)
    return found


def _graph_nodes(line_a: Sequence[AgentCheckpoint], line_b: Sequence[AgentCheckpoint]) -> list[PipelineCallPair]:
    """A graph run's branches after the fork point, node by node (a node's n-th run on one branch
    beside its n-th run on the other): what each wrote."""
    a, b = _node_updates(line_a), _node_updates(line_b)
    order = sorted(set(a) | set(b), key=lambda k: ((a.get(k) or b[k])[0], k))
    return [PipelineCallPair(position=(a.get(k) or b[k])[0], label=k[0], kind="node", attempt=0,
                             a=a[k][1] if k in a else None, b=b[k][1] if k in b else None,
                             a_step=a[k][2] if k in a else None, b_step=b[k][2] if k in b else None)
            for k in order]


def _result(r: Any) -> CallResult:
    sub = r.subagent or {}
    text = f"error: {r.error}" if r.error is not None else (
        r.tool_output if isinstance(r.tool_output, str) else json.dumps(r.tool_output, ensure_ascii=False, sort_keys=True))
    return CallResult(result=text, subagent_state=sub.get("state"), subagent_branch=sub.get("branch_id"))


def _redone(after_a: Sequence[AgentCheckpoint], after_b: Sequence[AgentCheckpoint]) -> list[RedoneCall]:
    """Calls one side ran again (`redo_of`) where the other has the original: same step, same call id."""
    def own_records(after: Sequence[AgentCheckpoint]) -> dict[tuple[int, str], Any]:
        found: dict[tuple[int, str], Any] = {}
        previous = None
        for cp in after:
            start = len(previous.tool_call_cache) if previous is not None else 0
            if cp.parent_id is not None and previous is None:
                start = None  # the first step after the fork point: its parent's records come first
            for r in (cp.tool_call_cache if start is None else cp.tool_call_cache[start:]):
                found.setdefault((cp.step_index, r.tool_call_id or ""), r)
            previous = cp
        return found

    a, b = own_records(after_a), own_records(after_b)
    pairs = []
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        if ra.redo_of is None and rb.redo_of is None:
            continue
        pairs.append(RedoneCall(step_index=key[0], tool_call_id=key[1], tool_name=rb.tool_name,
                                a=_result(ra), b=_result(rb)))
    return pairs


def diff_json(d: BranchDiff) -> dict[str, Any]:
    """The diff as plain JSON data."""
    return d.model_dump(mode="json")


def _listed(rows: list[str]) -> list[str]:
    if not rows:
        return ["(none)"]
    if len(rows) > MAX_ROWS:
        return [*rows[: MAX_ROWS - 1], f"… {len(rows) - MAX_ROWS + 1} more"]
    return rows


def _call_line(c: ToolCallRow, cell: int) -> str:
    tags = "".join(f" [{t}]" for t, on in (("cache", c.served_from_cache), ("error", c.error is not None),
                                          ("reused", c.reused), ("kept", c.kept),
                                          (f"sub-agent {c.subagent}", c.subagent is not None),
                                          ("dry run", c.dry_run),
                                          ("side effects", c.side_effects and not (c.served_from_cache or c.reused
                                                                                   or c.dry_run)),
                                          (c.decision or "", c.decision is not None)) if on)
    prefix = f"{c.step_index if c.step_index is not None else '?':<3}"
    return prefix + _shorten(f"{c.tool_name}({c.arguments})", max(cell - len(prefix) - len(tags), 4)) + tags


def _mcp_reasons(calls: list[ToolCallRow], cell: int) -> list[str]:
    """Each MCP tool's decisions once: `fs__edit_file: sent once (idempotentHint false)`."""
    lines: list[str] = []
    for c in calls:
        for policy in c.mcp_policy:
            decided, _, said = policy.partition(": ")
            line = _shorten(f"{c.tool_name}: {decided} ({said.split(': ')[0]})" if said else f"{c.tool_name}: {decided}", cell)
            if line not in lines:
                lines.append(line)
    return lines


def _wrapped(text: str, cell: int, most: int = ANSWER_LINES) -> list[str]:
    lines = textwrap.wrap(" ".join(text.split()), cell) or [""]
    if len(lines) > most:
        lines = [*lines[: most - 1], _shorten(lines[most - 1] + " …", cell)]
    return lines


def first_difference(a: str, b: str) -> int:
    """The index of the first character where `a` and `b` differ (len of the shorter if one
    is the other's beginning; len(a) if they are equal)."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def aligned_pair(a: str, b: str, cell: int, most: int = ANSWER_LINES) -> tuple[list[str], list[str]]:
    """Two texts wrapped side by side; when their first difference would fall past what
    `most` lines show, both start a little before it ("… " marks the cut), so the part
    that differs is what the rows show."""
    a, b = " ".join(a.split()), " ".join(b.split())
    at = first_difference(a, b)
    if a != b and at > cell * (most - 1) // 2:
        # One line of what both share as context, cut at a word boundary.
        start = max(a.rfind(" ", 0, max(at - cell // 2, 0)) + 1, 0)
        a, b = "… " + a[start:], "… " + b[start:]
    return _wrapped(a, cell, most), _wrapped(b, cell, most)


def diff_text(d: BranchDiff, width: int = 100) -> str:
    """Both branches side by side in `width` columns (the terminal's: `rewind diff`); ``≠`` in
    the gutter marks rows that differ; texts that differ are shown from their first difference."""
    if width < 60:
        raise ValueError(f"width {width} is too narrow for two columns; use 60 or more")
    label, gutter = 14, 3
    cell = (width - label - gutter) // 2
    fp = d.fork_point
    where = (f"step {fp.step_index} ({fp.step_label}) {fp.checkpoint_id}"
             if fp else "none (the branches share no checkpoint; both counted from step 0)")
    lines = [_shorten(f"diff of run {d.run_id}: {d.a.name} vs {d.b.name}", width),
             _shorten(f"fork point: {where}", width)]

    def row(name: str, get: Callable[[BranchSide], list[str]], differ: bool = False) -> None:
        left, right = get(d.a), get(d.b)
        for i in range(max(len(left), len(right))):
            mark = " ≠ " if differ and i == 0 else " | "
            l_cell = _shorten(left[i], cell) if i < len(left) else ""
            r_cell = _shorten(right[i], cell) if i < len(right) else ""
            lines.append(f"{name if i == 0 else '':<{label}}{l_cell:<{cell}}{mark}{r_cell}".rstrip())

    def pair(name: str, a: str, b: str, most: int) -> None:
        left, right = aligned_pair(a, b, cell, most)
        for i in range(max(len(left), len(right))):
            mark = " ≠ " if a != b and i == 0 else " | "
            lines.append(f"{name if i == 0 else '':<{label}}{(left[i] if i < len(left) else ''):<{cell}}{mark}"
                         f"{right[i] if i < len(right) else ''}".rstrip())

    row("", lambda s: [s.name])
    # The head without the run id the first line names: `main:3 (completed)`.
    row("head", (lambda s: [f"{s.head_checkpoint_id.removeprefix(d.run_id + ':')} ({s.head_status})"]),
        d.a.head_status != d.b.head_status)
    row("model", (lambda s: [s.model or "-"]), d.a.model != d.b.model)
    if not any(c.kind != "node" for c in d.calls):  # a pipeline's prompts are its calls' own: shown with each call
        pair("system prompt", d.a.system_prompt or "-", d.b.system_prompt or "-", 3)
    row("steps taken", (lambda s: _listed([f"{r.step_index:<3}{r.step_label}" + (
        "" if r.status == "completed" else f" [{r.status}]") for r in s.steps])))
    row("tool calls", (lambda s: _listed([_call_line(c, cell) for c in s.tool_calls])))
    row("", (lambda s: [f"{s.tool_calls_executed} run, {s.tool_calls_from_cache} cached, "
                              f"{s.tool_errors} failed"
                              + (f", {s.tool_calls_reused} reused" if s.tool_calls_reused else "")
                              + (f", {s.tool_calls_rejected} rejected" if s.tool_calls_rejected else "")
                              + (f", {s.tool_calls_dry_run} dry run" if s.tool_calls_dry_run else "")]))
    if any(c.mcp_policy for side in (d.a, d.b) for c in side.tool_calls):
        row("why (mcp)", (lambda s: _listed(_mcp_reasons(s.tool_calls, cell))))
    # Spent after the fork point; "in all" is what `rewind tree` shows at each head (from step 0).
    lines.append(_shorten(f"spent after the fork point (step {fp.step_index}); \"in all\" counts from step 0, "
                          "as `rewind tree` does" if fp else "spent from step 0, as `rewind tree` counts",
                          width))
    row("tokens", (lambda s: [f"{s.tokens.total} ({s.tokens.prompt} in / {s.tokens.completion} out)"]))
    row("cost", (lambda s: [usd(s.cost_usd)]))
    if fp:
        row("in all", (lambda s: [f"{s.tokens_in_all.total} tokens, {usd(s.cost_usd_in_all)}"]))
    for redone in d.redone:
        lines.append(_shorten(f"redone call {redone.tool_call_id} ({redone.tool_name}) of step {redone.step_index}:", width))
        left, right = _wrapped(redone.a.result, cell), _wrapped(redone.b.result, cell)
        for k in range(max(len(left), len(right))):
            mark = " ≠ " if k == 0 and redone.a.result != redone.b.result else " | "
            lines.append(f"{'' if k else 'result':<{label}}{(left[k] if k < len(left) else ''):<{cell}}{mark}"
                         f"{right[k] if k < len(right) else ''}".rstrip())
    for call in d.calls:
        name = call.label + (f" r{call.attempt}" if call.attempt else "")
        what = "super-step" if call.kind == "node" else "call"
        lines.append(_shorten(f"{what} {call.position} {name} ({call.kind}): step "
                              f"{call.a_step if call.a_step is not None else '-'} | "
                              f"{call.b_step if call.b_step is not None else '-'}", width))
        # What a fork changed for this call by its label (`--prompt LABEL=`, `--model LABEL=`), where it did.
        if call.a is not None and call.b is not None and call.a_model != call.b_model:
            pair("model", call.a_model or "-", call.b_model or "-", 2)
        if call.a is not None and call.b is not None and call.a_prompt != call.b_prompt:
            pair("prompt", call.a_prompt or "-", call.b_prompt or "-", 3)
        pair("", call.a if call.a is not None else "(not made)", call.b if call.b is not None else "(not made)", 3)
    if d.a.final_answer is not None and d.b.final_answer is not None:
        pair("final answer", d.a.final_answer, d.b.final_answer, ANSWER_LINES)
    else:
        row("final answer", (lambda s: _wrapped(s.final_answer, cell) if s.final_answer is not None
                                  else [f"(none: head {s.head_status})"]), not d.same_final_answer)
    return "\n".join(lines)


async def diff(store: "CheckpointStore", run_id: str, branch_a: str, branch_b: str) -> BranchDiff:
    """Compare two branches of a run as stored (the API behind `rewind diff`)."""
    from checkpoint_bridge.checkpoints.lineage import load_lineage

    from checkpoint_bridge.checkpoints.lineage import is_revision_name

    return diff_branches(
        run_id, branch_a, await load_lineage(store, run_id, branch_a),
        branch_b, await load_lineage(store, run_id, branch_b),
        rolled_back=[name for name in (branch_a, branch_b) if is_revision_name(name)],
    )
