"""Key prefixes as ranges, for the backends that list with an ordered index (SQL, DynamoDB).

A ``LIKE 'prefix%'`` would treat the ``_`` that keys contain as a wildcard and
may skip the index; ``prefix <= key < upper`` is exact on a byte-ordered index,
because keys are ASCII (contract.check_key).
"""

from __future__ import annotations

__all__ = ["prefix_upper_bound"]


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix``; None for ``""`` (no bound)."""
    if not prefix:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
