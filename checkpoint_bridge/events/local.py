"""The default bus: each worker process serves its events on loopback (REWIND_EVENTS=local).

A worker's hub listens on 127.0.0.1 at a port the system picks and announces itself with a
file in the live folder (REWIND_HOME/live/hub-PID-ID.json, readable by its owner only:
it holds the token a reader must present). A reader connects to every hub announced
there, sends `{"token": ..., "run": RUN}` and gets, as lines of JSON, what the hub holds of
that run (its recent durable events, each call in flight from its current attempt's start),
then every message of the run as it is published.

The hub never waits for a reader: each reader has a bounded queue, and one that falls
behind by that much is disconnected (it reconnects and resumes from its cursor). What a
hub holds of a run is bounded too (RECENT durable events; the live ones of calls in
flight), and forgotten once the run has been quiet for IDLE_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator

from checkpoint_bridge.events.window import RunWindow, window_update

log = logging.getLogger("rewind.events")

QUEUE = 10_000  # messages a reader may fall behind before it is disconnected
IDLE_S = 900.0  # a run quiet this long is forgotten
RESCAN_S = 0.5  # how often a reader looks for hubs that started


class _Reader:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=QUEUE)
        self.dropped = False

    def offer(self, line: bytes) -> None:
        if self.dropped:
            return
        try:
            self.queue.put_nowait(line)
        except asyncio.QueueFull:
            # Never wait for a reader: this one resumes from its cursor when it reconnects.
            self.dropped = True
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class LocalHub:
    """One worker process's hub (its publisher)."""

    def __init__(self, live_dir: Path) -> None:
        self._dir = live_dir
        self._token = secrets.token_hex(16)
        self._runs: dict[str, RunWindow] = {}
        self._readers: dict[str, set[_Reader]] = {}
        self._server: asyncio.AbstractServer | None = None
        self._file: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self._dir.mkdir(parents=True, exist_ok=True)
        name = f"hub-{os.getpid()}-{secrets.token_hex(4)}.json"
        tmp = self._dir / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"host": "127.0.0.1", "port": port, "pid": os.getpid(), "token": self._token}, out)
        os.replace(tmp, self._dir / name)
        self._file = self._dir / name
        self._sweeper = asyncio.create_task(self._sweep())

    async def aclose(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.unlink()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for readers in self._readers.values():
            for reader in readers:
                reader.offer(b"")  # wake its writer, which sees the server closing
                reader.writer.close()
        if self._server is not None:
            self._server.close()

    # -- publishing (the worker's event loop) ------------------------------------------------
    def publish(self, message: dict[str, Any]) -> None:
        try:
            line = json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"
            run_id = str(message.get("run_id", ""))
            window = self._runs.get(run_id)
            if window is None:
                window = self._runs[run_id] = RunWindow()
            window_update(window, message, line)
            for reader in self._readers.get(run_id, ()):
                reader.offer(line)
        except Exception:  # noqa: BLE001 - an event is never worth a run: say it, go on
            log.warning("could not publish an event", exc_info=True)

    def publish_threadsafe(self, message: dict[str, Any]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing: the worker stops
                loop.call_soon_threadsafe(self.publish, message)

    # -- readers ------------------------------------------------------------------------------
    async def _serve(self, reader_stream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reader: _Reader | None = None
        run_id = ""
        try:
            hello = json.loads(await asyncio.wait_for(reader_stream.readline(), 10.0) or b"{}")
            if not secrets.compare_digest(str(hello.get("token", "")), self._token):
                return
            run_id = str(hello.get("run", ""))
            reader = _Reader(writer)
            window = self._runs.get(run_id)
            if window is not None:  # the window first, then what comes
                for line in window.durable:
                    reader.offer(line)
                for _, lines in window.calls.values():
                    for line in lines:
                        reader.offer(line)
            self._readers.setdefault(run_id, set()).add(reader)
            while True:
                line = await reader.queue.get()
                if line is None or not line:
                    return
                writer.write(line)
                await writer.drain()
        except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError):
            return
        finally:
            if reader is not None:
                self._readers.get(run_id, set()).discard(reader)
            writer.close()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(60.0)
            now = time.monotonic()
            for run_id in [r for r, w in self._runs.items() if now - w.touched > IDLE_S and not self._readers.get(r)]:
                del self._runs[run_id]


class LocalSubscription:
    """A reader's connections to every hub of the live folder, for one run."""

    def __init__(self, live_dir: Path, run_id: str) -> None:
        self._dir = live_dir
        self._run = run_id
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._hubs: dict[str, asyncio.Task[None]] = {}
        self._scanner: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._scan()
        self._scanner = asyncio.create_task(self._rescan())

    def _scan(self) -> None:
        try:
            files = [p for p in self._dir.glob("hub-*.json")]
        except OSError:
            return
        for path in files:
            if path.name not in self._hubs or self._hubs[path.name].done():
                self._hubs[path.name] = asyncio.create_task(self._follow(path))

    async def _rescan(self) -> None:
        while True:
            await asyncio.sleep(RESCAN_S)
            self._scan()

    async def _follow(self, path: Path) -> None:
        try:
            info = json.loads(path.read_text())
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(info.get("host", "127.0.0.1"), int(info["port"])), 2.0)
        except (OSError, ValueError, KeyError, asyncio.TimeoutError):
            if _dead(path):
                with contextlib.suppress(OSError):
                    path.unlink()  # a hub whose worker died without removing it
            return
        try:
            writer.write(json.dumps({"token": info.get("token"), "run": self._run}).encode() + b"\n")
            await writer.drain()
            while True:
                line = await reader.readline()
                if not line:
                    return
                with contextlib.suppress(ValueError):
                    self._queue.put_nowait(json.loads(line))
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._queue.get()

    async def aclose(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
        for task in self._hubs.values():
            task.cancel()
        await asyncio.gather(*self._hubs.values(), *( [self._scanner] if self._scanner else []),
                             return_exceptions=True)


def _dead(path: Path) -> bool:
    try:
        pid = int(json.loads(path.read_text()).get("pid"))
    except (OSError, ValueError, TypeError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class LocalBus:
    def __init__(self, live_dir: Path) -> None:
        self._dir = live_dir
        self.description = f"this machine's workers (announced in {live_dir})"
        self._hub: LocalHub | None = None

    async def start_publisher(self) -> LocalHub:
        if self._hub is None:
            self._hub = LocalHub(self._dir)
            await self._hub.start()
        return self._hub

    async def subscribe(self, run_id: str) -> LocalSubscription:
        sub = LocalSubscription(self._dir, run_id)
        await sub.start()
        return sub

    async def aclose(self) -> None:
        if self._hub is not None:
            await self._hub.aclose()
            self._hub = None


__all__ = ["LocalBus", "LocalHub", "LocalSubscription"]
