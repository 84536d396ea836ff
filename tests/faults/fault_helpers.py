"""Shared helpers of the fault-injection tests (issue 7).

Nothing here is a mock of Rewind: the faults are real (SIGKILL of a worker
process, a Temporal server killed and restarted on its database, an HTTP
proxy that breaks S3 writes on the wire), and the checks read what a user
would read: the checkpoint store and Temporal's history.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import aiohttp
from aiohttp import web
from helpers import read_events

from workflows.vocabulary.ids import checkpoint_id

# -- scripts and events -------------------------------------------------------


def add_script(model: Any, turns: list[dict], name: str | None = None) -> str:
    """Register `turns` on the scripted model; returns the model name to run them."""
    name = name or f"fault-{uuid.uuid4().hex[:8]}"
    model.add_script(name, turns)
    return f"script:{name}"


async def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0, poll_s: float = 0.02) -> Any:
    """Poll a sync or async predicate until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        await asyncio.sleep(poll_s)


async def wait_for_event(path: Path, kind: str, timeout_s: float = 60.0, **match: Any) -> dict:
    """The first REWIND_TEST_EVENTS line of `kind` whose fields equal `match`."""

    def find() -> dict | None:
        for e in read_events(path):
            if e["kind"] == kind and all(e.get(k) == v for k, v in match.items()):
                return e
        return None

    return await wait_until(find, f"event {kind!r} {match or ''}", timeout_s, poll_s=0.005)


# -- transcripts ----------------------------------------------------------------


