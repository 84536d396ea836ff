"""Packs: the step objects of a finished block of steps, in one object.

A checkpoint deep in a long run is its head plus every object of its chain;
read one by one, a 2,000-step chain is 2,000 requests (each a round of
request overhead, on S3 a few milliseconds of client CPU). Once a branch has
stored the last step of a block of ``PACK_STEPS`` steps, the writer of that
step also stores the block's objects, byte for byte as they are stored under
their own keys, in one gzip'd object:

    runs/<run>/branches/<branch>/packs/<first:08d>-<last:08d>.json.gz
        gzip( <header JSON>\\n <object bytes> <object bytes> ... )
        header: {"format": "rewind.pack/v1", "run_id", "branch_id",
                 "first", "last", "sizes": [bytes of each object]}

``first``-``last`` in the key are the block's bounds (multiples of
``PACK_STEPS``); the header's ``first`` is the branch's first step in the
block (a fork's branch starts mid-block). A reader gets each object's exact
bytes back and checks them as if it had read the object itself (hash,
format, id), so a pack adds no trust. A pack is a copy: the step objects
stay the record, listings never see packs, and a reader that finds a pack
missing or damaged reads the block's objects one by one.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass

from checkpoint_bridge.document.layout import pack_key

__all__ = ["PACK_STEPS", "PACK_FORMAT", "MAX_PACK_BYTES", "Block", "block_of", "encode_pack", "decode_pack"]

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


def encode_pack(block: Block, first_step: int, objects: list[bytes]) -> bytes:
    """The pack of ``objects`` (steps ``first_step``..``block.last``, in order)."""
    if first_step + len(objects) - 1 != block.last or first_step < block.first:
        raise ValueError(f"a pack of block {block.first}-{block.last} needs the objects from step {first_step} to its end")
    header = {"format": PACK_FORMAT, "run_id": block.run_id, "branch_id": block.branch_id, "first": first_step,
              "last": block.last, "sizes": [len(o) for o in objects]}
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n" + b"".join(objects)
    # mtime=0: the same objects always make the same bytes, so two writers agree.
    return gzip.compress(body, compresslevel=6, mtime=0)


def decode_pack(block: Block, data: bytes) -> dict[int, bytes] | None:
    """Step -> object bytes; None if the pack is damaged or not this block's (then
    the reader falls back to the step objects, which are the record)."""
    try:
        body = gzip.decompress(data)
        line, _, rest = body.partition(b"\n")
        header = json.loads(line)
        sizes = header["sizes"]
        first = header["first"]
        if (header.get("format") != PACK_FORMAT or header.get("run_id") != block.run_id
                or header.get("branch_id") != block.branch_id or header.get("last") != block.last
                or not isinstance(first, int) or not block.first <= first <= block.last
                or not isinstance(sizes, list) or len(sizes) != block.last - first + 1
                or not all(isinstance(n, int) and n >= 0 for n in sizes) or sum(sizes) != len(rest)):
            return None
    except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, AttributeError):
        return None
    out, offset = {}, 0
    for step, size in enumerate(sizes, start=first):
        out[step] = rest[offset:offset + size]
        offset += size
    return out
