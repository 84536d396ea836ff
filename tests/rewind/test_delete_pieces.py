"""Pieces of `rewind delete` / `rewind gc` that need no server: durations, and finding
every payload of a history event (the references to the payload store hide in any of them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent

from rewind.erasure import parse_duration
from rewind.temporal.history_refs import _owner, _payloads_in, _reference
from workflows.vocabulary.errors import UsageError


@pytest.mark.parametrize(("text", "expected"), [
    ("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("90m", timedelta(minutes=90)),
    ("1s", timedelta(seconds=1)), (" 1.5h ", timedelta(minutes=90)),
])
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d", "3w", "-1d", "0s", "1h30m", "1e3s", "soon"])
def test_bad_durations_name_the_option_and_the_forms(text: str) -> None:
    with pytest.raises(UsageError, match=r"--older-than .*(30d, 12h, 90m or 45s|more than 0)"):
        parse_duration(text)


def _payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=text.encode())


def test_every_payload_of_an_event_is_found_wherever_it_sits() -> None:
    event = HistoryEvent(event_id=1)
    started = event.workflow_execution_started_event_attributes
    started.input.payloads.append(_payload('{"run_id": "r1"}'))
    started.memo.fields["task"].CopyFrom(_payload('"memo"'))
    started.header.fields["trace"].CopyFrom(_payload('"header"'))
    started.continued_failure.application_failure_info.details.payloads.append(_payload('"failure detail"'))
    found = sorted(p.data.decode() for p in _payloads_in(event))
    assert found == ['"failure detail"', '"header"', '"memo"', '{"run_id": "r1"}']


def test_the_owner_comes_from_the_input_and_a_reference_is_recognised() -> None:
    assert _owner(b'{"run_id": "r1", "task": "x"}') == "r1"
    assert _owner(b'[{"run_id": "r2", "tool_name": "t"}]') == "r2"  # a compensation's requests
    assert _owner(b'"just text"') is None and _owner(None) is None and _owner(b"{bad") is None
    ref = Payload(metadata={"encoding": b"json/protobuf", "messageType": b"temporal.api.sdk.v1.ExternalStorageReference"},
                  data=b'{"driverName": "rewind.local", "claimData": {"sha256": "' + b"ab" * 32 + b'"}}')
    parsed = _reference(ref)
    assert parsed is not None and parsed.driver_name == "rewind.local" and parsed.claim_data["sha256"] == "ab" * 32
    assert _reference(_payload('{"driverName": "x"}')) is None
