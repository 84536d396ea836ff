"""Conformance: storage grows linearly with run length and stays close to the
content; a checkpoint at any step loads in one round of few requests on "main",
two on other branches (the head, then its chain).

The workload of the design note: 200 steps, each appending an assistant tool
call and a 2 KB tool result, plus one tool record. Rewriting the whole
message list at every step (what LangGraph's savers do) stores ~100x the
content for such a run; Rewind stores each message once, plus a little per step.
"""

from __future__ import annotations

import json

from checkpoint_factory import make_run, next_step
from counting_objects import CountingObjects
from store_backends import Backend

from checkpoint_bridge.document import envelope
from checkpoint_bridge.document.envelope import object_json
from checkpoint_bridge.document.schema import checkpoint_to_dict, dump_checkpoint
from checkpoint_bridge.checkpoints.store import CheckpointStore

STEPS = 200
RESULT = 2048


async def _stored(store: CheckpointStore, run: list, *, packs: bool = False) -> int:
    """Bytes of the run's step objects (the record), or of its packs (gzip'd copies of
    finished blocks of steps, which make long chains load in few requests)."""
    for cp in run:
        await store.save(cp)
    return sum(len(v) for k, v in (await store.raw_objects(run[0].run_id)).items() if ("/packs/" in k) == packs)


async def test_storage_is_linear_in_the_messages(backend: Backend) -> None:
    # Tool records hold a short summary; the 2 KB result lives in the messages.
    run = make_run(STEPS, result_size=RESULT, record_output="summary")
    message_bytes = len(json.dumps(run[-1].messages).encode())
    store = backend.checkpoint_store()
    rewind = await _stored(store, run)
    rewrite_every_step = sum(len(envelope.encode("snapshot", checkpoint_to_dict(cp))) for cp in run)
    # Each message once, plus the step's own facts (ids, times, tokens, the tool record).
    assert rewind <= 1.4 * message_bytes, (rewind, message_bytes, rewind / message_bytes)
    # The packs: the content again, gzip'd as the step objects are, 1.5 times per level (4, 16
    # and 64 steps here: a level's packs hold 1, 2 and 3 of its blocks since the start of the
    # level above's).
    packs = await _stored(store, run, packs=True)
    assert 0 < packs <= 3 * 1.5 * rewind, (packs, rewind, packs / rewind)
    # Both gzip'd (the hex content halves either way): the whole conversation at every step is ~66x.
    assert rewrite_every_step >= 60 * rewind, (rewrite_every_step, rewind)
    assert await backend.twin(store).load(run[-1].checkpoint_id) == run[-1]


async def test_storage_is_linear_in_the_whole_document(store: CheckpointStore) -> None:
    # Tool records repeat the full result: stored once all the same (the message holds it).
    run = make_run(STEPS, result_size=RESULT, record_output="full")
    stored = await _stored(store, run)
    assert stored <= 0.7 * len(dump_checkpoint(run[-1])), (stored, len(dump_checkpoint(run[-1])))


async def test_any_step_loads_in_one_or_two_rounds_and_the_next_one_in_one_get(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(120, result_size=256)
    for cp in run:
        await store.save(cp)
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    # The head, steps 108, 109 (after the chain's last finished block) and a listing of the
    # branch's packs at once; then the packs it shows that hold blocks 0-107. The run went on to
    # step 119: pack 64-111 holds blocks 64-107 now (its writer deleted 64-95 and 96-107, the
    # packs step 110's chain had when it was written), so two packs: 0-63 and 64-111.
    wide = CheckpointStore(counting, concurrency=256)  # type: ignore[arg-type]
    counting.reset(hold=3, head=True)
    assert await wide.load("run-1:main:110") == run[110]
    assert counting.gets == 3 + 2 and counting.most_in_flight == 3, (counting.gets, counting.most_in_flight)
    assert [p for p in counting.listed if "/packs/" in p] == ["runs/run-1/branches/main/packs/"]
    # The branch's latest step: the head and steps 116-118, then what its last writer left
    # (packs 0-63, 64-111, 112-119).
    counting.reset(hold=4, head=True)
    assert await CheckpointStore(counting, concurrency=256).load("run-1:main:119") == run[119]  # type: ignore[arg-type]
    assert counting.gets == 4 + 3 and counting.most_in_flight == 4, (counting.gets, counting.most_in_flight)
    # At most `concurrency` requests at a time (32 by default).
    reader = CheckpointStore(counting, concurrency=2)  # type: ignore[arg-type]
    counting.reset(hold=2, head=True)
    assert await reader.load("run-1:main:110") == run[110]
    assert counting.gets == 5 and counting.most_in_flight == 2
    for step in range(111, 120):
        counting.reset()
        assert await reader.load(f"run-1:main:{step}") == run[step]
        assert counting.gets == 1  # the parent is cached: only the new delta


async def test_forks_and_forks_of_forks_are_deltas_across_branches(store: CheckpointStore, backend: Backend) -> None:
    run = make_run(30, result_size=512)
    for cp in run:
        await store.save(cp)
    fork = [next_step(run[10], branch_id="b")]
    while len(fork) < 6:
        fork.append(next_step(fork[-1]))
    fork2 = [next_step(fork[2], branch_id="c", messages=[{"role": "system", "content": "Be brief."}, *fork[2].messages[1:]])]
    while len(fork2) < 4:
        fork2.append(next_step(fork2[-1]))
    for cp in [*fork, *fork2]:
        await store.save(cp)
    raw = await store.raw_objects("run-1")
    key = "runs/run-1/branches/c/steps/00000014.json"  # b is 11..16, c forks at 13
    first_of_c = json.loads(object_json(raw[key], key))
    # The first step of a fork stores what it adds, not its parent's conversation again.
    assert first_of_c["kind"] == "delta" and first_of_c["payload"]["system_prompt"] == "Be brief."
    assert first_of_c["payload"]["chain"] == [["main", 0, 10], ["b", 11, 13]]
    assert len(raw[key]) < len(dump_checkpoint(run[2]))
    counting = CountingObjects(backend.reopen(store.objects))
    backend.opened.append(counting.inner)
    counting.reset(hold=9)
    assert await CheckpointStore(counting, concurrency=64).load(fork2[-1].checkpoint_id) == fork2[-1]  # type: ignore[arg-type]
    # The head (and a listing of c's packs), then at once: main's pack 0-7 and steps 8..10; b 11
    # (a block of one step: 11 ends the block 8-11), steps 12, 13; c's pack 14-15 (key 0-15,
    # level 2) and step 16. Main went on to step 29, so pack 0-15 holds its blocks 0-7 now (its
    # writer deleted 0-7): a listing of main names it, and one more GET reads it.
    assert counting.gets == 11 and counting.most_in_flight == 9, (counting.gets, counting.most_in_flight)
    assert [p for p in counting.listed if "/packs/" in p] == ["runs/run-1/branches/c/packs/", "runs/run-1/branches/main/packs/"]
    assert await backend.twin(store).load(fork[-1].checkpoint_id) == fork[-1]
