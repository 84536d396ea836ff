"""Faults of the database stores (SQLite, PostgreSQL), with real processes: writers
killed mid-write leave no torn object, and writers in several processes racing on the
same keys each win only what the database let them create. (A conflicting write is
refused in the conformance suite; a server down at start or mid-run is in
tests/rewind/test_database_stores_as_user.py.)
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from checkpoint_bridge.stores import open_object_store

HERE = Path(__file__).parent
REPO = HERE.parents[2]


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(HERE / "store_process.py"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return f"{request.getfixturevalue('postgres_url')}?schema=faults_{uuid.uuid4().hex[:8]}"
    return f"sqlite://{tmp_path / 'faults.db'}"


async def test_a_writer_killed_mid_write_leaves_no_torn_object(database_url: str) -> None:
    for round_ in range(3):
        writer = _spawn(database_url, "torn")
        reported: list[str] = []
        deadline = time.monotonic() + 60
        assert writer.stdout is not None
        while len(reported) < 4 + round_:
            line = await asyncio.to_thread(writer.stdout.readline)
            assert line, f"the writer died: {writer.stderr.read() if writer.stderr else ''}"
            reported.append(line.strip())
            assert time.monotonic() < deadline
        # Killed while it writes its next (large) object.
        await asyncio.sleep(0.01 * round_)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        store = open_object_store(database_url)
        try:
            keys = await store.list("torn/")
            assert set(reported) <= set(keys), "a write that returned is not there"
            for key in keys:
                data = await store.get(key)
                assert key == f"torn/{hashlib.sha256(data).hexdigest()}.bin", f"{key} is torn ({len(data)} bytes)"
        finally:
            await store.aclose()


async def test_writers_in_several_processes_race_and_each_key_has_one_winner(database_url: str) -> None:
    n, tags = 60, ["p0", "p1", "p2", "p3"]
    procs = [_spawn(database_url, "race", str(n), tag) for tag in tags]
    outcomes = {}
    for tag, proc in zip(tags, procs):
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
        assert proc.returncode == 0, err
        outcomes[tag] = json.loads(out)
    store = open_object_store(database_url)
    try:
        assert len(await store.list("race/")) == n
        for i in range(n):
            key = f"race/{i:04d}.json"
            winners = [t for t in tags if outcomes[t][key] == "won"]
            assert len(winners) == 1, (key, winners)
            assert json.loads(await store.get(key))["writer"] == winners[0]
    finally:
        await store.aclose()
