"""Where one late step's time goes in a long run: the per-call work that grows with the conversation.

Timed in isolation on the longest run's last two checkpoints, with the same
functions the worker calls: the model call's JSON body (every message goes
out on every call: the only part left that must grow with the run), the
context-window fit (token counts are remembered per message, so a call
counts only what is new), and the mirror's write of the step from what it
added (`save_step`), next to what the openai client's own request transform
would cost if the request went through it (Rewind posts the body as it is).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from activities.model.context_budget import message_budget
from activities.model.context_window import compress_messages
from checkpoint_bridge.stores import FileObjectStore
from checkpoint_bridge.document.schema import AgentCheckpoint, StepParts, checkpoint_to_dict
from checkpoint_bridge.checkpoints.store import CheckpointStore

REPEATS = 3


def _best(fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


async def _abest(fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def _parts(parent: AgentCheckpoint, child: AgentCheckpoint) -> StepParts:
    doc, base = checkpoint_to_dict(child), checkpoint_to_dict(parent)
    messages, tools, variables = doc.pop("messages"), doc.pop("tool_call_cache"), doc.pop("agent_variables")
    return StepParts(doc, messages[len(base["messages"]):], tools[len(base["tool_call_cache"]):], variables)


async def step_cost(parent: AgentCheckpoint, child: AgentCheckpoint, model: str, tools: list[dict[str, Any]]) -> dict[str, float]:
    """Milliseconds per call of each piece, at the size of `child` (best of a few)."""
    messages = child.messages
    out: dict[str, float] = {}
    body = {"model": model, "messages": messages, "tools": tools}
    out["model call: JSON body of the whole conversation"] = _best(lambda: json.dumps(body))
    budget = message_budget(model, tools, None)
    compress_messages(messages, model=model, budget_tokens=budget)  # as the previous call left the counts
    out["context window: compress_messages (counts remembered)"] = _best(
        lambda: compress_messages(messages, model=model, budget_tokens=budget))
    with tempfile.TemporaryDirectory() as tmp:
        async with CheckpointStore(FileObjectStore(Path(tmp))) as store:
            await store.save(parent.model_copy(update={"parent_id": None}))  # the parent, as a root
            parts = _parts(parent, child)
            times = []
            for _ in range(REPEATS):
                t = time.perf_counter()
                await store.save_step(parts)
                times.append(time.perf_counter() - t)
                # Remove it again (untimed) so the next save does the whole job, not the no-op path.
                await store.objects.delete_prefix(
                    f"runs/{child.run_id}/branches/{child.branch_id}/steps/{child.step_index:08d}")
            out["mirror: save_step (the step's delta, from what it added)"] = min(times) * 1000
    try:
        from openai._utils._transform import async_maybe_transform
        from openai.types.chat import completion_create_params

        params = completion_create_params.CompletionCreateParamsNonStreaming
        out["(not on Rewind's path) openai client's request transform"] = await _abest(
            lambda: async_maybe_transform(body, params))
    except ImportError:
        pass  # a private helper of the openai package; skip if it moved
    return out
