"""Argument types of the command line (one-line errors naming the value and the rule),
and the help texts many commands share."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any, Callable

from workflows.vocabulary.errors import UsageError
from workflows.vocabulary.ids import echo


def at_least(minimum: float, kind: Callable[[str], Any], what: str, *, strictly: bool = False) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not a finite number")
        if strictly and not value > minimum:
            raise argparse.ArgumentTypeError(f"{text} must be more than {minimum:g}")
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{echo(text, 30)} is not a finite number")
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum:g}")
        return value
    return parse


# Help texts of arguments many commands take alike.
RUN_HELP = "the run's id (as `rewind start` printed it)"
BRANCH_HELP = "the branch (default main; a fork's name; after a rollback, its newest revision)"
WAIT_HELP = ("wait for the run to end (live progress on a terminal); exit 1 if it fails, 3 if it pauses for its "
             "budget or is cancelled")


STEPS = at_least(1, int, "a whole number")


COUNT = at_least(0, int, "a whole number")


TOKENS = at_least(0, int, "a whole number", strictly=True)


USD = at_least(0, float, "a number of USD", strictly=True)


SECONDS = at_least(0, float, "a number of seconds", strictly=True)


# workflows.vocabulary.contracts.SIDE_EFFECT_MODES, spelled out: `rewind --help` imports no pydantic model
# (a test checks the two agree).
SIDE_EFFECT_MODES = ("run", "reuse", "dry-run")


def pipeline_arguments(text: str) -> dict[str, Any]:
    """`--input`: a JSON object, or `@FILE` holding one."""
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {echo(path, 80)}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{echo(text, 40)} is not JSON ({exc}); give a JSON object of the "
                                         "pipeline's arguments, or @FILE") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"is a JSON {type(value).__name__}; give a JSON object of the pipeline's "
                                         'arguments ({"name": value, ...})')
    return value


def task_text(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; say what the agent should do")
    return text


def parse_set(pairs: list[str] | None, texts: list[str] | None = None) -> dict[str, Any]:
    """`--set KEY=VALUE` (JSON, or text when it does not start like JSON) and
    `--set-text KEY=TEXT` (always the text as given)."""
    from rewind.variables import variable_value

    out: dict[str, Any] = {}
    for flag, items in (("--set", pairs), ("--set-text", texts)):
        for pair in items or []:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise UsageError(f"{flag} {echo(pair)} is not key=value")
            out[key] = value if flag == "--set-text" else variable_value(
                key, value, flag=flag, literal_hint=f"give literal text with --set-text {key}=TEXT")
    return out
