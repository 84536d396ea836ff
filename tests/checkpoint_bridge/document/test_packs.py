"""The pack layout as pure arithmetic (document/packs.py): the packs a branch's writers write
and delete leave every finished block in exactly one pack, and any chain of the branch, its
latest step's or an earlier one's, is covered by the packs that are left."""

from __future__ import annotations

import pytest

from checkpoint_bridge.document.packs import (
    BLOCK_STEPS,
    Piece,
    blocks_in,
    cover,
    ends_block,
    listed_packs,
    packs_ending_at,
    plan_range,
    plan_read,
    superseded_at,
)


def _stored(lo: int, last: int) -> dict[tuple[int, int], Piece]:
    """The packs of a branch whose part starts at `lo`, once its steps lo..last are stored."""
    packs: dict[tuple[int, int], Piece] = {}
    for step in range(lo, last + 1):
        for piece in packs_ending_at("b", step, lo):
            packs[piece.bounds()] = piece
        for piece in superseded_at("b", step, lo):
            packs.pop(piece.bounds(), None)
    return packs


def _finished_blocks(lo: int, last: int) -> list[tuple[int, int]]:
    end = last if ends_block(last) else last - (last + 1) % BLOCK_STEPS
    return blocks_in(Piece("b", lo, end, 1)) if end > lo else []


@pytest.mark.parametrize("lo", [0, 1, 3, 41, 250])
def test_every_finished_block_is_in_one_pack_and_every_chain_is_covered(lo: int) -> None:
    packs: dict[tuple[int, int], Piece] = {}
    for last in range(lo, lo + 1300):
        for piece in packs_ending_at("b", last, lo):
            packs[piece.bounds()] = piece
        for piece in superseded_at("b", last, lo):
            del packs[piece.bounds()]  # written before, and not by this step
        if last % 17:
            continue
        held = [block for piece in packs.values() for block in blocks_in(piece)]
        assert len(held) == len(set(held)), (lo, last)  # each block once
        # Every block but a lone first step (its object is as good) is in a pack.
        assert set(held) >= {b for b in _finished_blocks(lo, last) if b[0] < b[1]}, (lo, last)
        # Any earlier step's chain takes its finished blocks from these packs.
        for head in range(lo + 1, last + 1, 29):
            blocks = [b for b in _finished_blocks(lo, head - 1) if b[0] < b[1]]
            if blocks:
                pieces, uncovered = cover("b", blocks[0][0], blocks[-1][1], list(packs))
                assert not uncovered and [b for p in pieces for b in blocks_in(p)] == blocks, (lo, last, head)


def test_a_pack_holds_at_most_as_many_blocks_as_its_level_since_the_level_above() -> None:
    packs = _stored(0, 2047)
    assert sorted(packs) == [(0, 1023), (1024, 2047)]
    packs = _stored(0, 2043)
    assert sorted(packs) == [(0, 1023), (1024, 1791), (1792, 1983), (1984, 2031), (2032, 2043)]


@pytest.mark.parametrize("lo", [0, 41])
def test_the_latest_step_reads_the_packs_its_own_writer_left(lo: int) -> None:
    for step in range(lo + 1, lo + 300, 3):
        packs = _stored(lo, step)
        pieces = plan_read([("main", 0, 10), ("b", lo, step - 1)] if lo else [("b", 0, step - 1)], "b", step)
        assert all(p.bounds() in packs for p in pieces if p.branch_id == "b" and p.first < p.last), step


@pytest.mark.parametrize("lo", [0, 41])
def test_an_older_step_whose_branch_end_is_known_reads_only_packs_that_exist(lo: int) -> None:
    """A fork lists the run first: knowing how far the branch got, an older checkpoint's chain
    asks for the packs left at that end (each piece's pack exists, every block once), none of
    those it had when it was written, which newer packs replaced."""
    for end in range(lo + 1, lo + 1100, 37):
        packs = _stored(lo, end)
        for head in range(lo + 1, end + 1, 23):
            chain = [("main", 0, 10), ("b", lo, head - 1)] if lo else [("b", 0, head - 1)]
            pieces = plan_read(chain, "b", head, {"b": end, "main": 500})
            own = [p for p in pieces if p.branch_id == "b"]
            assert all(p.bounds() in packs for p in own if p.first < p.last), (end, head)
            # The pieces hold the chain's steps on the branch, each once, in order.
            assert [s for p in own for s in range(p.first, p.last + 1)] == list(range(lo, head)), (end, head)
            # Without the end, the same chain would ask for packs that are gone (when the branch went on).
            if end - head > 300 and head - lo >= 64:
                assert any(p.bounds() not in packs for p in plan_read(chain, "b", head)
                           if p.branch_id == "b" and p.first < p.last), (end, head)


def test_plan_range_is_what_the_latest_step_before_a_block_end_reads() -> None:
    for step in range(1, 300):
        if not ends_block(step):
            assert plan_read([("b", 0, step - 1)], "b", step) == plan_range("b", 0, step - 1)


def test_a_listing_gives_the_bounds_of_the_packs_only() -> None:
    keys = ["runs/r/branches/b/packs/00000000-00000063.json.gz", "runs/r/branches/b/packs/00000064-00000067.json.gz",
            "runs/r/branches/b/packs/notes.txt", "runs/r/branches/b/packs/00000009-00000001.json.gz"]
    assert listed_packs(keys) == [(0, 63), (64, 67)]


def test_cover_takes_the_pack_that_reaches_furthest_and_leaves_the_rest_to_the_steps() -> None:
    pieces, uncovered = cover("b", 0, 79, [(0, 15), (0, 63), (64, 67)])
    assert [(p.first, p.last, p.held_in) for p in pieces] == [(0, 63, (0, 63)), (64, 67, (64, 67))]
    assert uncovered == [(68, 71), (72, 75), (76, 79)]
