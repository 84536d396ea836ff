"""Canonical JSON and tool-result cache keys.

Workflow code imports this module, so it must stay pure standard library and
deterministic: the same value gives the same string on every machine, Python
version and process (no dependence on dict insertion order or on set
iteration order, which varies with hash randomisation).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "cache_key"]


def _sorted_set(values: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:
        # Mixed element types (e.g. {1, "a"}) cannot be compared; ordering by
        # each element's own canonical form is still total and deterministic.
        return sorted(values, key=canonical_json)


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return _sorted_set(value)
    raise TypeError(
        f"{type(value).__name__} value {value!r:.80} is not plain JSON; "
        "convert it to str, int, float, bool, None, list or dict first"
    )


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` as canonical JSON: sorted keys, no whitespace, UTF-8 text.

    Sets and frozensets become sorted lists. NaN and infinities are refused
    (they are not JSON), as is any other non-JSON type: ``TypeError`` /
    ``ValueError`` naming the value.
    """
    return json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_default,
    )


def cache_key(tool: str, args: Any) -> str:
    """Key of a read-only tool call: sha256 hex of ``{"tool": tool, "input": args}``.

    Two calls with the same tool and the same arguments, whatever their key
    order, share a key. Callers strip volatile arguments (request ids, clocks)
    before calling this if such values must not split the cache.
    """
    text = canonical_json({"tool": tool, "input": args})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
