"""A Rewind run's events as LangGraph's stream parts (the Agent Server API's stream modes).

    graph.update                  -> updates    {node: its update}
    checkpoint (a step stored)    -> values     the graph's channels after the step (read from it)
                                     debug      {"type": "checkpoint", ...}; checkpoints
    model.delta                   -> messages-tuple  [AI message chunk, metadata]
                                     messages   messages/metadata, messages/partial (the text so far)
    model.completed               -> messages   messages/complete; messages-tuple: the whole
                                                message when the provider did not stream it
    tool messages of an update    -> messages-tuple / messages: each as one part
    custom (get_stream_writer())  -> custom     the value
    approval.waiting (interrupt)  -> updates    {"__interrupt__": [...]}; values with
                                                `__interrupt__`; the run's stream ends there
    run.failed                    -> error      {"error": ..., "message": reason}

Every part made from a durable event carries that event's cursor as its SSE id, on the last
part made from it, so a client that reconnects with its Last-Event-ID gets the parts of
every later durable event once. Parts of live events (a model's deltas) carry none: after a
reconnect, a call still in flight is streamed again from its current attempt's start (its
metadata says which attempt).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.events import RunEvent

MODES = ("values", "updates", "messages", "messages-tuple", "custom", "debug", "checkpoints", "tasks")
# LangGraph's modes no Rewind event maps onto: LangChain's callback events, the tools' and
# subgraphs' lifecycle.
UNSUPPORTED = {"events": "LangChain's callback events are not recorded by Rewind (the updates, messages and "
                         "debug modes carry what happened)",
               "tools": "tool lifecycle events are not a stream mode here (updates and messages carry each "
                        "tool's answer; `rewind watch` shows tool.started / tool.completed)",
               "lifecycle": "subgraph lifecycle events are not a stream mode here"}

Part = tuple[str, Any, "str | None"]  # (SSE event, data, SSE id)


def modes_of(stream_mode: Any) -> list[str]:
    """The modes a request asks for ('values' unless told), checked (UsageError, a 400, names the fault)."""
    asked = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode or ["values"])
    for mode in asked:
        if mode in UNSUPPORTED:
            raise UsageError(f"stream_mode {mode!r} is not supported: {UNSUPPORTED[mode]}")
        if mode not in MODES:
            raise UsageError(f"stream_mode {mode!r} is not a stream mode; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(asked))


@dataclass
class Translator:
    """One API run's stream: RunEvents in, stream parts out (`parts`), until the run's end or an
    interrupt() it waits on (`ended`)."""

    run_id: str
    thread_id: str
    modes: list[str]
    subgraphs: bool
    values_at: Callable[[str], Awaitable[dict[str, Any]]]  # a checkpoint id -> the graph's channels there
    ended: str | None = None  # "success", "error", "interrupted" once the run's stream is over
    error: str | None = None
    _calls: dict[str, dict[str, Any]] = field(default_factory=dict)  # call key -> node, text, streamed, attempt
    _last_values: dict[str, Any] | None = None
    _interrupts: list[dict[str, Any]] = field(default_factory=list)

    def opening(self) -> list[Part]:
        return [("metadata", {"run_id": self.run_id, "attempt": 1}, None)]

    async def parts(self, event: RunEvent) -> list[Part]:
        out: list[Part] = []
        kind, data = event.type, event.data
        ns = self._ns(event, data)
        if ns is not None and not self.subgraphs and kind not in ("run.completed", "run.failed", "run.cancelled"):
            return self._with_id(out, event)  # a subgraph's or sub-agent's part, not asked for
        suffix = "|" + "|".join(ns) if ns else ""
        if kind == "model.started":
            self._calls[str(data.get("call"))] = {"node": data.get("label"), "text": "", "streamed": False,
                                                  "attempt": data.get("attempt", 1)}
        elif kind == "model.delta":
            out += self._delta(data, suffix)
        elif kind == "model.completed":
            out += self._completed(data, suffix)
        elif kind == "graph.update":
            node, update = data.get("node"), data.get("update")
            if "updates" in self.modes:
                out.append(("updates" + suffix, {node: update}, None))
            if "tasks" in self.modes or "debug" in self.modes:
                result = [[k, v] for k, v in update.items()] if isinstance(update, dict) else []
                payload = {"id": f"{event.id}", "name": node, "error": None, "result": result, "interrupts": []}
                if "tasks" in self.modes:
                    out.append(("tasks" + suffix, payload, None))
                if "debug" in self.modes:
                    out.append(("debug" + suffix, {"step": event.step, "timestamp": event.time.isoformat(),
                                                   "type": "task_result", "payload": payload}, None))
            out += self._tool_messages(node, update, suffix)
        elif kind == "custom" and "custom" in self.modes:
            out.append(("custom" + suffix, data.get("data"), None))
        elif kind == "checkpoint":
            out += await self._checkpoint(event, data, suffix)
        elif kind == "approval.waiting" and data.get("tool") == "interrupt":
            arguments = data.get("arguments") or {}
            self._interrupts = [{"value": arguments.get("value"), "id": data.get("tool_call_id")}]
            if "updates" in self.modes:
                out.append(("updates", {"__interrupt__": self._interrupts}, None))
            if "values" in self.modes:
                out.append(("values", {**(self._last_values or {}), "__interrupt__": self._interrupts}, None))
            self.ended = "success"
        elif kind == "run.failed":
            self.error = str(data.get("reason") or "the run failed")
            out.append(("error", {"error": "RunFailed", "message": self.error}, None))
            self.ended = "error"
        elif kind == "run.completed":
            self.ended = "success"
        elif kind == "run.cancelled":
            self.ended = "interrupted"
        return self._with_id(out, event)

    @staticmethod
    def _ns(event: RunEvent, data: dict[str, Any]) -> list[str] | None:
        """The part's namespace: a sub-agent's path, or a subgraph's node (`SUB/NODE`); None: the root."""
        if event.path:
            return list(event.path)
        node = data.get("node") if event.type == "graph.update" else None
        if isinstance(node, str) and "/" in node:
            return node.split("/")[:-1]
        return None

    def _with_id(self, out: list[Part], event: RunEvent) -> list[Part]:
        if event.cursor is None or not out:
            return out
        name, data, _ = out[-1]
        return [*out[:-1], (name, data, event.cursor)]

    def _meta(self, call: dict[str, Any]) -> dict[str, Any]:
        return {"langgraph_node": call.get("node"), "thread_id": self.thread_id, "run_id": self.run_id,
                "rewind_attempt": call.get("attempt", 1)}

    def _delta(self, data: dict[str, Any], suffix: str) -> list[Part]:
        key = str(data.get("call"))
        call = self._calls.setdefault(key, {"node": None, "text": "", "streamed": False, "attempt": 1})
        if data.get("attempt") and data.get("attempt") != call.get("attempt"):
            call.update(text="", attempt=data.get("attempt"))  # a new attempt writes from the start
        chunk: dict[str, Any] = {"type": "AIMessageChunk", "id": self._message_id(key), "content": "",
                                 "additional_kwargs": {}, "response_metadata": {}, "tool_call_chunks": []}
        if "text" in data:
            chunk["content"] = data["text"]
            call["text"] += data["text"]
        elif isinstance(data.get("tool_call"), dict):
            piece = data["tool_call"]
            chunk["tool_call_chunks"] = [{"name": piece.get("name"), "args": piece.get("arguments") or "",
                                          "id": piece.get("id"), "index": piece.get("index"),
                                          "type": "tool_call_chunk"}]
        call["streamed"] = True
        out: list[Part] = []
        if "messages-tuple" in self.modes:
            out.append(("messages" + suffix, [chunk, self._meta(call)], None))
        if "messages" in self.modes:
            if not call.get("announced"):
                call["announced"] = True
                out.append(("messages/metadata" + suffix, {chunk["id"]: {"metadata": self._meta(call)}}, None))
            out.append(("messages/partial" + suffix, [{**chunk, "type": "ai", "content": call["text"]}], None))
        return out

    def _completed(self, data: dict[str, Any], suffix: str) -> list[Part]:
        key = str(data.get("call"))
        call = self._calls.setdefault(key, {"node": data.get("node"), "text": "", "streamed": False, "attempt": 1})
        call["node"] = call.get("node") or data.get("node")
        message = self._ai(data.get("message") or {}, key)
        out: list[Part] = []
        if "messages-tuple" in self.modes and not call.get("streamed"):
            out.append(("messages" + suffix, [message, self._meta(call)], None))
        if "messages" in self.modes:
            if not call.get("announced"):
                out.append(("messages/metadata" + suffix, {message["id"]: {"metadata": self._meta(call)}}, None))
            out.append(("messages/complete" + suffix, [message], None))
        call["done"] = True
        return out

    def _tool_messages(self, node: Any, update: Any, suffix: str) -> list[Part]:
        """A node's update that adds tool messages (a ToolNode's): each is a message of the stream,
        as LangGraph sends the messages a node returns without a model streaming them."""
        if not isinstance(update, dict) or not ({"messages", "messages-tuple"} & set(self.modes)):
            return []
        messages = update.get("messages")
        if not isinstance(messages, list):
            return []
        from rewind.serve.agent.state import lc_messages

        out: list[Part] = []
        tools = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
        for index, message in enumerate(lc_messages(tools, f"{self.run_id}-{node}") if tools else []):
            meta = {"langgraph_node": node, "thread_id": self.thread_id, "run_id": self.run_id}
            if "messages-tuple" in self.modes:
                out.append(("messages" + suffix, [message, meta], None))
            if "messages" in self.modes:
                out.append(("messages/complete" + suffix, [message], None))
        return out

    def _message_id(self, key: str) -> str:
        return f"run-{self.run_id}-{key}"

    def _ai(self, message: dict[str, Any], key: str) -> dict[str, Any]:
        from rewind.serve.agent.state import lc_messages

        converted = lc_messages([message], self.thread_id)[0]
        converted["id"] = self._message_id(key)
        return converted

    async def _checkpoint(self, event: RunEvent, data: dict[str, Any], suffix: str) -> list[Part]:
        if data.get("label") == "result" or not ({"values", "debug", "checkpoints"} & set(self.modes)):
            return []
        if data.get("status") == "failed":
            return []
        values = await self.values_at(str(data.get("checkpoint_id")))
        self._last_values = values
        out: list[Part] = []
        if "values" in self.modes:
            out.append(("values" + suffix, values, None))
        if {"debug", "checkpoints"} & set(self.modes):
            config = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": "",
                                       "checkpoint_id": data.get("checkpoint_id")}}
            payload = {"config": config, "parent_config": None, "values": values, "next": [], "tasks": [],
                       "metadata": {"source": "loop", "step": event.step, "rewind_label": data.get("label")}}
            if "checkpoints" in self.modes:
                out.append(("checkpoints" + suffix, payload, None))
            if "debug" in self.modes:
                out.append(("debug" + suffix, {"step": event.step, "timestamp": event.time.isoformat(),
                                               "type": "checkpoint", "payload": payload}, None))
        return out


__all__ = ["MODES", "Part", "Translator", "UNSUPPORTED", "modes_of"]
