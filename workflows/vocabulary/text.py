"""Text that can be stored: no lone surrogates.

JSON's \\ud800 escapes let a model response or a tool's output carry a lone
UTF-16 surrogate into a Python str. Such a string cannot be encoded as UTF-8,
so a checkpoint holding it could never be written (the mirror would retry
forever). Every string entering a run passes through `scrub_surrogates`,
which replaces lone surrogates with U+FFFD. (In a Python str every surrogate
code point is a lone one: json decodes proper pairs to one code point.)
"""

from __future__ import annotations

import math
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub_text(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def scrub_surrogates(value: Any) -> Any:
    """The same JSON value with lone surrogates replaced, in keys and strings alike."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_surrogates(v) for v in value]
    return value


def usd(value: float) -> str:
    """Dollars as a person reads them: "$0.0000001", "$0.012345", "$3.5"; never 1e-07.

    Tiny budgets are real (a test run of a cheap model costs millionths of a
    dollar), so small amounts keep two significant digits past their zeros.
    """
    if value == 0:
        return "$0"
    digits = max(6, 2 - math.floor(math.log10(abs(value))))
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return f"${text}"
