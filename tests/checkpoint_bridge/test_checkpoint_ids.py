"""Ids and storage keys."""

from __future__ import annotations

import hashlib
import re

import pytest

from checkpoint_bridge.document.layout import invalidation_key, parse_key, step_key
from checkpoint_bridge.stores.contract import check_key
from workflows.vocabulary.errors import InvalidIdError
from workflows.vocabulary.ids import (
    MAX_STEP_INDEX,
    checkpoint_id,
    echo,
    parse_checkpoint_id,
    short_id,
    validate_id,
)


@pytest.mark.parametrize("good", ["main", "run-1", "a", "R2.d2_x-y", "0", "x" * 128, "v1.2.3"])
def test_valid_ids(good: str) -> None:
    assert validate_id("run", good) == good


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("../x", "contains '/'"),
        (".x", "starts with '.'"),
        ("/abs", "contains '/'"),
        ("a/b", "contains '/'"),
        ("%2e%2e", "contains '%'"),
        ("a\x00b", r"contains '\\x00'"),
        ("\n", r"contains '\\n'"),
        ("", "it is empty"),
        ("x" * 129, "129 characters long"),
        ("a..b", "contains '..'"),
        ("-lead", "starts with '-'"),
        ("_lead", "starts with '_'"),
        ("ümlaut", "contains 'ü'"),
        ("a:b", "contains ':'"),
    ],
)
def test_invalid_ids_name_kind_value_and_rule(bad: str, reason: str) -> None:
    with pytest.raises(InvalidIdError) as caught:
        validate_id("branch", bad)
    message = str(caught.value)
    # The id is quoted back, shortened when long (a 5,000-character id is not echoed whole).
    assert message.startswith(f"branch id {echo(bad)}") and len(message) < 300
    assert re.search(reason, message)
    assert "1-128 characters from A-Z a-z 0-9 . _ -" in message


def test_non_string_ids_are_refused() -> None:
    with pytest.raises(InvalidIdError, match="run id 42 is a int"):
        validate_id("run", 42)


def test_checkpoint_ids_round_trip() -> None:
    cid = checkpoint_id("run-1", "alt", 17)
    assert cid == "run-1:alt:17"
    assert parse_checkpoint_id(cid) == ("run-1", "alt", 17)
    assert parse_checkpoint_id(f"r:main:{MAX_STEP_INDEX}") == ("r", "main", MAX_STEP_INDEX)


@pytest.mark.parametrize(
    "bad",
    ["run-1:main", "a:b:c:1", "run:main:-1", "run:main:01", "run:main:x", "run:main:",
     f"run:main:{MAX_STEP_INDEX + 1}", "../x:main:1", "run:a/b:1", "run:main:1\n", 5, None],
)
def test_malformed_checkpoint_ids(bad: object) -> None:
    with pytest.raises(InvalidIdError):
        parse_checkpoint_id(bad)


@pytest.mark.parametrize("step", [-1, MAX_STEP_INDEX + 1, True, 1.0])
def test_checkpoint_id_refuses_bad_steps(step: object) -> None:
    with pytest.raises(InvalidIdError, match="step index"):
        checkpoint_id("run", "main", step)  # type: ignore[arg-type]


def test_short_id() -> None:
    assert short_id("run-1:main:3") == hashlib.sha256(b"run-1:main:3").hexdigest()[:10]
    assert re.fullmatch(r"[0-9a-f]{10}", short_id("x:y:0"))
    assert short_id("run-1:main:3") != short_id("run-1:main:4")


def test_layout_keys_sort_by_step_and_parse_back() -> None:
    keys = [step_key("run-1", "main", s) for s in (10, 9, 100)]
    assert sorted(keys) == [step_key("run-1", "main", s) for s in (9, 10, 100)]
    assert keys[0] == "runs/run-1/branches/main/steps/00000010.json"
    parsed = parse_key(invalidation_key("run-1", "alt", 4))
    assert parsed is not None and (parsed.kind, parsed.run_id, parsed.branch_id, parsed.step_index) == (
        "invalidation", "run-1", "alt", 4)
    assert parse_key("runs/run-1/branches/main/steps/.tmp-abc") is None
    assert parse_key("runs/run-1/branches/main/notes.txt") is None


@pytest.mark.parametrize("key", ["a/../b", "/a", "a//b", "a/", "", ".a", "a/.b", "a\\b", "a b"])
def test_check_key_refuses_anything_but_safe_relative_keys(key: str) -> None:
    with pytest.raises(InvalidIdError):
        check_key(key)


def test_check_key_prefixes() -> None:
    assert check_key("", prefix=True) == ""
    assert check_key("runs/a/", prefix=True) == "runs/a/"
    with pytest.raises(InvalidIdError):
        check_key("../", prefix=True)
