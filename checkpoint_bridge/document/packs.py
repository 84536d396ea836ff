"""Packs: finished blocks of a chain's steps, merged, a level's blocks in one object.

A checkpoint deep in a long run is its head plus every object of its chain;
read one by one, a 2,000-step chain is 2,000 requests (each a round of
request overhead, on S3 a few milliseconds of client and server time) and
2,000 objects to parse, check and replay. Packs hold the chain's finished
blocks of steps as merged content (document/blocks.py: the block's new
messages, tool records and final variables, once), in levels:

    level 1: a block of BLOCK_STEPS = 4 steps      (the unit the chain's digest covers)
    level k: 4^(k-1) such blocks, 4^k steps, up to level PACK_LEVELS = 5 (1,024 steps)

Below the top level a level's pack is cumulative: the writer of the last step of
a level's block packs every block of that level since the start of the enclosing
block of the level above (1, 2 or 3 blocks; after the 4th, the level above has
its pack). So any chain is at most one pack per level below the top, plus the
top level's packs of 1,024 steps, plus at most 3 steps after its last finished
block: a checkpoint 500 or 2,000 steps deep is its head and 4 packs, read in one
round. The writer takes the blocks from what it has merged, or reads them from
the packs below.

Each block is in one pack. Once a pack is written, its writer deletes the packs
it holds whole (``superseded_at``: the level's pack of fewer blocks, and the
packs of the levels below inside it), so a branch keeps one pack per level
below the top plus the top level's, and the store holds every block about once
(compressed) whatever the run's length; a store that refuses deletes keeps the
older packs, which costs storage and nothing else. A reader takes a chain's
blocks from the packs a listing of the branch's packs shows (``cover``; a cold
load lists its own branch beside its head: an older checkpoint's own packs
were mostly replaced since), or, when the caller listed the run already and so
knows how far each branch got (a fork), from the packs left at that end
(``plan_read``'s ``ends``); without either, from the packs the chain's last
writer left (``plan_read``), looking for the others in a listing. It reads only
the blocks it needs from them (decompressing a large pack no further than its
last needed block).

    runs/<run>/branches/<branch>/packs/<first:08d>-<last:08d>.json.gz
        gzip( <header JSON>\\n <block content> <block content> ... )
        header: {"format": "rewind.pack/v2", "run_id", "branch_id", "first", "last",
                 "blocks": [[first, last, bytes, sha256], ...]}

``first``-``last`` in the key are the pack's aligned bounds (a cumulative pack's
start is the start of the enclosing block of the level above); the header's
``first`` is where the branch's part of the chain starts when that is later
(a fork's branch starts mid-block). Chains that an older Rewind packed (the
same format: one pack per block of each level, or cumulative packs it never
deleted) still load: the listing shows their packs, and ``cover`` takes the
fewest that hold a chain's blocks. A block ends at every 4th step of the
branch, counted from step 0; the first block of a branch's part of a chain
starts where the part starts.

Packs add no trust. Every v3 step object records ``blocks_sha256``, a hash
chained over the sha256 of the merged content of every finished block before
it in its chain (``extend_digest``), and the last step of a block also its own
block's hash (``block_sha256``): a reader hashes the blocks it took from packs,
chains the hashes and compares the result with its head's, which the head's
own hash protects. A pack that is missing, damaged, of an unknown format or
not the block's is replaced by another listed pack that holds its blocks, or by
the step objects, which stay the record; blocks that do not add up to the
head's digest are read again from their step objects.

Format v1 packs (``rewind.pack/v1``: blocks of 32 steps, the step objects'
exact bytes) are written and read for chains that an older Rewind began
(without digests) and are still read for them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from typing import Mapping

from checkpoint_bridge.document.layout import pack_key

__all__ = [
    "PACK_STEPS", "PACK_FORMAT", "MAX_PACK_BYTES", "Block", "block_of", "encode_pack", "decode_pack",
    "BLOCK_STEPS", "PACK_FANOUT", "PACK_LEVELS", "PACK_FORMAT_V2", "DIGEST_START", "Piece", "plan", "plan_range",
    "blocks_in", "ends_block", "packs_ending_at", "extend_digest", "encode_pack_v2", "decode_pack_v2",
    "MAX_PACK_V2_BYTES", "superseded_at", "listed_packs", "cover", "plan_read", "holders",
]

# -- format v1 (chains an older Rewind began) ---------------------------------------

PACK_STEPS = 32
PACK_FORMAT = "rewind.pack/v1"
# A block holding huge tool outputs is not packed: its objects are few requests
# compared with their bytes, and a pack would hold them in memory twice.
MAX_PACK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Block:
    run_id: str
    branch_id: str
    first: int  # the block's bounds: first is a multiple of PACK_STEPS
    last: int

    @property
    def key(self) -> str:
        return pack_key(self.run_id, self.branch_id, self.first, self.last)


def block_of(run_id: str, branch_id: str, step: int) -> Block:
    first = step - step % PACK_STEPS
    return Block(run_id, branch_id, first, first + PACK_STEPS - 1)


def _gzip(header: dict, parts: list[bytes]) -> bytes:
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n" + b"".join(parts)
    # mtime=0: the same content always makes the same bytes, so two writers agree.
    return gzip.compress(body, compresslevel=6, mtime=0)


def _gunzip(data: bytes) -> tuple[dict, memoryview] | None:
    """(header, rest) of a pack; None if it is not gzip'd JSON-headed bytes. One call of zlib's
    (its own check of the CRC), and the rest a view, not a copy: a pack can hold megabytes."""
    try:
        body = zlib.decompress(data, 16 + zlib.MAX_WBITS)
        end = body.index(b"\n")
        header = json.loads(body[:end])
    except (zlib.error, ValueError):
        return None
    return (header, memoryview(body)[end + 1:]) if isinstance(header, dict) else None


def _open(data: bytes, format_: str, run_id: str, branch_id: str, until: int | None = None) -> tuple[dict, memoryview] | None:
    """(header, rest) of a pack of this format, run and branch; None for any other bytes. With
    ``until`` (a step), the rest may stop after the block that ends there: a reader that needs
    the first blocks of a large pack decompresses only those (each is checked by its hash)."""
    opened = _gunzip(data) if until is None else _gunzip_until(data, until)
    if opened is None:
        return None
    header = opened[0]
    if header.get("format") != format_ or header.get("run_id") != run_id or header.get("branch_id") != branch_id:
        return None
    return opened


def _gunzip_until(data: bytes, until: int) -> tuple[dict, memoryview] | None:
    """``_gunzip``, decompressing no further than the end of the block that ends at ``until``
    (all of it when the header does not say where that is)."""
    stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = stream.decompress(data, 1 << 16)
        while b"\n" not in body and stream.unconsumed_tail:
            body += stream.decompress(stream.unconsumed_tail, 1 << 16)
        end = body.index(b"\n")
        header = json.loads(body[:end])
        listed = header.get("blocks") if isinstance(header, dict) else None
        sizes = [b[2] for b in listed if isinstance(b, list) and len(b) == 4 and isinstance(b[1], int) and b[1] <= until
                 and isinstance(b[2], int)] if isinstance(listed, list) else None
        if not sizes or len(sizes) == len(listed):  # type: ignore[arg-type]
            return _gunzip(data)
        need = end + 1 + sum(sizes)
        while len(body) < need and stream.unconsumed_tail:
            body += stream.decompress(stream.unconsumed_tail, need - len(body))
    except (zlib.error, ValueError):
        return None
    return (header, memoryview(body)[end + 1:]) if isinstance(header, dict) else None


def encode_pack(block: Block, first_step: int, objects: list[bytes]) -> bytes:
    """The v1 pack of ``objects`` (steps ``first_step``..``block.last``, in order)."""
    if first_step + len(objects) - 1 != block.last or first_step < block.first:
        raise ValueError(f"a pack of block {block.first}-{block.last} needs the objects from step {first_step} to its end")
    header = {"format": PACK_FORMAT, "run_id": block.run_id, "branch_id": block.branch_id, "first": first_step,
              "last": block.last, "sizes": [len(o) for o in objects]}
    return _gzip(header, objects)


def decode_pack(block: Block, data: bytes) -> dict[int, bytes] | None:
    """Step -> object bytes of a v1 pack; None if the pack is damaged or not this block's
    (then the reader falls back to the step objects, which are the record)."""
    opened = _open(data, PACK_FORMAT, block.run_id, block.branch_id)
    if opened is None:
        return None
    header, rest = opened
    sizes, first = header.get("sizes"), header.get("first")
    if (header.get("last") != block.last or not isinstance(first, int) or not block.first <= first <= block.last
            or not isinstance(sizes, list) or len(sizes) != block.last - first + 1
            or not all(isinstance(n, int) and n >= 0 for n in sizes) or sum(sizes) != len(rest)):
        return None
    out, offset = {}, 0
    for step, size in enumerate(sizes, start=first):
        out[step] = bytes(rest[offset:offset + size])
        offset += size
    return out


# -- format v2: merged blocks in levels -----------------------------------------------

BLOCK_STEPS = 4
PACK_FANOUT = 4
PACK_LEVELS = 5
PACK_FORMAT_V2 = "rewind.pack/v2"
# The digest of a chain before its first finished block.
DIGEST_START = "0" * 64
# A level's pack is not written when its merged content is larger (huge tool outputs):
# readers take the packs below (which its writer then keeps), and the memory a pack needs stays bounded.
MAX_PACK_V2_BYTES = 64 * 1024 * 1024


def _span(level: int) -> int:
    return BLOCK_STEPS * PACK_FANOUT ** (level - 1)


@dataclass(frozen=True)
class Piece:
    """Part of a chain's range on one branch, steps ``first``..``last``: finished blocks from
    the pack of ``level`` (>= 1; one step: its own object), or (level 0) one step after the
    range's last finished block, which the chain's digest does not cover.

    ``cumulative``: the pack holds the level's 2 or 3 blocks since the start of the
    enclosing block of the level above (see ``plan_range``), not one block of the level."""

    branch_id: str
    first: int
    last: int
    level: int
    cumulative: bool = False
    held_in: tuple[int, int] | None = None
    """The bounds in the key of a pack found in the branch's listing (``cover``), which may
    hold more blocks than the piece's, before and after them: the piece is read from it."""

    def bounds(self) -> tuple[int, int]:
        """The bounds in the key of the pack that holds this piece (level >= 1, more than one step)."""
        if self.held_in is not None:
            return self.held_in
        if self.cumulative:
            return self.last - self.last % _span(self.level + 1), self.last
        return self.last + 1 - _span(self.level), self.last

    def key(self, run_id: str) -> str:
        """The key of the pack that holds this piece (level >= 1, more than one step)."""
        return pack_key(run_id, self.branch_id, *self.bounds())


