"""Running `rewind serve`: the app on uvicorn, on the address asked for.

The socket is bound here, before uvicorn starts: an address in use or not this
machine's is one line naming the fix (uvicorn would log it and exit), and `--port 0`
takes a free port, which the first line printed says. Ctrl-C or SIGTERM stops it: the
open streams are ended and the process exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from typing import Any, Callable, Iterator

import uvicorn

from rewind.serve.auth import check_bind, is_loopback
from rewind.settings.config import Settings
from workflows.vocabulary.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8710
# How long open streams get to end when the server stops.
GRACEFUL_S = 5


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (0: a free port), or one line saying why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"rewind serve --host {host}: not an address of this machine ({exc.strerror})") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE (Linux, macOS)
            raise ConfigError(f"port {port} is in use on {host}: stop what listens there, or choose another with "
                              "--port") from None
        raise ConfigError(f"rewind serve cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"


async def serve(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
                announce: Callable[[dict[str, Any]], None] = lambda _info: None) -> None:
    """Serve until stopped; `announce` gets where (url, host, port, api_key: required or not)
    once the socket listens."""
    from rewind.serve.app import build_app

    check_bind(host, settings.api_key)
    sock = bind(host, port)
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(settings), log_level=settings.log_level.lower(), access_log=False,
                            lifespan="on", timeout_graceful_shutdown=GRACEFUL_S, server_header=False)
    server = _Server(config)
    announce({"url": url_of(host, port), "host": host, "port": port, "api_key": bool(settings.api_key),
              "loopback_only": is_loopback(host)})
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()


class _Server(uvicorn.Server):
    """uvicorn's Server, stopped by Ctrl-C or SIGTERM without raising the signal again after
    (uvicorn's does, to end the process as the signal would: here the command exits 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def configure_logging(settings: Settings) -> None:
    """The access log and warnings on stderr, at REWIND_LOG_LEVEL."""
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "bind", "configure_logging", "serve", "url_of"]
