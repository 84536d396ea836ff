"""Building realistic AgentCheckpoints for the store tests."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from typing import Any

from checkpoint_bridge.document.schema import AgentCheckpoint, ToolCallRecord
from workflows.vocabulary.ids import checkpoint_id

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=timezone.utc)


def text_of(size: int, seed: str) -> str:
    """Deterministic, non-repeating text of ``size`` characters (like a web page excerpt)."""
    out, counter = [], 0
    while sum(map(len, out)) < size:
        out.append(hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest() + " ")
        counter += 1
    return "".join(out)[:size]


def first_step(run_id: str = "run-1", branch_id: str = "main", step: int = 0, **fields: Any) -> AgentCheckpoint:
    fields.setdefault("messages", [
        {"role": "system", "content": "You are a careful research agent."},
        {"role": "user", "content": "Summarise the history of the bicycle."},
    ])
    fields.setdefault("agent_variables", {"topic": "bicycle"})
    fields.setdefault("step_label", "start")
    return AgentCheckpoint(
        checkpoint_id=checkpoint_id(run_id, branch_id, step),
        run_id=run_id,
        branch_id=branch_id,
        step_index=step,
        created_at=T0 + timedelta(seconds=step),
        **fields,
    )


def next_step(
    parent: AgentCheckpoint,
    *,
    branch_id: str | None = None,
    result_size: int = 120,
    record_output: str = "full",
    **changes: Any,
) -> AgentCheckpoint:
    """The step after ``parent``: one assistant tool call, its tool result, one tool record.

    ``record_output``: "full" stores the whole tool result in the record too;
    "summary" stores only its length (when results live only in the messages).
    """
    branch = branch_id or parent.branch_id
    step = parent.step_index + 1
    call_id = f"call_{branch}_{step}"
    args = {"query": f"bicycle history part {step}"}
    result = text_of(result_size, f"{parent.run_id}/{branch}/{step}")
    record = ToolCallRecord(
        tool_name="web_search",
        tool_input=args,
        tool_output=result if record_output == "full" else {"chars": len(result)},
        called_at=T0 + timedelta(seconds=step, milliseconds=500),
        duration_ms=420,
        tool_call_id=call_id,
    )
    messages = [*parent.messages,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "web_search", "arguments": f'{{"query": "{args["query"]}"}}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
    fields: dict[str, Any] = dict(
        checkpoint_id=checkpoint_id(parent.run_id, branch, step),
        run_id=parent.run_id,
        parent_id=parent.checkpoint_id,
        branch_id=branch,
        step_index=step,
        step_label=f"tool:web_search#{step}",
        messages=messages,
        agent_variables={**parent.agent_variables, "steps_done": step},
        tool_call_cache=[*parent.tool_call_cache, record],
        created_at=T0 + timedelta(seconds=step + 1),
        llm_tokens_used=parent.llm_tokens_used + 150,
        llm_cost_usd=round(parent.llm_cost_usd + 0.0003, 10),
        prompt_tokens=parent.prompt_tokens + 120,
        completion_tokens=parent.completion_tokens + 30,
        model="gpt-4o-mini",
    )
    fields.update(changes)
    return AgentCheckpoint(**fields)


def make_run(steps: int, run_id: str = "run-1", **kwargs: Any) -> list[AgentCheckpoint]:
    """``steps`` checkpoints 0..steps-1 of one linear run on "main"."""
    run = [first_step(run_id)]
    while len(run) < steps:
        run.append(next_step(run[-1], **kwargs))
    return run
