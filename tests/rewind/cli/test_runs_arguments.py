"""`rewind runs`'s arguments: --since / --until read a duration back from now or a
time, and the states and default page the command offers are the listing's own."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

import pytest

from rewind.cli.commands.runs import DEFAULT_LIMIT, RUN_STATES, moment


def test_the_command_offers_the_listings_states_and_page() -> None:
    from checkpoint_bridge.views.runs import DEFAULT_LIMIT as listing_limit
    from checkpoint_bridge.views.runs import STATES

    assert RUN_STATES == STATES and DEFAULT_LIMIT == listing_limit


@pytest.mark.parametrize("text, back", [("45s", timedelta(seconds=45)), ("90m", timedelta(minutes=90)),
                                        ("1.5h", timedelta(hours=1.5)), ("7d", timedelta(days=7)),
                                        ("2w", timedelta(weeks=2))])
def test_a_duration_is_that_long_ago(text: str, back: timedelta) -> None:
    before = datetime.now(timezone.utc)
    found = moment(text)
    after = datetime.now(timezone.utc)
    assert before - back <= found <= after - back


def test_a_time_is_read_as_given_and_utc_without_a_zone() -> None:
    assert moment("2026-12-06T09:00:00Z") == datetime(2026, 12, 6, 9, tzinfo=timezone.utc)
    assert moment("2026-12-06 09:00") == datetime(2026, 12, 6, 9, tzinfo=timezone.utc)
    assert moment("2026-12-06T10:00:00+01:00") == datetime(2026, 12, 6, 9, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["yesterday", "5", "5y", "-3h", ""])
def test_anything_else_is_refused_naming_both_forms(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="neither a duration .* nor a time"):
        moment(text)
