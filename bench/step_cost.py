"""Where one late step's time goes in a long run: the per-call work that grows with the conversation.

Timed in isolation on the longest run's last two checkpoints, with the same
functions the worker calls: the openai client's request preparation (it
walks every message against its TypedDict types before sending), the
context-window fit (token counting of the whole conversation), and the
mirror's load of the parent and save of the child.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from activities.context_budget import message_budget
from activities.context_window import compress_messages
from checkpoint_bridge.objects import FileObjectStore
from checkpoint_bridge.schema import AgentCheckpoint
from checkpoint_bridge.store import CheckpointStore

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


async def step_cost(parent: AgentCheckpoint, child: AgentCheckpoint, model: str, tools: list[dict[str, Any]]) -> dict[str, float]:
    """Milliseconds per call of each piece, at the size of `child` (best of a few)."""
    messages = child.messages
    out: dict[str, float] = {}
    try:
        from openai._utils._transform import async_maybe_transform
        from openai.types.chat import completion_create_params

        params = completion_create_params.CompletionCreateParamsNonStreaming
        body = {"model": model, "messages": messages, "tools": tools}
        out["openai client: request transform (walks every message)"] = await _abest(
            lambda: async_maybe_transform(body, params))
    except ImportError:
        pass  # a private helper of the openai package; skip if it moved
    budget = message_budget(model, tools, None)
    out["context window: compress_messages (token counts of every message)"] = _best(
        lambda: compress_messages(messages, model=model, budget_tokens=budget))
    with tempfile.TemporaryDirectory() as tmp:
        async with CheckpointStore(FileObjectStore(Path(tmp))) as store:
            await store.save(parent.model_copy(update={"parent_id": None}))  # a snapshot to diff against
            out["mirror: load the parent checkpoint (cached)"] = await _abest(lambda: store.load(parent.checkpoint_id))
            times = []
            for _ in range(REPEATS):
                t = time.perf_counter()
                await store.save(child)
                times.append(time.perf_counter() - t)
                # Remove it again (untimed) so the next save does the whole job, not the no-op path.
                await store.objects.delete_prefix(
                    f"runs/{child.run_id}/branches/{child.branch_id}/steps/{child.step_index:08d}")
            out["mirror: save the step's checkpoint (delta)"] = min(times) * 1000
    return out
