"""Baseline (b) of the overhead benchmark: the agent loop as a bare Temporal workflow.

The same model call and the same tools as activities, and nothing else: no
mirror, no transcript store (the message list is passed whole to every model
call), no tool cache, no status bookkeeping, no heartbeats. Registered on its
own worker and task queue by `bench.b1_overhead`.

Three options serve as floors of other benchmarks. `noop_per_step` (the
concurrency benchmark's, bench.bare_worker): each step also starts a third
activity that does nothing with the step's new messages, where Rewind
mirrors the step; not awaited by the loop, one at a time, as Rewind's mirror
did. `noop_at_end` (the concurrency benchmark's, bench.bare_worker): one such
activity when the run ends, where Rewind writes its last checkpoint (every
other step's rides on the next model call). `messages_file` (the fork benchmark's): the conversation so far is a JSON
file that every model call reads before its new messages (a conversation
passed by reference, as Rewind's transcript). `held` (the long-run benchmark's):
the worker keeps each run's conversation in memory and every model call gets
only the messages new since the previous one, then posts the whole
conversation; the request grows with the run exactly as Rewind's, while
history holds each message about once (passed whole, a 500-step run of 2 KB
tool results would pass Temporal's 50 MB history limit). Not durable: a floor.
With `held`, `continue_as_new` continues the run as new on Rewind's rule.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

BARE_LLM = "bare_llm"
BARE_TOOL = "bare_tool"
BARE_NOOP = "bare_noop"
HISTORY_LIMIT_BYTES = 4 * 1024 * 1024  # AgentInput.history_limit_bytes's default


@workflow.defn(name="BareAgentWorkflow")
class BareAgentWorkflow:
    @workflow.run
    async def run(self, inp: dict[str, Any]) -> int:
        source = inp.get("messages_file")
        held = bool(inp.get("held"))
        resume = inp.get("resume") or {}  # held: where the run it continues left off
        held_len = resume.get("held_len", 0)  # held: how many messages the worker holds
        messages: list[dict[str, Any]] = resume.get("unsent") or ([] if source else [
            {"role": "system", "content": inp["system_prompt"]},
            {"role": "user", "content": inp["task"]},
        ])
        step = resume.get("step", 0)
        noop: asyncio.Future[Any] | None = None
        while step < inp["max_steps"]:
            step += 1
            request = {"model": inp["model"], "messages": messages, "tools": inp["tools"], "messages_file": source,
                       "held_len": held_len if held else None}
            reply = await workflow.execute_activity(BARE_LLM, request, start_to_close_timeout=timedelta(seconds=120))
            if held:  # the worker holds them now
                held_len, messages = held_len + len(messages), []
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            outputs = await asyncio.gather(*(
                workflow.execute_activity(BARE_TOOL, call, start_to_close_timeout=timedelta(seconds=60))
                for call in calls
            ))
            new = [reply] + [{"role": "tool", "tool_call_id": c["id"], "content": o} for c, o in zip(calls, outputs)]
            messages.extend(new[1:])
            if inp.get("noop_per_step") and (noop is None or noop.done()):
                noop = asyncio.ensure_future(workflow.execute_activity(
                    BARE_NOOP, new, start_to_close_timeout=timedelta(seconds=60)))
            info = workflow.info()
            if held and inp.get("continue_as_new") and (
                    info.is_continue_as_new_suggested() or info.get_current_history_size() > HISTORY_LIMIT_BYTES):
                # Where Rewind's loop does, on the same rule (workflows/loop/agent.py): a long history
                # slows every workflow task down on the dev server.
                workflow.continue_as_new({**inp, "resume": {"step": step, "held_len": held_len, "unsent": messages}})
        if noop is not None:
            await noop
        if inp.get("noop_at_end"):
            await workflow.execute_activity(BARE_NOOP, messages[-1:], start_to_close_timeout=timedelta(seconds=60))
        return step


class BareActivities:
    def __init__(self, base_url: str, registry: Any) -> None:
        import openai

        self._client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
        self._registry = registry
        self._held: dict[str, list[dict[str, Any]]] = {}  # workflow id -> its conversation (`held`)

    @activity.defn(name=BARE_LLM)
    async def bare_llm(self, request: dict[str, Any]) -> dict[str, Any]:
        before = json.loads(Path(request["messages_file"]).read_bytes()) if request.get("messages_file") else []
        if request.get("held_len") is not None:
            # Cut back to what the workflow knows was held (a retried attempt appends once).
            conversation = self._held.setdefault(activity.info().workflow_id, [])
            del conversation[request["held_len"]:]
            conversation.extend(request["messages"])
            messages = conversation
        else:
            messages = before + request["messages"]
        kwargs: dict[str, Any] = {"model": request["model"], "messages": messages}
        if request["tools"]:
            kwargs["tools"] = request["tools"]
        # Posted as plain JSON, as Rewind's model call does (activities/model/llm.py): the client's
        # `create` would first walk every message through its TypedDict transform.
        data = await self._client.post("/chat/completions", body=kwargs, cast_to=object)
        message = data["choices"][0]["message"]
        return {k: v for k, v in message.items() if v is not None or k == "content"}

    @activity.defn(name=BARE_TOOL)
    async def bare_tool(self, call: dict[str, Any]) -> str:
        fn = call["function"]
        registered = self._registry.get(fn["name"])
        output = await registered.fn(**registered.validate(json.loads(fn["arguments"] or "{}")))
        return output if isinstance(output, str) else json.dumps(output)

    @activity.defn(name=BARE_NOOP)
    async def bare_noop(self, messages: list[dict[str, Any]]) -> None:
        """Takes the step's new messages and does nothing (where Rewind writes a checkpoint)."""
