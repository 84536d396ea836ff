"""Baseline (b) of the overhead benchmark: the agent loop as a bare Temporal workflow.

The same model call and the same tools as activities, and nothing else: no
mirror, no transcript store (the message list is passed whole to every model
call), no tool cache, no status bookkeeping, no heartbeats. Registered on its
own worker and task queue by `bench.b1_overhead`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

BARE_LLM = "bare_llm"
BARE_TOOL = "bare_tool"


@workflow.defn(name="BareAgentWorkflow")
class BareAgentWorkflow:
    @workflow.run
    async def run(self, inp: dict[str, Any]) -> int:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": inp["system_prompt"]},
            {"role": "user", "content": inp["task"]},
        ]
        step = 0
        while step < inp["max_steps"]:
            step += 1
            reply = await workflow.execute_activity(
                BARE_LLM, {"model": inp["model"], "messages": messages, "tools": inp["tools"]},
                start_to_close_timeout=timedelta(seconds=120),
            )
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            outputs = await asyncio.gather(*(
                workflow.execute_activity(BARE_TOOL, call, start_to_close_timeout=timedelta(seconds=60))
                for call in calls
            ))
            messages.extend({"role": "tool", "tool_call_id": c["id"], "content": o} for c, o in zip(calls, outputs))
        return step


class BareActivities:
    def __init__(self, base_url: str, registry: Any) -> None:
        import openai

        self._client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        self._registry = registry

    @activity.defn(name=BARE_LLM)
    async def bare_llm(self, request: dict[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": request["model"], "messages": request["messages"]}
        if request["tools"]:
            kwargs["tools"] = request["tools"]
        raw = await self._client.chat.completions.with_raw_response.create(**kwargs)
        message = raw.http_response.json()["choices"][0]["message"]
        return {k: v for k, v in message.items() if v is not None or k == "content"}

    @activity.defn(name=BARE_TOOL)
    async def bare_tool(self, call: dict[str, Any]) -> str:
        fn = call["function"]
        registered = self._registry.get(fn["name"])
        output = await registered.fn(**registered.validate(json.loads(fn["arguments"] or "{}")))
        return output if isinstance(output, str) else json.dumps(output)
