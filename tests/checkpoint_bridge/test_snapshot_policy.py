"""Which steps are stored whole."""

from __future__ import annotations

import pytest

from checkpoint_bridge.chain import SnapshotPolicy


def test_geometric_spacing() -> None:
    policy = SnapshotPolicy(every=25, spacing="geometric", max_chain=1000)
    steps = [s for s in range(0, 7001) if policy.is_snapshot_step(s)]
    assert steps == [0, 25, 100, 400, 1000, 1600, 2000, 3000, 4000, 5000, 6000, 6400, 7000]


def test_fixed_spacing() -> None:
    policy = SnapshotPolicy(every=25, spacing="fixed")
    assert [s for s in range(0, 101) if policy.is_snapshot_step(s)] == [0, 25, 50, 75, 100]
    assert all(SnapshotPolicy(every=1, spacing="fixed").is_snapshot_step(s) for s in range(50))


@pytest.mark.parametrize("policy", [SnapshotPolicy(), SnapshotPolicy(7, "fixed"), SnapshotPolicy(3, "geometric", 50)])
def test_snapshot_hint_is_the_last_snapshot_step(policy: SnapshotPolicy) -> None:
    last = 0
    for step in range(0, 2500):
        if policy.is_snapshot_step(step):
            last = step
        assert policy.snapshot_at_or_below(step) == last


def test_bad_policies() -> None:
    with pytest.raises(ValueError):
        SnapshotPolicy(every=0)
    with pytest.raises(ValueError):
        SnapshotPolicy(spacing="sometimes")  # type: ignore[arg-type]
