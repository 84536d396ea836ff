"""Defaults a run takes when nothing names them.

A module of constants without imports: the settings (rewind/settings/config.py) read
it on every CLI start, which must not pay for the pydantic contracts.
"""

from __future__ import annotations

DEFAULT_MODEL = "gpt-4o-mini"
# A pipeline's steps are its calls: a budget of steps in the hundreds, not the loop's 50.
PIPELINE_MAX_STEPS = 1000

__all__ = ["DEFAULT_MODEL", "PIPELINE_MAX_STEPS"]
