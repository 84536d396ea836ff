"""Run, branch and checkpoint ids.

Ids become parts of storage keys (file paths, S3 keys), so they are checked
against a whitelist rather than a blacklist: 1-128 characters of
``[A-Za-z0-9._-]``, starting with a letter or digit, never containing ``..``.
That rules out path traversal (``../x``), absolute paths, separators,
percent-encoding tricks (``%2e%2e``) and control characters in one rule.

A checkpoint id is ``run:branch:step`` and derives only from those three
values, so mirroring the same run twice gives the same ids.
"""

from __future__ import annotations

import hashlib
import re

from workflows.vocabulary.errors import InvalidIdError

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_STEP_INDEX",
    "validate_id",
    "validate_step",
    "checkpoint_id",
    "parse_checkpoint_id",
    "short_id",
    "echo",
    "workflow_id_for",
    "subagent_branch",
    "parse_subagent_branch",
]

MAX_ID_LENGTH = 128
# Steps are stored as 8-digit, zero-padded names so that keys sort numerically.
MAX_STEP_INDEX = 99_999_999

_ID_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_ID_RULE = (
    f"1-{MAX_ID_LENGTH} characters from A-Z a-z 0-9 . _ -, "
    "starting with a letter or digit, without '..'"
)
# Canonical decimal only: "007" and "7" must not name two different checkpoints.
_STEP_TEXT = re.compile(r"0|[1-9][0-9]{0,7}")


def echo(value: object, limit: int = 60) -> str:
    """`value` as it may be quoted back in a message: repr, at most `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} characters)"


def _problem(value: str) -> str | None:
    if not value:
        return "it is empty"
    if len(value) > MAX_ID_LENGTH:
        return f"it is {len(value)} characters long"
    if not _ID_CHARS.fullmatch(value):
        bad = next(c for c in value if not _ID_CHARS.fullmatch(c))
        return f"it contains {bad!r}"
    if not value[0].isalnum():
        return f"it starts with {value[0]!r}"
    if ".." in value:
        return "it contains '..'"
    return None


def validate_id(kind: str, value: object) -> str:
    """Return ``value`` if it is a safe ``kind`` id ("run", "branch"); else raise.

    Raises ``InvalidIdError`` naming the kind, the value and the rule.
    """
    if not isinstance(value, str):
        raise InvalidIdError(
            f"{kind} id {echo(value)} is a {type(value).__name__}, not a string; use {_ID_RULE}"
        )
    problem = _problem(value)
    if problem is not None:
        raise InvalidIdError(f"{kind} id {echo(value)} is not allowed ({problem}); use {_ID_RULE}")
    return value


def validate_step(step_index: object) -> int:
    """Return ``step_index`` if it is an int in 0..MAX_STEP_INDEX; else raise InvalidIdError."""
    if isinstance(step_index, bool) or not isinstance(step_index, int):
        raise InvalidIdError(f"step index {step_index!r} is not an integer")
    if not 0 <= step_index <= MAX_STEP_INDEX:
        raise InvalidIdError(f"step index {step_index} is outside 0..{MAX_STEP_INDEX}")
    return step_index


def checkpoint_id(run_id: str, branch_id: str, step_index: int) -> str:
    """The id of step ``step_index`` of ``branch_id`` of ``run_id``: ``run:branch:step``."""
    validate_id("run", run_id)
    validate_id("branch", branch_id)
    validate_step(step_index)
    return f"{run_id}:{branch_id}:{step_index}"


def parse_checkpoint_id(cid: object) -> tuple[str, str, int]:
    """Split a checkpoint id into ``(run_id, branch_id, step_index)``, validating each part."""
    if not isinstance(cid, str):
        raise InvalidIdError(f"checkpoint id {echo(cid)} is not a string; expected RUN:BRANCH:STEP")
    parts = cid.split(":")
    if len(parts) != 3:
        raise InvalidIdError(
            f"checkpoint id {echo(cid)} is malformed; expected RUN:BRANCH:STEP, e.g. 'run-1:main:4'"
        )
    run_id, branch_id, step_text = parts
    validate_id("run", run_id)
    validate_id("branch", branch_id)
    if not _STEP_TEXT.fullmatch(step_text):
        raise InvalidIdError(
            f"checkpoint id {echo(cid)} has step {echo(step_text, 20)}; "
            f"expected a decimal number 0..{MAX_STEP_INDEX} without leading zeros"
        )
    return run_id, branch_id, int(step_text)


def short_id(cid: str) -> str:
    """A 10-hex-digit fingerprint of a checkpoint id, for compact display."""
    return hashlib.sha256(cid.encode("utf-8")).hexdigest()[:10]


def workflow_id_for(run_id: str, branch_id: str = "main") -> str:
    """The workflow id of one stored branch (`main`, `tech`, `main.r1`, ...) of a run."""
    return run_id if branch_id == "main" else f"{run_id}--{branch_id}"


# A sub-agent's run is a branch of its caller's run: `main.s3-call_1` is the run of
# tool call `call_1` of step 3 of `main` (nested: `main.s3-call_1.s2-call_0`). The
# call id loses every character ids do not allow, dots included, so the name never
# ends like a rollback revision (`.rN`); a name that would be too long ends in a digest.
_SUBAGENT_BRANCH = re.compile(r"^(?P<parent>.+)\.s(?P<step>0|[1-9][0-9]*)-(?P<call>[A-Za-z0-9_-]+)$")


def subagent_branch(parent_branch: str, step: int, tool_call_id: str) -> str:
    """The branch id of the sub-agent run that answers `tool_call_id` of `step` of `parent_branch`."""
    validate_id("branch", parent_branch)
    validate_step(step)
    call = re.sub(r"[^A-Za-z0-9_-]", "-", tool_call_id).strip("-") or "call"
    name = f"{parent_branch}.s{step}-{call}"
    if len(name) > MAX_ID_LENGTH:
        digest = hashlib.sha256(tool_call_id.encode("utf-8")).hexdigest()[:12]
        name = f"{parent_branch}.s{step}-{digest}"
    if len(name) > MAX_ID_LENGTH:
        raise InvalidIdError(
            f"sub-agents nest too deep for branch ids: {parent_branch!r} leaves no room for one more level "
            f"({MAX_ID_LENGTH} characters at most)"
        )
    return name


def parse_subagent_branch(branch_id: str) -> tuple[str, int, str] | None:
    """(caller's branch, step, call id as the name keeps it) of a sub-agent's branch; None for any other."""
    match = _SUBAGENT_BRANCH.match(branch_id)
    if match is None:
        return None
    return match["parent"], int(match["step"]), match["call"]
