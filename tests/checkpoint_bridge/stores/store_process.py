"""A process that uses an object store, for the fault tests (run as a script).

    store_process.py URL torn          write large objects named by their sha256 until killed,
                                       printing each key once its write returned
    store_process.py URL race N TAG    put_if_absent N shared keys with bytes of its own TAG,
                                       printing {key: "won" | "lost"} as JSON
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys

from checkpoint_bridge.stores import open_object_store
from workflows.vocabulary.errors import CheckpointExistsError


async def torn(url: str) -> None:
    store = open_object_store(url)
    i = 0
    while True:
        data = os.urandom(64) * (1 + (i % 4) * 16 * 1024)  # 64 B to 3 MiB
        key = f"torn/{hashlib.sha256(data).hexdigest()}.bin"
        await store.put_if_absent(key, data)
        print(key, flush=True)
        i += 1


async def race(url: str, n: int, tag: str) -> None:
    store = open_object_store(url)
    outcome = {}
    for i in range(n):
        key = f"race/{i:04d}.json"
        try:
            await store.put_if_absent(key, json.dumps({"writer": tag, "i": i}).encode())
            outcome[key] = "won"
        except CheckpointExistsError:
            outcome[key] = "lost"
    await store.aclose()
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    url, mode, *rest = sys.argv[1:]
    if mode == "torn":
        asyncio.run(torn(url))
    else:
        asyncio.run(race(url, int(rest[0]), rest[1]))
