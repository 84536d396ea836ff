"""The view a model call sends, fitted to the model's context window, at a step's cost.

`compress_messages` counts the tokens of the whole conversation on every call,
in a worker thread (a long conversation must not hold the event loop). Most
calls fit as they are, and a conversation is a chain: the call of step k sends
what step k-1 sent plus a few new messages. So this module remembers the
token count of each transcript head it has seen (a head is the digest of the
whole conversation, so the count is a function of it) and counts only the new
messages, on the event loop, when they are small: no thread hand-off and no
work that grows with the conversation. A call that does not fit, a head this
worker has not seen, or large new messages take the full path, unchanged.

The answer is the one `compress_messages` gives: the token counts are the
same per-message counts (activities.model.tokens), added up.
"""

from __future__ import annotations

import asyncio
from typing import Any

from activities.model.context_budget import message_budget
from activities.model.context_window import CompressionResult, compress_messages
from activities.model.tokens import REPLY_PRIMING_TOKENS, encoding_for_model, message_tokens
from checkpoint_bridge.checkpoints.lru import LRU

# New messages counted on the event loop at most this many characters of content
# (~0.5 ms of tokenizing); larger ones are counted in a worker thread, as before.
INLINE_CHARS = 16 * 1024


class PromptFitter:
    def __init__(self, size: int = 4096) -> None:
        self._tokens: LRU[int] = LRU(size)  # (model, transcript head) -> tokens of its messages
        self._budgets: LRU[int] = LRU(256)  # (model, tools digest) -> message budget

    def budget(self, model: str, tools: list[dict[str, Any]], tools_ref: str | None, override: int | None) -> int:
        """`message_budget`, once per model and tool set (their digest names them)."""
        if override is not None or tools_ref is None:
            return message_budget(model, tools, override)
        key = f"{model}\n{tools_ref}"
        found = self._budgets.get(key)
        if found is None:
            found = message_budget(model, tools, None)
            self._budgets.put(key, found)
        return found

    async def fit(
        self, messages: list[dict[str, Any]], *, model: str, budget_tokens: int, keep_last: int,
        tool_result_chars: int, base_head: str | None, base_len: int, head: str | None,
    ) -> CompressionResult:
        """`compress_messages(messages, ...)`, where `messages` are the conversation at
        `base_head` (its first `base_len`) and the new messages after it, `head` the
        conversation's new head (None: not stored, nothing remembered)."""
        counted = self._count_inline(messages, model, base_head, base_len)
        if counted is not None and REPLY_PRIMING_TOKENS + counted <= budget_tokens:
            fitted = CompressionResult(messages, False, REPLY_PRIMING_TOKENS + counted, REPLY_PRIMING_TOKENS + counted)
        else:
            # Tokenizing a long conversation is CPU work: keep it off the event loop.
            fitted = await asyncio.to_thread(
                compress_messages, messages, model=model, budget_tokens=budget_tokens,
                keep_last=keep_last, tool_result_chars=tool_result_chars,
            )
        if head is not None:
            self._tokens.put(f"{model}\n{head}", fitted.tokens_before - REPLY_PRIMING_TOKENS)
        return fitted

    def _count_inline(self, messages: list[dict[str, Any]], model: str, base_head: str | None,
                      base_len: int) -> int | None:
        """The tokens of `messages` without the reply priming, when the base's are known and
        the new messages are small; None otherwise."""
        base = 0 if base_head is None and base_len == 0 else (
            self._tokens.get(f"{model}\n{base_head}") if base_head is not None else None)
        if base is None:
            return None
        new = messages[base_len:]
        size = 0
        for message in new:
            content = message.get("content") if isinstance(message, dict) else None
            if content is not None and not isinstance(content, str):
                return None  # parts (images, lists): counted the long way
            size += len(content or "")
            for call in message.get("tool_calls") or []:  # the model's arguments are counted too
                fn = call.get("function") if isinstance(call, dict) else None
                size += len(str(fn.get("arguments") or "")) if isinstance(fn, dict) else INLINE_CHARS + 1
        if size > INLINE_CHARS:
            return None
        encoding = encoding_for_model(model)
        return base + sum(message_tokens(m, encoding) for m in new)
