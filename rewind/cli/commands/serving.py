"""Serving: `rewind serve` (the HTTP face: routes, server-sent events, the live page)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from rewind.cli.commands.arguments import at_least
from rewind.cli.commands.common import emit
from rewind.settings.config import Settings

# rewind.serve.server's defaults, spelled out: `rewind --help` imports no web framework (a test checks they agree).
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8710
PORT = at_least(0, int, "a TCP port")


def _port(text: str) -> int:
    port = PORT(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port; use 1-65535 (0: a free one)")
    return port


async def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from rewind.serve.server import configure_logging, serve

    def announce(info: dict[str, Any]) -> None:
        url = info["url"]
        who = ("every request needs REWIND_API_KEY (x-api-key, Authorization: Bearer, or ?api_key= once in a browser)"
               if info["api_key"] else "no API key: this machine only")
        emit(info, args.json, f"rewind serve on {url} ({who}); routes: {url}/docs; a run live: {url}/runs/RUN "
                              "(Ctrl-C stops it)")
        sys.stdout.flush()

    configure_logging(settings)
    await serve(settings, args.host, args.port, announce=announce)
    return 0


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this group's commands to the parser (`command(name, help, handler=...)` makes one)."""
    p = command("serve", "serve runs over HTTP: start, status, approve, fork, a run's events as server-sent events, "
                         "and its live page in a browser (docs/streaming.md)", handler=cmd_serve,
                json_help="print where it listens as one JSON document on stdout (url, host, port, api_key)")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"the address to listen on (default {DEFAULT_HOST}; any other than loopback needs "
                        "REWIND_API_KEY)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"the port to listen on (default {DEFAULT_PORT}; 0: a free one, printed)")
