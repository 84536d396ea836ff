"""The stored bytes of an envelope: gzip'd with a fixed header (the same JSON always
makes the same bytes), or plain JSON; ``object_json`` reads both, and gzip written
by other tools."""

from __future__ import annotations

import gzip
import json

import pytest
from checkpoint_factory import first_step

from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.document import envelope
from checkpoint_bridge.document.schema import checkpoint_to_dict
from workflows.vocabulary.errors import CorruptCheckpointError

DOC = checkpoint_to_dict(first_step())


def test_gzip_is_the_plain_json_with_a_fixed_header_and_byte_stable() -> None:
    plain = envelope.encode("snapshot", DOC, compression="none")
    zipped = envelope.encode("snapshot", DOC)
    assert plain[:1] == b"{" and json.loads(plain)["kind"] == "snapshot"
    # Deflate, no name, mtime 0, OS "unknown": nothing of when or where it was written.
    assert zipped[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    assert gzip.decompress(zipped) == plain == envelope.object_json(zipped, "k")
    assert envelope.encode("snapshot", json.loads(json.dumps(DOC))) == zipped  # re-encoding: the same bytes
    assert envelope.compress(plain) == zipped and envelope.compress(plain, "none") is plain


def test_both_forms_decode_to_the_same_envelope() -> None:
    zipped, plain = envelope.encode("snapshot", DOC), envelope.encode("snapshot", DOC, compression="none")
    assert envelope.decode(zipped, "k") == envelope.decode(plain, "k")
    # gzip of the same JSON written by another tool (a name, a time, another level) reads too.
    other = gzip.compress(plain, compresslevel=1, mtime=1_700_000_000)
    assert other != zipped and envelope.decode(other, "k") == envelope.decode(plain, "k")


def test_plain_bytes_pass_through_untouched() -> None:
    data = b'{"format":"rewind.checkpoint/v3"}'
    assert envelope.object_json(data, "k") is data


@pytest.mark.parametrize("data", [b"\x1f\x8b", b"\x1f\x8bnot deflate at all"], ids=["magic only", "garbage"])
def test_bytes_that_only_look_like_gzip_are_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptCheckpointError, match=r"checkpoint object runs/x .*gzip.*rewind mirror RUN"):
        envelope.decode(data, "runs/x")


def test_an_unknown_compression_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown compression 'zstd'; use one of gzip, none"):
        envelope.encode("snapshot", DOC, compression="zstd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown compression 'zstd'; use one of gzip, none"):
        CheckpointStore(object(), compression="zstd")  # type: ignore[arg-type]
