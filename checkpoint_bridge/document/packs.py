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
a level's block packs every block of that level since the start of the
enclosing block of the level above (1, 2 or 3 blocks; after the 4th, the level
above has its pack). So any chain is at most one pack per level below the top,
plus the top level's packs of 1,024 steps, plus at most 3 steps after its last
finished block: a checkpoint 500 or 2,000 steps deep is its head and 4 packs,
read in one round (one pack per block took 8). The writer takes the blocks from
what it has merged, or reads them from the packs below (storage: 1.5 compressed
copies of the content per level below the top, one at the top; linear in the
run's length).

    runs/<run>/branches/<branch>/packs/<first:08d>-<last:08d>.json.gz
        gzip( <header JSON>\\n <block content> <block content> ... )
        header: {"format": "rewind.pack/v2", "run_id", "branch_id", "first", "last",
                 "blocks": [[first, last, bytes, sha256], ...]}

``first``-``last`` in the key are the pack's aligned bounds (a cumulative pack's
start is the start of the enclosing block of the level above); the header's
``first`` is where the branch's part of the chain starts when that is later
(a fork's branch starts mid-block). Chains that a Rewind before cumulative
packs wrote (the same format, one pack per block of each level) still load:
a missing pack of 2 or 3 blocks is read as the pack of the blocks before its
last and the last one's own pack (``fallback_pieces``), one more round. A
block ends at every 4th step of the branch, counted from step 0; the first
block of a branch's part of a chain starts where the part starts.

Packs add no trust. Every v3 step object records ``blocks_sha256``, a hash
chained over the sha256 of the merged content of every finished block before
it in its chain (``extend_digest``), and the last step of a block also its own
block's hash (``block_sha256``): a reader hashes the blocks it took from packs,
chains the hashes and compares the result with its head's, which the head's
own hash protects. A pack that is missing, damaged, of an unknown format or
not the block's is read from the level below (in the end, the step objects,
which stay the record); blocks that do not add up to the head's digest are
read again from their step objects.

Format v1 packs (``rewind.pack/v1``: blocks of 32 steps, the step objects'
exact bytes) are written and read for chains that an older Rewind began
(without digests) and are still read for them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass

from checkpoint_bridge.document.layout import pack_key

__all__ = [
    "PACK_STEPS", "PACK_FORMAT", "MAX_PACK_BYTES", "Block", "block_of", "encode_pack", "decode_pack",
    "BLOCK_STEPS", "PACK_FANOUT", "PACK_LEVELS", "PACK_FORMAT_V2", "DIGEST_START", "Piece", "plan", "plan_range",
    "fallback_pieces", "blocks_in", "ends_block", "packs_ending_at", "extend_digest", "encode_pack_v2", "decode_pack_v2",
    "MAX_PACK_V2_BYTES",
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


def _open(data: bytes, format_: str, run_id: str, branch_id: str) -> tuple[dict, memoryview] | None:
    """(header, rest) of a pack of this format, run and branch; None for any other bytes."""
    opened = _gunzip(data)
    if opened is None:
        return None
    header = opened[0]
    if header.get("format") != format_ or header.get("run_id") != run_id or header.get("branch_id") != branch_id:
        return None
    return opened


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
# readers take the level below, and the memory a pack needs stays bounded.
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

    def key(self, run_id: str) -> str:
        """The key of the pack that holds this piece (level >= 1, more than one step)."""
        if self.cumulative:
            parent = _span(self.level + 1)
            return pack_key(run_id, self.branch_id, self.last - self.last % parent, self.last)
        return pack_key(run_id, self.branch_id, self.last + 1 - _span(self.level), self.last)


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


def fallback_pieces(piece: Piece) -> list[Piece]:
    """What to read instead of ``piece``'s pack when it is missing, damaged or not the
    piece's. A cumulative pack of the level's blocks 1..j: the pack of blocks 1..j-1 and the
    pack of block j alone (which a chain this Rewind packed has not, and one an older Rewind
    packed, one pack per block, has). A pack of one block: the levels below it (the
    cumulative packs inside it, then its last block of 4 steps, whose own pack only an older
    Rewind wrote). Never level 0: a level-1 piece whose pack fails is merged from its step
    objects by the reader."""
    if piece.cumulative:
        span = _span(piece.level)
        start = piece.last - piece.last % _span(piece.level + 1)
        before = piece.last - span  # the end of blocks 1..j-1
        out = []
        if before >= piece.first:
            out.append(Piece(piece.branch_id, piece.first, before, piece.level, cumulative=before + 1 - start > span))
        out.append(Piece(piece.branch_id, max(piece.first, before + 1), piece.last, piece.level))
        return out
    if piece.level <= 1:
        return [piece]
    lower = plan_range(piece.branch_id, piece.first, piece.last, piece.level - 1)
    singles = [p for p in lower if not p.level]
    if singles:  # the range's last block, which no pack of the levels below holds
        lower = [p for p in lower if p.level] + [Piece(piece.branch_id, singles[0].first, singles[-1].last, 1)]
    return lower


def plan(chain: list[tuple[str, int, int]]) -> list[Piece]:
    """A whole chain (its [branch, first, last] ranges, root first) as pieces, in order."""
    return [piece for branch_id, lo, hi in chain for piece in plan_range(branch_id, lo, hi)]


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
    pack that is damaged, of another format (a newer one included) or not this piece's."""
    opened = _open(data, PACK_FORMAT_V2, run_id, piece.branch_id)
    if opened is None:
        return None
    header, rest = opened
    listed = header.get("blocks")
    expected = blocks_in(piece)
    if (header.get("first") != piece.first or header.get("last") != piece.last or not isinstance(listed, list) or len(listed) != len(expected)):
        return None
    out: list[tuple[memoryview, str] | None] = []
    offset = 0
    for (lo, hi), item in zip(expected, listed):
        if not (isinstance(item, list) and len(item) == 4 and item[0] == lo and item[1] == hi
                and isinstance(item[2], int) and item[2] >= 0 and isinstance(item[3], str)):
            return None
        content = rest[offset:offset + item[2]]
        offset += item[2]
        sha = hashlib.sha256(content).hexdigest()
        out.append((content, sha) if len(content) == item[2] and sha == item[3] else None)
    return out if offset == len(rest) else None
