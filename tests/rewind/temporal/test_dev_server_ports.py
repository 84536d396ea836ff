"""The embedded dev server when a port it picked is taken before it binds it (another
socket got it in between): it starts again on new ports instead of failing."""

from __future__ import annotations

import socket

import pytest

from rewind.temporal import dev_server
from rewind.temporal.dev_server import DevServer


def test_a_port_taken_before_the_server_binds_it_is_picked_again(tmp_path, monkeypatch) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    picks = []
    real = dev_server.free_port

    def free_port() -> int:
        # The third pick of the first start is its HTTP port: hand it the port the blocker holds.
        picks.append(taken if len(picks) == 2 else real())
        return picks[-1]

    monkeypatch.setattr(dev_server, "free_port", free_port)
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
        real_pick, real_open = dev_server.free_port, dev_server.port_open
        checked = []

        def free_port() -> int:
            picks.append(other.port if not picks else real_pick())
            return picks[-1]

        def port_open(host: str, port: int) -> bool:
            checked.append(port)
            # The free-port check before the start saw it free (the other server came just after).
            return False if len(checked) == 1 and port == other.port else real_open(host, port)

        monkeypatch.setattr(dev_server, "free_port", free_port)
        monkeypatch.setattr(dev_server, "port_open", port_open)
        server = DevServer.start(tmp_path / "temporal.db", headless=True)
        try:
            assert server.port != other.port and server.process.poll() is None
            other.stop()
            assert server.healthy()  # its own port, not the other server's
        finally:
            server.stop()
    finally:
        other.stop()


def test_a_restart_on_fixed_ports_tries_them_again_for_as_long_as_it_is_told(tmp_path, monkeypatch) -> None:
    """Both ports given (a restart that clients find where it was): a port taken for a moment
    fails the start at once by default, and is tried again with `fixed_ports_wait_s`."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    taken = blocker.getsockname()[1]
    real = dev_server.free_port
    picks: list[int] = []

    def free_port() -> int:
        # The first port a start picks itself (its HTTP port) is the one the blocker holds.
        picks.append(taken if not picks else real())
        return picks[-1]

    monkeypatch.setattr(dev_server, "free_port", free_port)
    port, ui_port = real(), real()
    try:
        with pytest.raises(dev_server.ConfigError, match="exited"):
            DevServer.start(tmp_path / "once.db", port=port, ui_port=ui_port, headless=True)
        assert "address already in use" in (tmp_path / "once.log").read_text()
        picks.clear()
        server = DevServer.start(tmp_path / "temporal.db", port=port, ui_port=ui_port, headless=True,
                                 fixed_ports_wait_s=30)
        try:
            assert server.healthy() and (server.port, server.ui_port) == (port, ui_port)
            assert "address already in use" in server.log_file.read_text()  # its first try met the taken port
        finally:
            server.stop()
    finally:
        blocker.close()


def test_the_ports_it_is_given_are_never_picked_for_its_other_ports(tmp_path, monkeypatch) -> None:
    """Given ports are not bound until the server starts, so the kernel may hand one out
    again when the server's HTTP and metrics ports are picked (a CI run met it: the HTTP
    API's listen failed on the gRPC port it had been given)."""
    port, ui_port = dev_server.free_port(), dev_server.free_port()
    real = dev_server.free_port
    handed_again = iter([port, ui_port])
    monkeypatch.setattr(dev_server, "free_port", lambda: next(handed_again, None) or real())
    server = DevServer.start(tmp_path / "temporal.db", port=port, ui_port=ui_port, headless=True)
    try:
        assert server.healthy() and server.address.endswith(f":{port}")
        assert "address already in use" not in server.log_file.read_text()
    finally:
        server.stop()