def plan_range(branch_id: str, lo: int, hi: int, max_level: int = PACK_LEVELS) -> list[Piece]:
    """Steps ``lo``..``hi`` of a branch, where the branch's part of a chain starts at ``lo``,
    as the fewest pieces, the highest level first (levels up to ``max_level``).

    Below the top level, a level's pack holds every finished block of that level since
    the start of the enclosing block of the level above (1, 2 or 3 of them: with the 4th,
    the level above has its own pack), so a chain takes at most one pack per level below
    the top: a checkpoint 500 steps deep is its head and 4 packs, where one pack per
    block of each level took 8. The top level's packs hold one block (1,024 steps) each."""
    out: list[Piece] = []
    p = lo
    while p <= hi:
        for level in range(max_level, 0, -1):
            span = _span(level)
            if level == PACK_LEVELS:
                start, blocks = p - p % span, 1
            else:
                parent = _span(level + 1)
                start = p - p % parent
                blocks = min(PACK_FANOUT - 1, (hi + 1 - start) // span)
            end = start + blocks * span - 1
            if blocks >= 1 and max(start, lo) == p and p <= end <= hi:
                out.append(Piece(branch_id, p, end, level, cumulative=blocks > 1))
                p = end + 1
                break
        else:
            out.append(Piece(branch_id, p, p, 0))
            p += 1
    return out


def plan(chain: list[tuple[str, int, int]]) -> list[Piece]:
    """A whole chain (its [branch, first, last] ranges, root first) as pieces, in order."""
    return [piece for branch_id, lo, hi in chain for piece in plan_range(branch_id, lo, hi)]


def plan_read(chain: list[tuple[str, int, int]], branch_id: str, step: int,
              ends: Mapping[str, int] | None = None,
              listed: Mapping[str, list[tuple[int, int]]] | None = None) -> list[Piece]:
    """``plan(chain)`` for reading step ``step`` of ``branch_id``, whose chain it is: when the step
    finishes a block, its writer packed that block and deleted the packs the new ones hold
    (``superseded_at``), so the chain's blocks on the step's own branch are taken from those.

    ``ends``: the newest stored step of branches of the chain, where a listing of the run told
    them (a fork lists it to find its step): a branch's blocks are then taken from the packs its
    writer left at the last block end it reached. ``listed``: the packs (their key bounds) that
    a listing of branches' packs showed (a cold load lists its own branch's as it reads the
    head): a branch's blocks are then taken from those. Either way an older checkpoint reads
    the packs that exist, in one round, where it would ask for the packs it had when it was
    written (replaced since) and look for the newer ones in a listing. A pack that is not there
    after all (a writer that has not packed yet, or packed further since) is looked for as
    always."""
    if ends or listed:
        known = {**(ends or {}), branch_id: max((ends or {}).get(branch_id, step), step)}
        return [piece for b, lo, hi in chain
                for piece in _held(b, lo, hi, listed[b] if listed and b in listed else _left_at(b, lo, hi, known.get(b)))]
    pieces = plan(chain)
    if not chain or chain[-1][0] != branch_id or not ends_block(step):
        return pieces
    _branch, lo, _hi = chain[-1]
    own = [p for p in pieces if p.branch_id == branch_id and p.level]
    if not own:
        return pieces
    covered, uncovered = cover(branch_id, own[0].first, own[-1].last, [p.bounds() for p in _live(branch_id, lo, step)])
    if uncovered:
        return pieces
    return [p for p in pieces if p.branch_id != branch_id] + covered + [p for p in pieces if p.branch_id == branch_id and not p.level]


def _left_at(branch_id: str, lo: int, hi: int, end: int | None) -> list[tuple[int, int]] | None:
    """The key bounds of the packs a branch's writer left at ``end`` (its newest stored step, if
    known; ``lo``: where the branch's part of a chain starts, ``hi``: where that part ends)."""
    if end is None or end < hi:
        return None
    return [p.bounds() for p in _live(branch_id, lo, end - (end + 1) % BLOCK_STEPS)]


def _held(branch_id: str, lo: int, hi: int, packs: list[tuple[int, int]] | None) -> list[Piece]:
    """``plan_range(branch_id, lo, hi)``, its finished blocks from ``packs`` (key bounds of packs
    known to exist) when they hold them all."""
    pieces = plan_range(branch_id, lo, hi)
    own = [p for p in pieces if p.level]
    if packs is None or not own:
        return pieces
    covered, uncovered = cover(branch_id, own[0].first, own[-1].last, packs)
    return pieces if uncovered else covered + [p for p in pieces if not p.level]


def blocks_in(piece: Piece) -> list[tuple[int, int]]:
    """The finished blocks (first, last) a piece of level >= 1 holds, in order."""
    out, p = [], piece.first
    while p <= piece.last:
        end = p - p % BLOCK_STEPS + BLOCK_STEPS - 1
        out.append((p, end))
        p = end + 1
    return out


def ends_block(step: int) -> bool:
    return (step + 1) % BLOCK_STEPS == 0


def packs_ending_at(branch_id: str, step: int, lo: int) -> list[Piece]:
    """The packs the writer of ``step`` writes (the branch's part of its chain starts at ``lo``):
    one per level whose block ends here (from the start of the enclosing block of the level
    above, ``plan_range``; none where that block ends too), when it holds more than one step."""
    out = []
    for level in range(1, PACK_LEVELS + 1):
        span = _span(level)
        if (step + 1) % span:
            continue
        blocks = 1 if level == PACK_LEVELS else (step + 1) % _span(level + 1) // span
        if blocks and max(step + 1 - blocks * span, lo) < step:
            out.append(Piece(branch_id, max(step + 1 - blocks * span, lo), step, level, cumulative=blocks > 1))
    return out


def _live(branch_id: str, lo: int, end: int) -> list[Piece]:
    """The packs a branch keeps once its part of a chain (from ``lo``) is stored to the end of
    a block at ``end``: those a chain to ``end`` reads."""
    return [p for p in plan_range(branch_id, lo, end) if p.level and p.first < p.last] if end >= lo else []


def superseded_at(branch_id: str, step: int, lo: int) -> list[Piece]:
    """The packs that the packs written at ``step`` (``packs_ending_at``) hold whole, which their
    writer then deletes: the level's pack of fewer blocks since the start of the enclosing block
    of the level above, and the packs of the levels below inside it. So every finished block is
    in about one pack, whatever the run's length; a reader of an earlier step of the branch
    takes its blocks from the later pack that holds them (``cover``)."""
    if not ends_block(step):
        return []
    kept = {(p.first, p.last) for p in _live(branch_id, lo, step)}
    return [p for p in _live(branch_id, lo, step - BLOCK_STEPS) if (p.first, p.last) not in kept]


def holders(piece: Piece) -> list[tuple[int, int]]:
    """The key bounds of the packs that hold ``piece``'s blocks later, as its branch goes on, in
    the order they are written (each replaces the one before, ``superseded_at``): the level's
    pack of one block more, up to the end of the enclosing block of the level above, then the
    pack that the highest level ending there writes, and so on up to the top level's. A reader
    of an older checkpoint asks for these when the piece's own pack is gone: the branch's packs
    now are among them."""
    out: list[tuple[int, int]] = []
    level, (first, last) = piece.level, piece.bounds()
    while 1 <= level < PACK_LEVELS:
        span, parent = _span(level), _span(level + 1)
        parent_end = last - last % parent + parent - 1
        if last + span < parent_end:  # one block more of the same level
            last += span
            out.append((first, last))
            continue
        level += 1
        while level < PACK_LEVELS and (parent_end + 1) % _span(level + 1) == 0:
            level += 1
        first = parent_end + 1 - _span(level) if level == PACK_LEVELS else parent_end - parent_end % _span(level + 1)
        last = parent_end
        out.append((first, last))
    return out


_LISTED = re.compile(r"(?:.*/)?packs/([0-9]{8})-([0-9]{8})\.json\.gz")


def listed_packs(keys: list[str]) -> list[tuple[int, int]]:
    """The bounds in the keys of a branch's listed packs (other keys ignored)."""
    out = []
    for key in keys:
        match = _LISTED.fullmatch(key)
        if match is not None and int(match[1]) <= int(match[2]):
            out.append((int(match[1]), int(match[2])))
    return out


def cover(branch_id: str, first: int, last: int, packs: list[tuple[int, int]]) -> tuple[list[Piece], list[tuple[int, int]]]:
    """Finished blocks ``first``..``last`` of a branch (``first`` a block's first step, ``last`` a
    block's last) from the packs a listing of the branch shows (their key bounds): at each block,
    the pack that holds it and reaches furthest, of which the reader takes only the blocks it
    needs. Returns those pieces and the blocks no listed pack holds (read from their steps)."""
    pieces: list[Piece] = []
    uncovered: list[tuple[int, int]] = []
    p = first
    while p <= last:
        best = max((b for b in packs if b[0] <= p <= b[1]), key=lambda b: b[1], default=None)
        if best is None:
            end = p - p % BLOCK_STEPS + BLOCK_STEPS - 1
            uncovered.append((p, min(end, last)))
            p = end + 1
            continue
        end = min(best[1], last)
        pieces.append(Piece(branch_id, p, end, 1, held_in=best))
        p = end + 1
    return pieces, uncovered


def extend_digest(digest: str, block_sha256: str) -> str:
    """The chain's digest after one more finished block."""
    return hashlib.sha256(f"{digest}{block_sha256}".encode("ascii")).hexdigest()


def encode_pack_v2(run_id: str, piece: Piece, contents: list[bytes]) -> bytes:
    """The pack of ``piece``: the merged content of each of its blocks, in order."""
    blocks = blocks_in(piece)
    if len(contents) != len(blocks):
        raise ValueError(f"a pack of steps {piece.first}-{piece.last} needs {len(blocks)} blocks, not {len(contents)}")
    header = {"format": PACK_FORMAT_V2, "run_id": run_id, "branch_id": piece.branch_id, "first": piece.first,
              "last": piece.last, "blocks": [[lo, hi, len(c), hashlib.sha256(c).hexdigest()]
                                             for (lo, hi), c in zip(blocks, contents, strict=True)]}
    return _gzip(header, contents)


def decode_pack_v2(run_id: str, piece: Piece, data: bytes) -> list[tuple[memoryview, str] | None] | None:
    """The merged content of each block of ``piece`` (in ``blocks_in`` order) and its sha256,
    None for a block whose bytes do not match the hash the pack gives for them; None for a
    pack that is damaged, of another format (a newer one included) or not this piece's.

    A piece ``held_in`` a listed pack is taken from the blocks that pack holds: its header
    says where they start (a fork's branch starts inside the key's bounds)."""
    partial = piece.held_in is not None and piece.last < piece.held_in[1]
    opened = _open(data, PACK_FORMAT_V2, run_id, piece.branch_id, piece.last if partial else None)
    if opened is None:
        return None
    header, rest = opened
    listed = header.get("blocks")
    held = header.get("first")
    if piece.held_in is not None:
        if not (isinstance(held, int) and piece.held_in[0] <= held <= piece.first and header.get("last") == piece.held_in[1]):
            return None
        expected = blocks_in(Piece(piece.branch_id, held, piece.held_in[1], 1))
    else:
        if held != piece.first or header.get("last") != piece.last:
            return None
        expected = blocks_in(piece)
    wanted = set(blocks_in(piece))
    if not isinstance(listed, list) or len(listed) != len(expected):
        return None
    out: list[tuple[memoryview, str] | None] = []
    offset = 0
    for (lo, hi), item in zip(expected, listed):
        if not (isinstance(item, list) and len(item) == 4 and item[0] == lo and item[1] == hi
                and isinstance(item[2], int) and item[2] >= 0 and isinstance(item[3], str)):
            return None
        content = rest[offset:offset + item[2]]
        offset += item[2]
        if (lo, hi) not in wanted:
            continue
        sha = hashlib.sha256(content).hexdigest()
        out.append((content, sha) if len(content) == item[2] and sha == item[3] else None)
    # Read whole, the pack holds exactly its blocks; read in part, the blocks it decompressed.
    return out if (offset >= len(rest) if partial else offset == len(rest)) and len(out) == len(wanted) else None
