"""One MCP client session per configured server, held by the worker.

The worker starts each stdio server itself (and reaches Streamable HTTP servers
at their URL) when it starts, lists their tools once, and keeps the session for
its lifetime. A session lives in a task of its own: the SDK's sessions are
anyio task groups, which must be entered and left by one task, while tool calls
arrive in the tasks of many activities.

A server that died (its process exited, the connection closed) is started again
on the next call, and the worker's log says so; the call that saw it die says so
in its error. Whether that call may simply be sent again is the caller's choice
(`once`): a read-only or idempotent call is; a call that must not be sent twice
is checked with a ping first, so a dead server is restarted before the request
goes out, and a connection lost after sending is reported as `SentUnanswered`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from activities.tools.mcp.config import McpServerConfig
from workflows.vocabulary.errors import ConfigError

log = logging.getLogger("rewind.mcp")

# How long the worker waits for a server to start and list its tools.
START_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 10.0


class ServerUnavailable(Exception):
    """The server cannot be reached or started: nothing was sent (retrying may help)."""


class ToolGone(Exception):
    """The server (after a restart) no longer lists the tool: nothing was sent."""


class SentUnanswered(Exception):
    """The request was sent (or may have been) and no answer came: the effect's state is unknown."""


class McpServer:
    """One configured server and its session (see the module docstring)."""

    def __init__(self, config: McpServerConfig, log_dir: Path | None = None) -> None:
        self.config = config
        # A stdio server's stderr goes to its own file, not the worker's (a worker's error stays one line).
        self.stderr_path = log_dir / f"mcp-{config.name}.log" if log_dir is not None else None
        self.name = config.name
        self.server_version = ""
        self.tools: dict[str, Any] = {}  # name -> mcp.types.Tool, as last listed
        self.restarts = 0
        self._session: Any = None
        self._generation = 0
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Connect and list the tools; a failure is a ConfigError naming the server (worker start)."""
        try:
            await self._connect()
        except ServerUnavailable as exc:
            raise ConfigError(f"{self.config.where}: {exc}") from None

    async def _connect(self) -> None:
        ready: asyncio.Future[tuple[Any, Any, list[Any]]] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        owner = asyncio.create_task(self._own(ready, stop), name=f"mcp-session-{self.name}")
        try:
            session, init, tools = await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            stop.set()
            owner.cancel()
            raise ServerUnavailable(f"MCP server {self.name} ({self.config.describe()}) did not start and list its "
                                    f"tools within {START_TIMEOUT_S:.0f} s") from None
        except Exception as exc:  # noqa: BLE001 - whatever the transport raised: one line
            stop.set()
            raise ServerUnavailable(f"MCP server {self.name} ({self.config.describe()}) cannot be reached: "
                                    f"{_reason(exc)}{self._last_words()}") from None
        info = getattr(init, "server_info", None)
        self.server_version = " ".join(p for p in (getattr(info, "name", ""), getattr(info, "version", "")) if p)
        self.tools = {t.name: t for t in tools}
        self._session, self._owner, self._stop = session, owner, stop
        self._generation += 1

    async def _own(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """The session's own task: open it, hand it over, hold it until stopped."""
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(ClientSession(read, write))
                init = await session.initialize()
                tools: list[Any] = []
                cursor = None
                for _ in range(100):  # a server that pages forever cannot hang the worker
                    from mcp.types import PaginatedRequestParams

                    page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                if not ready.done():
                    ready.set_result((session, init, tools))
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the session
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ServerUnavailable("cancelled"))
            elif not stop.is_set():
                log.warning("MCP server %s: its session ended: %s", self.name, _reason(exc))

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.transport == "stdio":
            from mcp import StdioServerParameters, stdio_client

            params = StdioServerParameters(command=str(config.command), args=list(config.args),
                                           env=dict(config.env) or None, cwd=config.cwd)
            errlog: Any = sys.stderr
            if self.stderr_path is not None:
                self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
                errlog = stack.enter_context(self.stderr_path.open("a"))
            return stdio_client(params, errlog=errlog)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(config.headers))
        return streamable_http_client(str(config.url), http_client=client)

    def _last_words(self) -> str:
        """The last line the server wrote on stderr, to say why it did not start."""
        if self.stderr_path is None:
            return ""
        try:
            lines = [line.strip() for line in self.stderr_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return ""
        return f" (its last words on stderr: {lines[-1][:200]})" if lines else ""

    async def _live(self) -> tuple[Any, int]:
        async with self._lock:
            if self._session is None:
                await self._connect()
            return self._session, self._generation

    async def _restart(self, generation: int, why: str) -> None:
        """Start the server again, unless another call already did since `generation`."""
        async with self._lock:
            if generation != self._generation:
                return
            log.warning("MCP server %s (%s) %s; restarting it", self.name, self.config.describe(), why)
            await self._close_session()
            self._session = None
            self.restarts += 1
            try:
                await self._connect()
            except ServerUnavailable as exc:
                log.warning("%s; the next call tries again", exc)
                return
            log.warning("MCP server %s restarted (%s, restart %d of this worker)", self.name,
                        self.server_version or "no version", self.restarts)

    async def call(self, tool: str, arguments: dict[str, Any], *, meta: dict[str, Any] | None, timeout_s: float,
                   once: bool, before_send: Any = None) -> Any:
        """The server's CallToolResult. `once`: never sent twice (see the module docstring).
        Raises ServerUnavailable (not sent), SentUnanswered (sent, no answer) or the SDK's
        MCPError for an error the server answered with."""
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        for attempt in (1, 2):
            session, generation = await self._live()
            if tool not in self.tools:
                raise ToolGone(tool)
            if once:
                try:
                    await asyncio.wait_for(session.send_ping(), PING_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - a server that cannot answer a ping gets a new start
                    await self._restart(generation, f"did not answer a ping ({_reason(exc)})")
                    if attempt == 2:
                        raise ServerUnavailable(f"MCP server {self.name} does not answer (restarted; nothing sent)") from None
                    continue
            if before_send is not None:
                await before_send()
            try:
                return await session.call_tool(tool, arguments, read_timeout_seconds=timeout_s, meta=meta)
            except MCPError as exc:
                if exc.code == REQUEST_TIMEOUT:
                    raise SentUnanswered(f"MCP server {self.name} did not answer {tool} within {timeout_s:g} s") from None
                if exc.code != CONNECTION_CLOSED:
                    raise
                await self._restart(generation, f"closed the connection during a call of {tool}")
                if once or attempt == 2:
                    raise SentUnanswered(f"MCP server {self.name} stopped during the call of {tool} (the worker "
                                         "restarted it)") from None
                # Read-only or idempotent: the same request once more, on the new session.
        raise AssertionError("unreachable")

    async def _close_session(self) -> None:
        stop, owner = self._stop, self._owner
        self._stop = self._owner = None
        if stop is not None:
            stop.set()
        if owner is not None:
            try:
                await asyncio.wait_for(owner, 10)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing anyway
                owner.cancel()

    async def close(self) -> None:
        async with self._lock:
            await self._close_session()
            self._session = None


def _reason(exc: BaseException) -> str:
    """A short phrase for what a transport raised (an ExceptionGroup: its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


__all__ = ["McpServer", "ServerUnavailable", "SentUnanswered", "ToolGone", "START_TIMEOUT_S"]
