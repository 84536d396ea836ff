"""A client started right after `rewind dev &` (the docs' own two lines) waits for the folder's dev
server while it comes up at the client's address, instead of failing; any other unreachable
address fails at once, as before."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from rewind.settings.config import Settings
from rewind.temporal.connect import open_connection
from rewind.temporal.dev_server import DevServer, free_port
from workflows.vocabulary.errors import TemporalUnreachableError


def _hold(home, address: str, server_pid: int) -> None:
    """What a starting `rewind dev` writes next to its database: itself, its server, the address."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "temporal.db.lock").write_text(json.dumps({"pid": os.getpid(), "server_pid": server_pid,
                                                       "address": address, "shared": False}))


async def test_a_client_waits_for_its_folders_dev_server_that_is_still_starting(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    home = tmp_path / "home"
    settings = Settings(temporal_address=address, home=home)
    server: DevServer | None = None
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the server's pid, meanwhile
    try:
        _hold(home, address, sleeper.pid)

        async def start_late() -> None:
            nonlocal server
            await asyncio.sleep(1.5)
            server = await asyncio.to_thread(DevServer.start, tmp_path / "temporal.db", port=port, headless=True)

        starting = asyncio.ensure_future(start_late())
        connection = await open_connection(settings)  # nothing listens yet: it can only succeed by waiting
        await starting
        assert connection is not None and server is not None
    finally:
        sleeper.kill()
        if server is not None:
            server.stop()


async def test_an_unreachable_address_nobody_is_starting_fails_at_once(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(TemporalUnreachableError):
        await open_connection(Settings(temporal_address=address, home=tmp_path / "home"))
    # A holder for another address, or one whose processes are gone, is no reason to wait either.
    _hold(tmp_path / "home", f"127.0.0.1:{free_port()}", os.getpid())
    with pytest.raises(TemporalUnreachableError):
        await open_connection(Settings(temporal_address=address, home=tmp_path / "home"))
