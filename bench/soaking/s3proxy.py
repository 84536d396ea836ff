"""An HTTP proxy between Rewind and moto's S3 server that has outages on command.

moto keeps its state; the proxy only changes what the client sees, for the
length of a window:
    refuse   the port is closed: every connection is refused
    hang     requests are held until the window ends, then the connection is reset
             (what a client sees of a server that stopped answering)
    500      every request answers 500 InternalError
    503      every request answers 503 SlowDown
Outside windows every request passes through unchanged.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

_S3_ERROR = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
             "<RequestId>soak-proxy</RequestId></Error>")
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}
MODES = ("refuse", "hang", "500", "503")


class FaultProxy:
    def __init__(self, upstream: str, port: int) -> None:
        self.upstream = upstream.rstrip("/")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.mode: str | None = None
        self._until = 0.0
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: aiohttp.ClientSession | None = None
        self.answered: dict[str, int] = {}  # mode -> requests it broke

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=60))
        await self._open()

    async def _open(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def window(self, mode: str, seconds: float) -> None:
        """An outage of `mode` for `seconds` (returns when it is over)."""
        assert mode in MODES, mode
        self.mode, self._until = mode, time.monotonic() + seconds
        if mode == "refuse" and self._site is not None:
            await self._site.stop()
            self._site = None
        try:
            await asyncio.sleep(seconds)
        finally:
            self.mode = None
            if self._site is None:
                await self._open()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        mode = self.mode
        if mode is not None:
            self.answered[mode] = self.answered.get(mode, 0) + 1
        if mode == "hang":
            await asyncio.sleep(max(0.0, self._until - time.monotonic()))
            if request.transport is not None:  # None: the client gave up first (its read timeout)
                request.transport.abort()
            return web.Response(status=500)
        if mode == "500":
            return self._error(500, "InternalError", "soak: injected internal error")
        if mode == "503":
            return self._error(503, "SlowDown", "soak: injected slow down")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                             data=body, allow_redirects=False) as resp:
                data = await resp.read()
                out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(status=resp.status, headers=out, body=data)
        except aiohttp.ClientError:
            return self._error(503, "ServiceUnavailable", "soak proxy: upstream unreachable")

    @staticmethod
    def _error(status: int, code: str, message: str) -> web.Response:
        return web.Response(status=status, body=_S3_ERROR.format(code=code, message=message).encode(),
                            content_type="application/xml")
