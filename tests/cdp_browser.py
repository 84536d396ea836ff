"""Headless Chromium driven over its DevTools protocol: a page that changes while the test
watches (the live page of `rewind serve`), where `--dump-dom` sees one moment only.

Chromium is the Debian package (/usr/bin/chromium); nothing is downloaded. The protocol
is a websocket (the `websockets` package) to the browser; a page is a target attached in
flat mode, whose commands carry its session id.

    async with Chromium.launch() as browser:
        page = await browser.new_page(url)
        await page.wait_for("document.body.dataset.live === 'live'")
        text = await page.evaluate("document.body.innerText")
        await page.reload()
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--remote-debugging-port=0", "--remote-allow-origins=*"]


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


class BrowserError(AssertionError):
    pass


class Page:
    def __init__(self, browser: "Chromium", session: str) -> None:
        self._browser = browser
        self._session = session

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self._browser.send(method, session=self._session, **params)

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout_s: float = 60.0, what: str = "") -> Any:
        """Poll until `expression` is truthy in the page; its value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while True:
            try:
                last = await self.evaluate(expression)
            except BrowserError:  # the page is (re)loading
                last = None
            if last:
                return last
            if time.monotonic() > deadline:
                text = await self.evaluate("document.body ? document.body.innerText.slice(0, 3000) : ''")
                raise BrowserError(f"{what or expression}: not so after {timeout_s:.0f} s; the page said:\n{text}")
            await asyncio.sleep(0.2)

    async def navigate(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def reload(self) -> None:
        await self.send("Page.reload", ignoreCache=True)


class Chromium:
    """One headless Chromium with a profile of its own (removed after)."""

    def __init__(self, proc: asyncio.subprocess.Process, ws: Any, profile: str) -> None:
        self._proc, self._ws, self._profile = proc, ws, profile
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    @asynccontextmanager
    async def launch(cls, chromium: str | None = None) -> AsyncIterator["Chromium"]:
        import websockets

        chromium = chromium or chromium_path()
        if chromium is None:
            raise BrowserError("no chromium on this machine")
        profile = tempfile.mkdtemp(prefix="rewind-cdp-profile-")
        proc = await asyncio.create_subprocess_exec(chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank",
                                                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                                                    env={**os.environ, "HOME": profile})
        browser: Chromium | None = None
        try:
            url = await _devtools_url(proc)
            ws = await websockets.connect(url, max_size=64 * 1024 * 1024)
            browser = cls(proc, ws, profile)
            yield browser
        finally:
            if browser is not None:
                browser._reader.cancel()
                await browser._ws.close()
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            shutil.rmtree(profile, ignore_errors=True)

    async def _read(self) -> None:
        async for raw in self._ws:
            message = json.loads(raw)
            future = self._waiting.pop(message.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(message)

    async def send(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = future
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self._ws.send(json.dumps(message))
        answer = await asyncio.wait_for(future, 60)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def new_page(self, url: str) -> Page:
        target = (await self.send("Target.createTarget", url="about:blank"))["targetId"]
        session = (await self.send("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        page = Page(self, session)
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.navigate(url)
        return page


async def _devtools_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    said = []
    while True:
        line = await asyncio.wait_for(proc.stderr.readline(), 60)
        if not line:
            raise BrowserError("chromium exited before it listened: " + "".join(said)[-2000:])
        text = line.decode(errors="replace")
        said.append(text)
        found = re.search(r"DevTools listening on (ws://\S+)", text)
        if found:
            # Keep reading its stderr, or a chatty browser blocks on a full pipe.
            asyncio.get_running_loop().create_task(_drain(proc))
            return found[1]


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stderr is not None
    while await proc.stderr.readline():
        pass


__all__ = ["BrowserError", "Chromium", "Page", "chromium_path"]