def normalized(transcript: list[dict]) -> list[tuple]:
    """Roles, contents, tool_call_ids and tool names/arguments of a conversation."""
    out = []
    for m in transcript:
        calls = tuple(
            (c.get("id"), c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
            for c in m.get("tool_calls") or []
        )
        out.append((m.get("role"), m.get("content"), m.get("tool_call_id"), calls))
    return out


def assert_well_formed(transcript: list[dict]) -> None:
    """No doubled message, unique tool_call_ids, every tool message answers one pending call."""
    canon = [json.dumps(m, sort_keys=True) for m in transcript]
    doubled = [c for c, n in Counter(canon).items() if n > 1]
    assert not doubled, f"doubled messages in the transcript: {doubled}"
    roles = Counter(m["role"] for m in transcript)
    assert roles["system"] == 1 and roles["user"] == 1, roles
    call_ids = [c["id"] for m in transcript if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answer_ids = [m["tool_call_id"] for m in transcript if m["role"] == "tool"]
    assert len(call_ids) == len(set(call_ids)), f"tool call ids repeat: {call_ids}"
    assert len(answer_ids) == len(set(answer_ids)), f"tool messages answer a call twice: {answer_ids}"
    assert sorted(call_ids) == sorted(answer_ids), (call_ids, answer_ids)
    pending: list[str] = []
    for m in transcript:
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending, f"tool message {m['tool_call_id']} answers no pending call"
            pending.remove(m["tool_call_id"])
        else:
            assert not pending, f"calls {pending} unanswered before a {m['role']} message"
            pending = [c["id"] for c in m.get("tool_calls") or []]
    assert not pending


def assert_same_transcript(got: list[dict], expected: list[dict]) -> None:
    assert normalized(got) == normalized(expected), (
        "transcript differs from the undisturbed run:\n"
        + "\n".join(f"  got      {g}\n  expected {e}" for g, e in zip(normalized(got), normalized(expected)) if g != e)
        + f"\n  lengths {len(got)} vs {len(expected)}"
    )
    assert got == expected  # and nothing else differs either


# -- checkpoint chains ------------------------------------------------------------


async def assert_chain(store: Any, run_id: str, last_step: int, branch_id: str = "main") -> list[Any]:
    """Steps 0..last_step all stored, each the child of the one before; returns them."""
    steps = await store.existing_steps(run_id, branch_id)
    assert steps == set(range(last_step + 1)), f"{run_id}: stored steps {sorted(steps)}, expected 0..{last_step}"
    checkpoints = [await store.load(checkpoint_id(run_id, branch_id, k)) for k in range(last_step + 1)]
    for k, cp in enumerate(checkpoints):
        assert cp.step_index == k and cp.status == "completed", (k, cp.status)
        expected_parent = None if k == 0 else checkpoint_id(run_id, branch_id, k - 1)
        assert cp.parent_id == expected_parent, f"step {k}: parent {cp.parent_id!r}, expected {expected_parent!r}"
        if k:
            before = checkpoints[k - 1]
            # Each checkpoint extends its parent's conversation and tool records.
            assert cp.messages[: len(before.messages)] == before.messages, f"step {k} rewrites history"
            assert len(cp.tool_call_cache) >= len(before.tool_call_cache)
            assert cp.created_at >= before.created_at
    return checkpoints


# -- Temporal ------------------------------------------------------------------------


async def pending_activities(handle: Any) -> list[tuple[str, int, int]]:
    """(activity type, state, attempt) of every pending activity of a workflow."""
    desc = await handle.describe()
    return [(p.activity_type.name, int(p.state), p.attempt) for p in desc.raw_description.pending_activities]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) != 0


# -- the flaky S3 proxy -----------------------------------------------------------------

_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


@dataclass
class ProxyStats:
    writes: int = 0
    failed_500: int = 0
    failed_503: int = 0
    dropped_before: int = 0  # connection dropped before the write reached S3
    dropped_after: int = 0  # S3 wrote the object, then the client lost the connection
    failed_after: int = 0  # S3 wrote the object, then the client got a 500
    delayed: int = 0
    passed: int = 0
    # key -> time.time() of the first write S3 accepted (whatever the client then saw)
    first_stored: dict[str, float] = field(default_factory=dict)
    # key -> status codes S3 answered to every write that reached it
    upstream_status: dict[str, list[int]] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return self.failed_500 + self.failed_503 + self.dropped_before + self.dropped_after + self.failed_after


class S3Proxy:
    """An HTTP proxy in front of an S3 server, on a free port of 127.0.0.1.

    It forwards every request as it came; a subclass's `_handle` misbehaves
    on purpose, with `_forward`, `_error` and `_drop` as its means.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._session = aiohttp.ClientSession(auto_decompress=False)
        return self.url

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        status, headers, data = await self._forward(request, await request.read())
        return web.Response(status=status, headers=headers, body=data)

    async def _forward(self, request: web.Request, body: bytes,
                       drop_headers: frozenset[str] = frozenset()) -> tuple[int, dict[str, str], bytes]:
        """The request sent on to S3 (without the headers named, in lower case, in
        `drop_headers`): S3's status, headers and body."""
        assert self._session is not None
        dropped = {"host", "content-length", *drop_headers}
        headers = {k: v for k, v in request.headers.items() if k.lower() not in dropped}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body, allow_redirects=False,
        ) as resp:
            data = await resp.read()
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
            return resp.status, out, data

    @staticmethod
    def _error(status: int, code: str, message: str) -> web.Response:
        return web.Response(status=status, body=_S3_ERROR.format(code=code, message=message).encode(),
                            content_type="application/xml")

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.abort()  # RST, no response: the client sees a broken connection
        return web.Response(status=500)


class SlowStepWrites(S3Proxy):
    """Holds every PUT of a step object `delay_s` before forwarding it."""

    def __init__(self, upstream: str, delay_s: float) -> None:
        super().__init__(upstream)
        self.delay_s = delay_s

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "PUT" and "/steps/" in request.path:
            await asyncio.sleep(self.delay_s)
        status, headers, data = await self._forward(request, body)
        return web.Response(status=status, headers=headers, body=data)


