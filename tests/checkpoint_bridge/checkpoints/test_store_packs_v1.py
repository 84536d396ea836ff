"""Runs an older Rewind stored: format v2 step objects (no digests) and v1 packs
(blocks of 32 steps, the step objects' exact bytes). They load as before, a
damaged v1 pack is read from its steps, and new steps continue such a chain in
its own format, with its own packs."""

from __future__ import annotations

import gzip
import hashlib
import json

from checkpoint_factory import make_run, next_step
from counting_objects import CountingObjects
from store_backends import Backend

from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.packs import block_of, decode_pack, encode_pack
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.canonical import canonical_json

MAIN = "runs/run-1/branches/main"
PACK = f"{MAIN}/packs/00000032-00000063.json.gz"
# A cold load of step 99 of "main" asks, with the head, for what the chain of a step stored
# today would need whatever its branch's packs are: steps 96-98, after its last finished block.
GUESSED = 3


def _as_v2(data: bytes) -> bytes:
    """A step object as format v2 wrote it: no digests, plain JSON."""
    envelope = json.loads(object_json(data, "step"))
    payload = {k: v for k, v in envelope["payload"].items() if k not in ("blocks_sha256", "block_sha256")}
    if envelope["kind"] == "delta":
        envelope["format"] = "rewind.checkpoint/v2"
    return canonical_json({**envelope, "payload": payload,
                           "sha256": hashlib.sha256(canonical_json(payload).encode()).hexdigest()}).encode()


async def _older_run(backend: Backend, steps: int) -> tuple[CheckpointStore, list]:
    """A run as an older Rewind stored it: v2 objects, a v1 pack of each finished block of 32."""
    run = make_run(steps, result_size=256)
    writer = backend.checkpoint_store()
    for cp in run:
        await writer.save(cp)
    steps_ = {k: _as_v2(v) for k, v in (await writer.raw_objects("run-1")).items() if "/steps/" in k}
    store = backend.checkpoint_store()
    for key, data in steps_.items():
        await store.objects.put_if_absent(key, data)
    for first in range(0, steps - 31, 32):
        block = block_of("run-1", "main", first)
        objects = [steps_[f"{MAIN}/steps/{s:08d}.json"] for s in range(first, first + 32)]
        await store.objects.put_if_absent(block.key, encode_pack(block, first, objects))
    return store, run


async def _load_counting(backend: Backend, store: CheckpointStore, cid: str):  # type: ignore[no-untyped-def]
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    return await CheckpointStore(counting, concurrency=256).load(cid), counting.gets  # type: ignore[arg-type]


async def test_an_older_run_loads_through_its_v1_packs(backend: Backend) -> None:
    store, run = await _older_run(backend, 100)
    cp, gets = await _load_counting(backend, store, "run-1:main:99")
    assert cp == run[99]
    # The head, three v1 packs, steps 96..98; and, asked for with the head, steps 96..98 again
    # (what a chain of this format reads whatever its packs are).
    assert gets == 1 + 3 + 3 + GUESSED


async def test_a_damaged_v1_pack_is_read_from_its_steps(backend: Backend) -> None:
    store, run = await _older_run(backend, 100)
    raw = await store.raw_objects("run-1")
    header, _, rest = gzip.decompress(raw[PACK]).partition(b"\n")
    sizes = json.loads(header)["sizes"]
    start = sum(sizes[:8])  # the object of step 40, altered inside the pack: caught by its hash
    target = rest[start:start + sizes[8]]
    altered = target.replace(b'"tool_call_id":"call_main_40"', b'"tool_call_id":"call_main_4X"')
    assert altered != target and len(altered) == len(target)
    inside = gzip.compress(header + b"\n" + rest[:start] + altered + rest[start + len(target):])
    for bad, more in ((b"not gzip at all", 32), (raw[PACK][: len(raw[PACK]) // 2], 32), (inside, 1)):
        backend.tamper(store.objects, PACK, bad)
        cp, gets = await _load_counting(backend, store, "run-1:main:99")
        assert cp == run[99] and gets == 1 + 3 + 3 + more + GUESSED, bad[:20]


async def test_new_steps_continue_an_older_chain_in_its_format(backend: Backend) -> None:
    store, run = await _older_run(backend, 60)
    more = [*run]
    while len(more) < 70:
        more.append(next_step(more[-1]))
    writer = backend.twin(store)
    for cp in more[60:]:
        await writer.save(cp)
    raw = await store.raw_objects("run-1")
    # Continued in its format, gzip'd as every step object written today: the chain mixes both forms.
    assert raw[f"{MAIN}/steps/00000069.json"][:2] == b"\x1f\x8b" and raw[f"{MAIN}/steps/00000059.json"][:1] == b"{"
    newest = json.loads(object_json(raw[f"{MAIN}/steps/00000069.json"], "69"))
    assert newest["format"] == "rewind.checkpoint/v2" and "blocks_sha256" not in newest["payload"]
    assert sorted(k for k in raw if "/packs/" in k) == [f"{MAIN}/packs/00000000-00000031.json.gz", PACK]
    objects = decode_pack(block_of("run-1", "main", 40), raw[PACK])
    assert objects is not None and objects[63] == raw[f"{MAIN}/steps/00000063.json"]
    cp, gets = await _load_counting(backend, store, "run-1:main:69")
    # The head, two v1 packs, steps 64..68 (and step 68 guessed: what a v3 chain reads whatever
    # its packs are).
    assert cp == more[69] and gets == 1 + 2 + 5 + 1
