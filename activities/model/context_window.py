"""Fit an agent's message history into a model's context window.

The transcript keeps every message; what is built here is only the *view*
sent to the model on one call. Pure functions: no Temporal, no I/O (beyond
the encoding loaded once by `activities.model.tokens`), so the workflow can call
them directly and get the same answer on replay.

The chat API rejects a history whose tool calls and tool replies do not pair
up (400, which retrying cannot fix), so nothing here ever separates an
assistant `tool_calls` message from its replies; `check_pairing` states the
rule and the tests run it on every output.

Typical use::

    result = compress_messages(history, model=m, budget_tokens=window - max_output - tools)
    send(result.messages); record(result.actions)   # rebuild_view(history, actions) == the view

The model activity also runs `check_pairing` on every view it sends, so a
conversation that breaks the rule fails with the reason instead of a 400.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from activities.model.tokens import REPLY_PRIMING_TOKENS, content_text, encoding_for_model, message_tokens

__all__ = [
    "CompressionResult",
    "check_pairing",
    "compact_actions",
    "compress_messages",
    "rebuild_view",
    "turn_boundary",
]

Message = dict[str, Any]

TRUNCATION_MARKER = "… [truncated by Rewind: {before} → {after} chars]"
OMITTED_NOTE = "[Rewind: {count} earlier messages omitted to fit the context window]"


@dataclass
class CompressionResult:
    messages: list[Message]
    """The view to send: the input itself when it already fits."""
    compressed: bool
    """False when the input fitted and was returned unchanged."""
    tokens_before: int
    """Estimated prompt tokens of the input (see activities.model.tokens)."""
    tokens_after: int
    """Estimated prompt tokens of `messages`."""
    actions: list[dict[str, Any]] = field(default_factory=list)
    """What was done, with indices into the input; `rebuild_view` replays it."""
    over_budget: bool = False
    """True when even the messages that are always kept exceed the budget."""


def compress_messages(
    messages: list[Message],
    *,
    model: str,
    budget_tokens: int,
    keep_last: int = 6,
    tool_result_chars: int = 400,
) -> CompressionResult:
    """The view of `messages` that fits `budget_tokens`, or the closest one that keeps the rules.

    Never changed: system and user messages, and the last `keep_last` messages
    (widened to start on a turn boundary). Older tool results are shortened
    first, oldest first; then older assistant turns are dropped, oldest first,
    each with all its tool replies, and one system note says how many went.
    The budget should leave room for the reply and the tool schemas, which
    are not counted here. Never raises for being over budget: see `over_budget`.
    """
    encoding = encoding_for_model(model)
    counts = [message_tokens(m, encoding) for m in messages]
    before = REPLY_PRIMING_TOKENS + sum(counts)
    if before <= budget_tokens:
        return CompressionResult(messages, False, before, before)

    def note_cost(count: int) -> int:
        return message_tokens(_note(count), encoding) if count else 0

    view: list[Message | None] = list(messages)  # None: dropped
    total, actions = before, []
    start = turn_boundary(messages, len(messages) - keep_last if keep_last > 0 else len(messages))

    for i in range(start):  # step 1: shorten old tool results, oldest first
        if total <= budget_tokens:
            break
        if messages[i].get("role") != "tool":
            continue
        text = content_text(messages[i].get("content"))
        short = _truncate(text, tool_result_chars)
        if len(short) >= len(text):
            continue
        view[i] = {**messages[i], "content": short}
        cost = message_tokens(view[i], encoding)
        total, counts[i] = total - counts[i] + cost, cost
        actions.append({"index": i, "action": "truncated_tool_result",
                        "from_chars": len(text), "to_chars": tool_result_chars})

    omitted = 0
    for turn in _droppable_turns(messages, start):  # step 2: drop old turns, oldest first
        if total + note_cost(omitted) <= budget_tokens:
            break
        for j in turn:
            view[j] = None
            total -= counts[j]
        omitted += len(turn)
        actions.append({"index": turn[0], "action": "dropped_turn", "messages": len(turn)})

    out = [m for m in view if m is not None]
    # The note is optional: left out when it alone would break the budget.
    if omitted and total + note_cost(omitted) <= budget_tokens:
        _insert_note(out, omitted)
        actions.append({"action": "inserted_note", "omitted": omitted})
    after = REPLY_PRIMING_TOKENS + sum(message_tokens(m, encoding) for m in out)
    return CompressionResult(out, True, before, after, actions, over_budget=after > budget_tokens)


def rebuild_view(messages: list[Message], actions: list[dict[str, Any]]) -> list[Message]:
    """Replay `CompressionResult.actions` on the same input: the view the model was sent."""
    view: list[Message | None] = list(messages)
    for act in actions:
        kind, i = act["action"], act.get("index", 0)
        if kind == "truncated_tool_result":
            text = content_text(messages[i].get("content"))
            view[i] = {**messages[i], "content": _truncate(text, act["to_chars"])}
        elif kind == "dropped_turn":
            view[i:i + act["messages"]] = [None] * act["messages"]
        elif kind == "truncated_tool_results":  # compact form, see compact_actions
            for j in range(act["from_index"], act["to_index"] + 1):
                text = content_text(messages[j].get("content"))
                if messages[j].get("role") == "tool" and len(text) > act["to_chars"]:
                    view[j] = {**messages[j], "content": _truncate(text, act["to_chars"])}
        elif kind == "dropped_messages":  # compact form
            view[act["from_index"]:act["to_index"] + 1] = [None] * (act["to_index"] + 1 - act["from_index"])
    out = [m for m in view if m is not None]
    for act in actions:
        if act["action"] == "inserted_note":
            _insert_note(out, act["omitted"])
    return out


def compact_actions(messages: list[Message], actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same actions in O(1) entries per kind, when that rebuilds the same view.

    Compression touches more old messages as a run grows; recording every
    touched index at every step would make history and checkpoints grow with
    the square of the run's length. Runs of truncations become one range
    ("every tool result in it longer than N"), runs of dropped turns one slice.
    """
    truncated = [a for a in actions if a["action"] == "truncated_tool_result"]
    dropped = [a for a in actions if a["action"] == "dropped_turn"]
    compact = [a for a in actions if a["action"] not in ("truncated_tool_result", "dropped_turn")]
    if truncated and len({a["to_chars"] for a in truncated}) == 1:
        compact.insert(0, {"action": "truncated_tool_results", "from_index": min(a["index"] for a in truncated),
                           "to_index": max(a["index"] for a in truncated), "to_chars": truncated[0]["to_chars"],
                           "count": len(truncated)})
    elif truncated:
        compact[:0] = truncated
    if dropped:
        first, last = min(a["index"] for a in dropped), max(a["index"] + a["messages"] - 1 for a in dropped)
        if sum(a["messages"] for a in dropped) == last - first + 1:
            compact.insert(len(compact) - sum(1 for a in compact if a["action"] == "inserted_note"),
                           {"action": "dropped_messages", "from_index": first, "to_index": last, "turns": len(dropped)})
        else:
            compact[:0] = dropped
    return compact if rebuild_view(messages, compact) == rebuild_view(messages, actions) else actions




