"""The embedded dev server when a port it picked is taken before it binds it (another
socket got it in between): it starts again on new ports instead of failing."""

from __future__ import annotations

import socket

from rewind import embedded
from rewind.embedded import DevServer


def test_a_port_taken_before_the_server_binds_it_is_picked_again(tmp_path, monkeypatch) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    picks = []
    real = embedded.free_port

    def free_port() -> int:
        # The third pick of the first start is its HTTP port: hand it the port the blocker holds.
        picks.append(taken if len(picks) == 2 else real())
        return picks[-1]

    monkeypatch.setattr(embedded, "free_port", free_port)
    try:
        server = DevServer.start(tmp_path / "temporal.db", headless=True)
        try:
            assert server.healthy()
            log = server.log_file.read_text()
            assert "address already in use" in log  # the first start met the taken port
            assert taken in picks and len(picks) >= 8  # and a second start picked new ones
        finally:
            server.stop()
    finally:
        blocker.close()
