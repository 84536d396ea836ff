"""Where checkpoint objects live, relative to a store's root or prefix.

    runs/<run_id>/branches/<branch_id>/steps/<step:08d>.json
    runs/<run_id>/branches/<branch_id>/invalidations/<after_step:08d>.json
    runs/<run_id>/branches/<branch_id>/packs/<first:08d>-<last:08d>.json.gz   (copies: document/packs.py)

Keys are only ever built here, from validated ids, so no user string reaches
a file path or S3 key unchecked; the backends check every key once more
(``checkpoint_bridge.stores.contract.check_key``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from workflows.vocabulary.errors import InvalidIdError
from workflows.vocabulary.ids import validate_id, validate_step

__all__ = [
    "run_prefix",
    "branch_prefix",
    "step_key",
    "invalidation_key",
    "invalidation_prefix",
    "pack_key",
    "pack_prefix",
    "ParsedKey",
    "parse_key",
]

_KEY = re.compile(
    r"runs/(?P<run>[^/]+)/branches/(?P<branch>[^/]+)/"
    r"(?P<kind>steps|invalidations)/(?P<step>[0-9]{8})\.json"
)


def run_prefix(run_id: str) -> str:
    return f"runs/{validate_id('run', run_id)}/"


def branch_prefix(run_id: str, branch_id: str) -> str:
    return f"{run_prefix(run_id)}branches/{validate_id('branch', branch_id)}/"


def step_key(run_id: str, branch_id: str, step_index: int) -> str:
    return f"{branch_prefix(run_id, branch_id)}steps/{validate_step(step_index):08d}.json"


def invalidation_prefix(run_id: str, branch_id: str) -> str:
    return f"{branch_prefix(run_id, branch_id)}invalidations/"


def invalidation_key(run_id: str, branch_id: str, after_step: int) -> str:
    return f"{branch_prefix(run_id, branch_id)}invalidations/{validate_step(after_step):08d}.json"


def pack_prefix(run_id: str, branch_id: str) -> str:
    return f"{branch_prefix(run_id, branch_id)}packs/"


def pack_key(run_id: str, branch_id: str, first: int, last: int) -> str:
    return f"{pack_prefix(run_id, branch_id)}{validate_step(first):08d}-{validate_step(last):08d}.json.gz"


@dataclass(frozen=True)
class ParsedKey:
    kind: Literal["step", "invalidation"]
    run_id: str
    branch_id: str
    step_index: int


@functools.lru_cache(maxsize=4096)
def _valid_id(kind: str, value: str) -> str | None:
    """`value` if it is a valid id of `kind`: a run's listing names the same run and the
    same few branches on every key, so each is checked once."""
    try:
        return validate_id(kind, value)
    except InvalidIdError:
        return None


def parse_key(key: str) -> ParsedKey | None:
    """Decode a step or invalidation key; ``None`` for anything else found under a
    run prefix (packs, which are copies, and foreign files)."""
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    run_id, branch_id = _valid_id("run", match["run"]), _valid_id("branch", match["branch"])
    if run_id is None or branch_id is None:
        return None
    kind: Literal["step", "invalidation"] = "step" if match["kind"] == "steps" else "invalidation"
    return ParsedKey(kind, run_id, branch_id, int(match["step"]))
