"""Which call of a pipeline's code a step is, as ids Temporal checks on replay.

Each `ctx` call gets an activity id made of its position (the order in which
the code made its calls), its kind, its label and a digest of what it asked
(messages, model, tools, output schema; or a tool's arguments). Temporal
compares a replayed command's activity id with the one in history, so code
that changed under a run (another call, or other arguments, at a recorded
position) is caught at the first call that differs instead of being answered
with the recorded call's result. `explain_code_change` turns Temporal's
nondeterminism message into one line naming both calls.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from workflows.vocabulary.canonical import canonical_json

DIGEST_CHARS = 12
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.#@+-]")
_LABEL_CHARS = 64
# Temporal's words for two activity ids that differ on replay (sdk-core's activity state machine).
_MISMATCH = re.compile(r"Activity id of scheduled event '([^']*)' does not match activity id of activity "
                       r"command '([^']*)'")


def call_digest(kind: str, label: str, request: Any) -> str:
    """sha256 of the call's canonical JSON: kind, label and what it asked."""
    return hashlib.sha256(canonical_json({"kind": kind, "label": label, "request": request}).encode()).hexdigest()


def call_activity_id(call: Any) -> str:
    """`POSITION:KIND:LABEL:DIGEST` (and `:rN` for a structured output's Nth repair)."""
    label = _LABEL_UNSAFE.sub("_", call.label)[:_LABEL_CHARS]
    base = f"{call.position}:{call.kind}:{label}:{call.digest[:DIGEST_CHARS]}"
    return base if not call.attempt else f"{base}:r{call.attempt}"


def parse_activity_id(activity_id: str) -> dict[str, Any] | None:
    """The parts of a pipeline call's activity id, or None for any other id."""
    parts = activity_id.split(":")
    if len(parts) not in (4, 5) or not parts[0].isdigit():
        return None
    out: dict[str, Any] = {"position": int(parts[0]), "kind": parts[1], "label": parts[2], "digest": parts[3]}
    if len(parts) == 5:
        out["attempt"] = int(parts[4].removeprefix("r") or 0)
    return out


def describe_call(parts: dict[str, Any]) -> str:
    return f"{parts['kind']} call {parts['label']!r} (arguments {parts['digest']})"


def changed_call(message: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the recorded call, the code's call) Temporal's nondeterminism message names, or None."""
    found = _MISMATCH.search(message)
    if found is None:
        return None
    recorded, now = parse_activity_id(found.group(1)), parse_activity_id(found.group(2))
    if recorded is None or now is None:
        return None
    return recorded, now


def explain_code_change(message: str, run_id: str, fork_step: int | None = None) -> str | None:
    """One line for a pipeline run stopped because its code changed, or None when the
    message is not about a pipeline call. `fork_step`: the last step before the call."""
    found = changed_call(message)
    if found is None:
        return None
    recorded, now = found
    return code_change_line(recorded, now, run_id, fork_step)


def code_change_line(recorded: dict[str, Any], now: dict[str, Any], run_id: str, fork_step: int | None) -> str:
    """The line for code that asks, at a recorded position, another call than the record holds."""
    where = (f"`rewind fork {run_id} --step {fork_step} --branch NAME` continues from the last step before it"
             if fork_step is not None else
             f"`rewind fork {run_id} --step K --branch NAME` with K a step before call {recorded['position']} "
             f"(`rewind tree {run_id}` lists them) continues from there")
    if (recorded["kind"], recorded["label"]) == (now["kind"], now["label"]):
        # The same call with other arguments: new code, or (the usual cause in a graph run) a value
        # the code read outside the run that is not what it was when the call was recorded.
        return (f"call {recorded['position']} ({recorded['kind']} call {recorded['label']!r}) asked other arguments "
                f"({now['digest']}) on replay than the run recorded ({recorded['digest']}): the code changed under "
                "the run, or what the call sends came from outside the run and changed since (a database, a file, "
                "the clock, a global); a graph node that reads such things runs as one activity when "
                f"rewind_node_options declares it {{'durability': 'node'}} (node {recorded['label']!r} or the one "
                f"that wrote what it sends); {where} on the code as it is now, every call before it answered from "
                "the record")
    return (f"the pipeline's code changed under the run: call {recorded['position']} is "
            f"{describe_call(recorded)} in the record, and the code now makes {describe_call(now)}; {where} "
            "on the new code, every call before it answered from the record")