def turn_boundary(messages: list[Message], index: int) -> int:
    """The nearest index at or before `index` where a turn starts (never a tool reply)."""
    index = max(0, min(index, len(messages)))
    while 0 < index < len(messages) and messages[index].get("role") == "tool":
        index -= 1
    return index


def check_pairing(messages: list[Message]) -> list[str]:
    """Violations of the chat API's tool-call pairing rules; empty means valid.

    Every id in an assistant message's `tool_calls` is answered by exactly one
    tool message before the next non-tool message; a tool message answers a
    pending call; call ids are unique in the conversation.
    """
    problems: list[str] = []
    seen: set[str] = set()
    pending: list[str] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id in pending:
                pending.remove(call_id)
            else:
                problems.append(f"messages[{i}]: tool reply {call_id!r} answers no pending call")
            continue
        if pending:
            problems.append(f"messages[{i}]: calls {pending} of the assistant message before it have no reply")
            pending = []
        for call in (msg.get("tool_calls") or []) if role == "assistant" else []:
            call_id = call.get("id") if isinstance(call, dict) else None
            if not isinstance(call_id, str) or not call_id or call_id in seen:
                problems.append(f"messages[{i}]: tool call id {call_id!r} is missing or not unique")
                continue
            seen.add(call_id)
            pending.append(call_id)
    if pending:
        problems.append(f"end of messages: calls {pending} have no reply")
    return problems






# ---------------------------------------------------------------- helpers


def _truncate(text: str, keep: int) -> str:
    return text[:keep] + TRUNCATION_MARKER.format(before=len(text), after=keep)


def _note(count: int) -> Message:
    return {"role": "system", "content": OMITTED_NOTE.format(count=count)}


def _insert_note(view: list[Message], count: int) -> None:
    # Right after the first system message: a system message there is legal
    # wherever the conversation goes on, and it reads as context, not as a turn.
    first = next((i for i, m in enumerate(view) if m.get("role") == "system"), -1)
    view.insert(first + 1, _note(count))


def _droppable_turns(messages: list[Message], end: int) -> list[list[int]]:
    """Indices of the assistant turns before `end`, oldest first; a turn is
    an assistant message plus the tool replies that directly follow it."""
    turns, i = [], 0
    while i < end:
        if messages[i].get("role") != "assistant":
            i += 1
            continue
        j = i + 1
        if messages[i].get("tool_calls"):
            while j < end and messages[j].get("role") == "tool":
                j += 1
        turns.append(list(range(i, j)))
        i = j
    return turns
