"""`rewind mirror RUN` into an empty store rebuilds every branch of the run, not only
`main`: forks, rollback revisions and sub-agent runs are found in Temporal (their
workflows are `RUN--BRANCH`), each rebuilt after the branch it continues.

Found by the soak (bench/soak): after a store's loss, `rewind mirror` brought
back `main` alone, because it asked the (empty) store which branches there were.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import sys
from pathlib import Path

from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from helpers import scripted, start_agent
from rewind.client import fork

REPO = Path(__file__).resolve().parents[2]

SCRIPT = [
    {"tool_calls": [{"name": "looker", "arguments": {"term": "alpha"}}],
     "by_user": {"Look up alpha": {"tool_calls": [{"name": "lookup", "arguments": {"term": "alpha"}}]}}},
    {"tool_calls": [{"name": "lookup", "arguments": {"term": "beta"}}],
     "by_user": {"Look up alpha": {"content": "alpha is a letter"}}},
    {"content": "done"},
]


async def _mirror(settings, store_url: str, run_id: str, **variables: str) -> tuple[int, str, str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": settings.temporal_address, "REWIND_TASK_QUEUE": settings.task_queue,
           "REWIND_STORE": store_url, "REWIND_PAYLOADS": settings.payload_url, **variables}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "rewind.cli", "mirror", run_id, "--json",
                                                cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_mirror_into_an_empty_store_rebuilds_forks_and_subagents(worker, client, settings, model, tmp_path):
    model_name = scripted(model, SCRIPT)
    handle = await start_agent(client, settings, "mirror every branch", model=model_name, tools=["looker", "lookup"])
    assert (await asyncio.wait_for(handle.result(), 90)).status.state == "completed"
    async with open_checkpoint_store(settings.store_url) as store:
        forked = await fork(client, settings, store, handle.id, 2, branch="alt")
        assert (await asyncio.wait_for(forked.handle.result(), 90)).status.state == "completed"
        original = await store.raw_objects(handle.id)
        branches = await store.branches(handle.id)
    assert "alt" in branches and any(".s1-" in b for b in branches), branches

    empty = f"file://{tmp_path / 'rebuilt'}"
    code, out, err = await _mirror(settings, empty, handle.id)
    assert code == 0, err
    assert sorted(b["branch_id"] for b in json.loads(out)["branches"]) == sorted(branches)
    async with open_checkpoint_store(empty) as rebuilt:
        again = await rebuilt.raw_objects(handle.id)
    steps = sorted(k for k in original if "/steps/" in k)
    assert steps == sorted(k for k in again if "/steps/" in k)
    assert all(original[k] == again[k] for k in steps)

    # With REWIND_STORE_COMPRESSION=none the same objects are plain JSON: what `gunzip -c` makes of the
    # gzip'd ones, byte for byte. Mirroring them again with gzip finds them there (no conflict).
    plain = tmp_path / "plain"
    code, out, err = await _mirror(settings, f"file://{plain}", handle.id, REWIND_STORE_COMPRESSION="none")
    assert code == 0, err
    as_stored = {k: (plain / k).read_bytes() for k in steps}
    assert all(original[k][:2] == b"\x1f\x8b" and as_stored[k][:1] == b"{" for k in steps)
    assert all(gzip.decompress(original[k]) == as_stored[k] for k in steps)
    code, out, err = await _mirror(settings, f"file://{plain}", handle.id)
    assert code == 0, err
    assert sum(b["written"] for b in json.loads(out)["branches"]) == 0
    assert {k: (plain / k).read_bytes() for k in steps} == as_stored
