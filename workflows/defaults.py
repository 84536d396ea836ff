"""Defaults a run takes when nothing names them.

A module of constants without imports: the settings (rewind/settings/config.py) read
it on every CLI start, which must not pay for the pydantic contracts.
"""

from __future__ import annotations

DEFAULT_MODEL = "gpt-4o-mini"

__all__ = ["DEFAULT_MODEL"]
