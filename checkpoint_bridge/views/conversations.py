"""Runs as conversations: one per branch, in the OpenAI chat format with `tools`, the
shape fine-tuning and evaluation tools read (one JSON object per line):

    {"messages": [{"role": "system", ...}, {"role": "user", ...},
                  {"role": "assistant", "tool_calls": [...]}, {"role": "tool", "tool_call_id": ...}, ...],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}],
     "metadata": {"run_id", "branch_id", "checkpoint_id", "status", "state", "agent", "model", ...}}

A pipeline's branch strings its calls' conversations together (its input, each `ctx.llm`
call's messages and answer, its result): each model call is then a conversation of its own,
the messages its step added (its tools inferred). A LangGraph graph's branch is one
conversation, its messages channel, as an agent's is.

Each agent branch's conversation is its newest stored checkpoint's whole message list, loaded
with ``CheckpointStore.load`` (deltas and packs materialised, tool outputs stored by
reference put back): forks, a rollback's revisions and sub-agents' runs are branches of
their own; a branch a rollback cut keeps the steps it discarded (`metadata.status`
is then `invalidated`). Every assistant tool call is answered by a tool message: an
assistant turn whose calls were not all answered yet (a run waiting for an approval,
stopped mid-step) ends the conversation before it (`metadata.cut_unanswered`).

`tools` are the tools the branch's model was offered, as `tools_for` finds them (the CLI
reads them from the branch's history and the payload store: temporal/offered_tools.py);
when it cannot (Temporal no longer has the history, or is down), the tools the branch
called, their schemas inferred from the recorded arguments (`metadata.tools_inferred`).
Tool calls' `arguments` stay JSON strings, as the API sends them.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document.schema import code_kind
from workflows.vocabulary.ids import checkpoint_id, parse_subagent_branch

_KEEP = ("role", "content", "name", "tool_calls", "tool_call_id", "refusal")


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """The message with the fields the chat format has (content as text for a tool)."""
    out = {k: message[k] for k in _KEEP if k in message and message[k] is not None}
    if out.get("role") == "tool" and not isinstance(out.get("content"), str):
        out["content"] = json.dumps(out.get("content"), ensure_ascii=False, sort_keys=True)
    if out.get("role") == "assistant" and "content" not in out:
        out["content"] = None
    if "tool_calls" in out:
        calls = []
        for call in out["tool_calls"]:
            fn = dict(call.get("function") or {})
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {}, ensure_ascii=False, sort_keys=True)
            calls.append({"id": call.get("id"), "type": "function", "function": fn})
        out["tool_calls"] = calls
    return out


def paired(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The messages up to the first assistant turn whose tool calls are not all answered by
    the tool messages after it (and those messages), and how many messages were cut."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") == "assistant" and m.get("tool_calls"):
            wanted = {c.get("id") for c in m["tool_calls"]}
            j, answered = i + 1, []
            while j < len(messages) and messages[j].get("role") == "tool":
                answered.append(messages[j])
                j += 1
            if wanted != {t.get("tool_call_id") for t in answered}:
                return out, len(messages) - i
            out += [m, *answered]
            i = j
            continue
        if m.get("role") == "tool":  # a tool message with no call before it
            return out, len(messages) - i
        out.append(m)
        i += 1
    return out, 0


def _schema(values: list[Any]) -> dict[str, Any]:
    kinds = []
    for v in values:
        kind = ("boolean" if isinstance(v, bool) else "integer" if isinstance(v, int) else "number"
                if isinstance(v, float) else "string" if isinstance(v, str) else "array" if isinstance(v, list)
                else "object" if isinstance(v, dict) else "null")
        if kind not in kinds:
            kinds.append(kind)
    if kinds == ["integer", "number"] or kinds == ["number", "integer"]:
        kinds = ["number"]
    return {"type": kinds[0] if len(kinds) == 1 else kinds}


def inferred_tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A function definition per tool the conversation called, its parameters inferred from
    the arguments it was called with (required: those every call gave)."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            seen.setdefault(str(fn.get("name")), []).append(args if isinstance(args, dict) else {})
    tools = []
    for name, calls in seen.items():
        names = sorted({k for args in calls for k in args})
        tools.append({"type": "function", "function": {
            "name": name,
            "description": "",
            "parameters": {"type": "object",
                           "properties": {k: _schema([a[k] for a in calls if k in a]) for k in names},
                           "required": [k for k in names if all(k in a for a in calls)]},
        }})
    return tools


async def _is_pipeline(store: CheckpointStore, run_id: str, branch: str, steps: set[int]) -> bool:
    """Whether the branch's steps are a pipeline's calls (one of its steps names its call; a
    graph's super-steps name their graph, and its messages channel is one conversation)."""
    ends = await store.step_ends([checkpoint_id(run_id, branch, s) for s in sorted(steps)])
    return any(code_kind(end.fields.get("pipeline")) == "pipeline" for end in ends)


ToolsFor = Callable[[str, str], Awaitable["list[dict[str, Any]] | None"]]


async def _model_calls(store: CheckpointStore, run_id: str, branch: str, steps: set[int],
                       info: dict[str, Any]) -> list[dict[str, Any]]:
    """A pipeline branch's conversations: one per model call (`ctx.llm`), its own messages
    (the branch's transcript strings its calls' conversations together); tools inferred."""
    ends = await store.step_ends([checkpoint_id(run_id, branch, s) for s in sorted(steps)])
    out = []
    for end in ends:
        call = end.fields.get("pipeline")
        if not isinstance(call, dict) or call.get("kind") != "llm" or not end.fields.get("parent_id"):
            continue
        cid = checkpoint_id(run_id, branch, int(end.fields["step_index"]))
        doc, parent = await store.document(cid), await store.document(end.fields["parent_id"])
        messages, cut = paired([_message(m) for m in doc.get("messages", [])[len(parent.get("messages", [])):]])
        if not any(m.get("role") == "assistant" for m in messages):
            continue
        ledger = ((doc.get("ledger") or {}).get("step")) or {}
        out.append({"messages": messages, "tools": inferred_tools(messages), "metadata": {
            **info, "run_id": run_id, "branch_id": branch, "checkpoint_id": cid, "step": end.fields["step_index"],
            "label": end.fields.get("step_label"), "status": end.fields.get("status"), "model": end.fields.get("model"),
            "agent": call.get("pipeline") or info.get("agent"), "subagent": False,
            "total_tokens": int(ledger.get("total_tokens") or 0), "cost_usd": float(ledger.get("cost_usd") or 0.0),
            "cut_unanswered": cut, "tools_inferred": True,
        }})
    return out


async def conversations(store: CheckpointStore, run_id: str, info: dict[str, Any] | None = None,
                        tools_for: ToolsFor | None = None) -> list[dict[str, Any]]:
    """One conversation per branch of the run (creation order), and per model call of a
    pipeline's branch; `info` goes into each one's metadata (the run's state and agent, as
    `rewind runs` says them); `tools_for(run, branch)`: the tools the branch's model was
    offered, or None (then inferred)."""
    out = []
    for branch, (steps, _cutoff) in (await store.stored_steps(run_id)).items():
        if not steps:
            continue
        pipeline = ((info or {}).get("kind") == "pipeline" if (info or {}).get("kind") else
                    await _is_pipeline(store, run_id, branch, steps))
        if pipeline and parse_subagent_branch(branch) is None:  # a pipeline's ctx.agent runs the agent loop
            out += await _model_calls(store, run_id, branch, steps, info or {})
            continue
        cp = await store.load(checkpoint_id(run_id, branch, max(steps)))
        messages, cut = paired([_message(m) for m in cp.messages])
        if not any(m.get("role") == "assistant" for m in messages):
            continue  # no turn of the model yet (a run that never ran): nothing to learn from
        ledger = (cp.ledger or {}).get("total") or {}
        offered = await tools_for(run_id, branch) if tools_for is not None else None
        out.append({
            "messages": messages,
            "tools": offered if offered is not None else inferred_tools(messages),
            "metadata": {
                **(info or {}),
                "run_id": run_id, "branch_id": branch, "checkpoint_id": cp.checkpoint_id, "step": cp.step_index,
                "label": cp.step_label, "status": cp.status, "model": cp.model,
                "agent": (cp.agent or {}).get("name") or (info or {}).get("agent"),
                "subagent": parse_subagent_branch(branch) is not None,
                "total_tokens": int(ledger.get("total_tokens") or cp.llm_tokens_used),
                "cost_usd": float(ledger.get("cost_usd") or cp.llm_cost_usd),
                "cut_unanswered": cut, "tools_inferred": offered is None,
            },
        })
    return out


run_conversations = conversations  # the facade's name (`from rewind import run_conversations`)

__all__ = ["conversations", "run_conversations", "paired", "inferred_tools"]
