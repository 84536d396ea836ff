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


def test_a_port_another_temporal_server_took_is_not_mistaken_for_its_own(tmp_path, monkeypatch) -> None:
    # The race: the picked port looked free, another test's dev server bound it first, and
    # that server answers the health check while this one exits ("address already in use").
    other = DevServer.start(tmp_path / "other.db", headless=True)
    try:
        picks = []
        real_pick, real_open = embedded.free_port, embedded.port_open
        checked = []

        def free_port() -> int:
            picks.append(other.port if not picks else real_pick())
            return picks[-1]

        def port_open(host: str, port: int) -> bool:
            checked.append(port)
            # The free-port check before the start saw it free (the other server came just after).
            return False if len(checked) == 1 and port == other.port else real_open(host, port)

        monkeypatch.setattr(embedded, "free_port", free_port)
        monkeypatch.setattr(embedded, "port_open", port_open)
        server = DevServer.start(tmp_path / "temporal.db", headless=True)
        try:
            assert server.port != other.port and server.process.poll() is None
            other.stop()
            assert server.healthy()  # its own port, not the other server's
        finally:
            server.stop()
    finally:
        other.stop()