class FlakyS3Proxy(S3Proxy):
    """An HTTP proxy in front of an S3 server that breaks checkpoint writes.

    Of the PUT requests whose key matches `match` (checkpoint objects), a
    `fail_rate` share fails (500 InternalError, 503 SlowDown, or a dropped
    connection; some of the failures happen *after* S3 stored the object, so
    the client retries a write that in fact succeeded) and a `delay_rate`
    share is delayed by `delay_s`. Every other request passes through.
    Decisions come from `random.Random(seed)`, one draw per faultable write.
    """

    def __init__(self, upstream: str, *, seed: int = 7, fail_rate: float = 0.3, delay_rate: float = 0.2,
                 delay_s: tuple[float, float] = (1.0, 2.0), match: str = "/steps/") -> None:
        super().__init__(upstream)
        self.rng = random.Random(seed)
        self.fail_rate, self.delay_rate, self.delay_s, self.match = fail_rate, delay_rate, delay_s, match
        self.stats = ProxyStats()

    def _decide(self) -> tuple[str, float]:
        roll, delay = self.rng.random(), self.rng.uniform(*self.delay_s)
        fail = self.fail_rate / 6  # six kinds of failure, equally likely
        kinds = ["500", "503", "drop_before", "drop_after", "500_after", "503_slowdown"]
        if roll < self.fail_rate:
            return kinds[int(roll / fail)], 0.0
        if roll < self.fail_rate + self.delay_rate:
            return "delay", delay
        return "pass", 0.0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        faultable = request.method == "PUT" and self.match in request.path
        decision, delay = self._decide() if faultable else ("pass", 0.0)
        stats = self.stats
        if faultable:
            stats.writes += 1
        if decision == "500":
            stats.failed_500 += 1
            return self._error(500, "InternalError", "injected: we encountered an internal error")
        if decision == "503":
            stats.failed_503 += 1
            return self._error(503, "ServiceUnavailable", "injected: service unavailable")
        if decision == "503_slowdown":
            stats.failed_503 += 1
            return self._error(503, "SlowDown", "injected: please reduce your request rate")
        if decision == "drop_before":
            stats.dropped_before += 1
            return self._drop(request)
        if decision == "delay":
            stats.delayed += 1
            await asyncio.sleep(delay)
        status, headers, data = await self._forward(request, body)
        if faultable:
            key = request.path
            stats.upstream_status.setdefault(key, []).append(status)
            if 200 <= status < 300:
                stats.first_stored.setdefault(key, time.time())
        if decision == "drop_after":
            stats.dropped_after += 1
            return self._drop(request)
        if decision == "500_after":
            stats.failed_after += 1
            return self._error(500, "InternalError", "injected after the write: internal error")
        if faultable and decision == "pass":
            stats.passed += 1
        return web.Response(status=status, headers=headers, body=data)


class HoldsOneWrite(S3Proxy):
    """Holds the first PUT of one key until released (its sender is killed meanwhile);
    every other request, and every later PUT of that key, passes through."""

    def __init__(self, upstream: str, key_suffix: str) -> None:
        super().__init__(upstream)
        self.key_suffix = key_suffix
        self.held = asyncio.Event()  # the write arrived and is being held
        self.release = asyncio.Event()
        self.writes = 0

    async def _handle(self, request):  # type: ignore[no-untyped-def]
        body = await request.read()
        if request.method == "PUT" and request.path.endswith(self.key_suffix):
            self.writes += 1
            if self.writes == 1:
                self.held.set()
                await self.release.wait()
                return web.Response(status=503)  # never reaches the dead worker
        status, headers, data = await self._forward(request, body)
        return web.Response(status=status, headers=headers, body=data)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def assert_same_run(got: dict[str, bytes], expected: dict[str, bytes]) -> None:
    """The same step objects and markers, and every pack of `expected` with the same bytes. Packs
    are copies that a newer pack's writer deletes: `got` may also hold one that a slower writer
    wrote again after that, or that a delete which failed left."""
    assert {k: v for k, v in got.items() if "/packs/" not in k} == {k: v for k, v in expected.items() if "/packs/" not in k}
    assert all(got.get(k) == v for k, v in expected.items() if "/packs/" in k), \
        [k for k, v in expected.items() if "/packs/" in k and got.get(k) != v]
