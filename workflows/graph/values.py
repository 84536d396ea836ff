"""A node's input and update across the activity boundary, and their digests.

A node-level node's state goes to its activity and its update comes back through LangGraph's
own serializer (`JsonPlusSerializer`: messages, pydantic models, dataclasses, `Command`,
`Send`, sets ...), so LangGraph gets back the values it would have had in one process. Both
sides are Rewind's own worker, so every type the serializer names may be loaded again.
The digest of a value is over its JSON form with sorted keys and sorted sets, the same in
every process (a set's order is not: Python salts str hashes per process).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from workflows.vocabulary.errors import PipelineError

_serde: Any = None


def _serializer() -> Any:
    global _serde
    if _serde is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        _serde = JsonPlusSerializer(allowed_msgpack_modules=True)
    return _serde


def pack(value: Any, what: str) -> str:
    """`value` as text: `TYPE:BASE64` of LangGraph's serializer (raises PipelineError naming `what`)."""
    try:
        kind, data = _serializer().dumps_typed(value)
    except Exception as exc:  # noqa: BLE001 - the serializer's own error, said in one line
        raise PipelineError(f"{what} is not a value LangGraph's serializer can store ({type(exc).__name__}: {exc}); "
                            "keep the state to JSON values, messages, pydantic models and dataclasses") from None
    return f"{kind}:{base64.b64encode(data).decode()}"


def unpack(text: str) -> Any:
    kind, _, data = text.partition(":")
    return _serializer().loads_typed((kind, base64.b64decode(data)))


def plain(value: Any) -> Any:
    """`value` as JSON data with a stable order: messages as their dicts, models dumped, sets
    sorted (what JSON cannot hold becomes its type's name)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "model_dump"):
        try:
            return plain(value.model_dump(mode="json"))
        except Exception:  # noqa: BLE001 - a model that cannot dump itself: its type
            return type(value).__name__
    if hasattr(value, "__dataclass_fields__"):
        return {"__type__": type(value).__name__,
                **{k: plain(getattr(value, k, None)) for k in value.__dataclass_fields__}}
    return type(value).__name__


def digest(value: Any, *, message_ids: bool = True) -> str:
    """sha256 of `value`'s stable JSON form. `message_ids=False`: without the ids of its messages
    (add_messages gives a message without one a random uuid4, another on every replay)."""
    data = plain(value)
    if not message_ids:
        data = _without_message_ids(data)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _without_message_ids(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_message_ids(v) for v in value]
    if isinstance(value, dict):
        message = "content" in value and "type" in value
        return {k: _without_message_ids(v) for k, v in value.items() if not (message and k == "id")}
    return value


__all__ = ["pack", "unpack", "plain", "digest"]
