"""`rewind serve` as a user runs it: the dev server, a worker and `rewind serve` as
subprocesses configured only by environment variables, each in an empty folder, talked to
over HTTP (httpx) and, for the live page, by headless Chromium over its DevTools protocol.

One stack for the module (a worker, a server); a test that needs another server (with a
key, or a Temporal that is not there) starts its own beside it. Runs are held mid-way by a
gate tool (a file the test creates lets it go): "before the run ends" is a fact, not a time.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest
from as_user import UserServer, one_line_error, rewind, until, user_env, user_workers
from cdp_browser import Chromium, chromium_path

from rewind.worker.scripted_model import ScriptedModelServer

TOOLS = '''
import asyncio
import os
from pathlib import Path

from activities.tools.registry import tool


@tool
async def lookup(term: str) -> str:
    """Read-only: what is known about a term."""
    return f"about {term}"


@tool(heartbeat_s=2, timeout_s=300)
async def gate(name: str) -> str:
    """Wait until the file GATE_DIR/<name> exists (holds a run mid-way)."""
    path = Path(os.environ["GATE_DIR"]) / name
    while not path.exists():
        await asyncio.sleep(0.05)
    return f"gate {name} open"


@tool(side_effects=True, needs_approval=True)
async def publish(text: str) -> str:
    """Side-effecting: publishes a text, once a person approves."""
    return f"published {text}"
'''
KEY = "k3y-" + "5" * 40
# Whether the scripted model streams its answers (`stream: true`, token by token): the model's
# deltas are then in the stream and on the page; before it did, a call's text came whole.
STREAMS = "tokens_per_s" in inspect.signature(ScriptedModelServer).parameters


@dataclass
class Frame:
    """One server-sent event as it came: its id: line (None without), its event:, its data."""

    id: str | None
    event: str
    data: dict[str, Any]


@dataclass
class Stack:
    root: Path
    url: str
    gates: Path
    env: Callable[..., dict[str, str]]
    server: UserServer
    model: Any

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=kwargs.pop("url", self.url), timeout=httpx.Timeout(120.0), **kwargs)

    def gated_run(self, prefix: str) -> tuple[str, str, Path, Path]:
        """A run held twice: it waits at gate A, then the model writes a step's text (streamed a few
        tokens a second, where the scripted model streams: STREAMS) and it waits at gate B, then it
        answers. (script, run id, gate A's file, gate B's file): creating a file opens its gate."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.model.add_script(name, [
            {"content": "Looking up tea prices now.", "tool_calls": [{"name": "gate", "arguments": {"name": f"{name}-a"}}]},
            {"content": "Waiting at the gate.", "tool_calls": [{"name": "gate", "arguments": {"name": f"{name}-b"}}],
             "stream": {"tokens_per_s": 40}},
            {"content": "Tea costs 3 euros."},
        ])
        return f"script:{name}", name, self.gates / f"{name}-a", self.gates / f"{name}-b"


@pytest.fixture(scope="module")
async def stack(temporal_server, model_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    queue = f"serve-{uuid.uuid4().hex[:8]}"
    gates = root / "gates"
    gates.mkdir()
    worker_dir = root / "worker"
    worker_dir.mkdir()
    (worker_dir / "tools.py").write_text(TOOLS)

    def env(home: Path, **extra: str | None) -> dict[str, str]:
        return user_env(home, **{
            "TEMPORAL_ADDRESS": temporal_server.address, "REWIND_TASK_QUEUE": queue,
            "REWIND_STORE": f"file://{root / 'store'}", "REWIND_PAYLOADS": f"file://{root / 'payloads'}",
            # The worker's home (its folder's .rewind): where it announces its live events, which
            # `rewind serve` on this machine reads (REWIND_EVENTS=local, the default).
            "REWIND_HOME": str(worker_dir / ".rewind"),
            "OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": model_server.base_url, "GATE_DIR": str(gates),
            **extra})

    async with user_workers() as start:
        worker = start(worker_dir, env(worker_dir), "--tool-modules", "tools")
        await worker.wait_ready()
        server = UserServer(root / "serve", env(root / "serve"))
        try:
            yield Stack(root, await server.url(), gates, env, server, model_server)
        finally:
            await server.stop_async()


async def read_sse(client: httpx.AsyncClient, path: str, *, headers: dict[str, str] | None = None,
                   stop: Callable[[Frame], bool] | None = None) -> list[Frame]:
    """The events of `path` until the stream ends (or `stop` says so: then the client goes)."""
    frames: list[Frame] = []
    async with client.stream("GET", path, headers={"accept": "text/event-stream", **(headers or {})}) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line == "":
                if "data" in fields:
                    frames.append(Frame(fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])))
                    if stop is not None and stop(frames[-1]):
                        break
                fields = {}
            elif not line.startswith(":"):  # a comment (the pings)
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
    return frames


def durable(frames: list[Frame]) -> list[str]:
    return [f.data["id"] for f in frames if "~" not in f.data["id"]]


async def start_run(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/runs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def state_of(client: httpx.AsyncClient, run: str, branch: str = "main") -> dict[str, Any]:
    response = await client.get(f"/runs/{run}", params={"branch": branch})
    assert response.status_code == 200, response.text
    return response.json()


async def ended(client: httpx.AsyncClient, run: str, branch: str = "main") -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        view = await state_of(client, run, branch)
        return view if view["workflow_status"] != "running" else None
    return await until(f"run {run} ({branch}) ends", check, 120)


def error_of(response: httpx.Response, status: int, *needles: str) -> None:
    """The server's promise for errors: the status, and {"error": "one line"} naming the problem."""
    assert response.status_code == status, f"{response.status_code} {response.text}"
    body = response.json()
    assert list(body) == ["error"] and "\n" not in body["error"] and "Traceback" not in body["error"], body
    for needle in needles:
        assert needle in body["error"], body


# -- the stream ---------------------------------------------------------------------------
async def test_a_run_started_over_http_streams_and_resumes_from_any_event(stack) -> None:
    model, run, gate_a, gate_b = stack.gated_run("sse")

    def at_gate(frame: Frame, gate: Path) -> bool:
        return frame.event == "tool.started" and frame.data["data"]["arguments"] == {"name": gate.name}

    async with stack.client() as client:
        started = await start_run(client, task="Buy tea", model=model, run_id=run)
        assert started["run_id"] == run and started["no_worker"] is None

        # Read while the run waits at gate A; the client goes once the gate's call has started.
        first = await read_sse(client, f"/runs/{run}/events", stop=lambda f: at_gate(f, gate_a))
        assert [f.event for f in first][:2] == ["run.started", "checkpoint"]
        assert (await state_of(client, run))["state"] == "running"
        last = [f.id for f in first if f.id][-1]

        # Reconnect as an EventSource does, with the last id it saw; the gates open as their calls
        # are told of (gate A's again: a call in flight comes again from its start).
        def opening(frame: Frame) -> bool:
            for gate in (gate_a, gate_b):
                if at_gate(frame, gate):
                    gate.touch()
            return False

        rest = await read_sse(client, f"/runs/{run}/events", headers={"Last-Event-ID": last}, stop=opening)
        assert rest[0].event == "tool.started" and rest[0].data["data"]["attempt"] == 1
        assert rest[-1].event == "run.completed" and rest[-1].data["data"]["answer"] == "Tea costs 3 euros."
        for frame in first + rest:  # id: on durable events only, and it is the event's cursor
            assert frame.event == frame.data["type"]
            if "~" in frame.data["id"]:
                assert frame.id is None, frame
            else:
                assert frame.id == frame.data["cursor"], frame

        # The model's text as it wrote it: its deltas, put together, are its whole message.
        streamed = []
        for completed in (f for f in first + rest if f.event == "model.completed"):
            call = completed.data["data"]["call"]
            pieces = [f.data["data"].get("text") or "" for f in first + rest
                      if f.event == "model.delta" and f.data["data"]["call"] == call]
            if pieces:
                assert "".join(pieces) == completed.data["data"]["message"]["content"], call
                streamed.append(call)
        # Steps 2 and 3 began while a client read (after gate A): all of their text came in pieces.
        assert {"2/model", "3/model"} <= set(streamed) if STREAMS else not streamed, streamed

        # Every durable event once, in order: the two reads are one whole read.
        whole = await read_sse(client, f"/runs/{run}/events")
        assert durable(first) + durable(rest) == durable(whole)
        assert len(set(durable(whole))) == len(durable(whole))

        # From any durable event: every one after it, once, in order (?after= and the header alike;
        # the header wins, as an EventSource reconnects to the address it first opened).
        ids = [f.id for f in whole if f.id]
        for k, cursor in enumerate(ids):
            if k % 2:
                resumed = await read_sse(client, f"/runs/{run}/events?after={cursor}")
            else:
                resumed = await read_sse(client, f"/runs/{run}/events?after=0.0", headers={"Last-Event-ID": cursor})
            assert durable(resumed) == durable(whole)[k + 1:], (cursor, durable(resumed))

        # Bad input: one line each.
        error_of(await client.get(f"/runs/{run}/events?after=not-an-id"), 400, "not an event id")
        error_of(await client.get(f"/runs/{run}/events", params={"branch": "../x"}), 400, "branch")
        error_of(await client.get("/runs/no-such-run/events"), 404, "no-such-run")
        error_of(await client.get(f"/runs/{run}/events?branch=nope"), 404, "nope")


async def test_a_client_that_goes_away_leaves_nothing_open(stack) -> None:
    """Each stream opens the store and a subscription to the worker's live events: a client that
    disconnects mid-run ends its reader, and the server's open files come back to what they were."""
    model, run, gate_a, gate_b = stack.gated_run("gone")
    fds = Path(f"/proc/{stack.server.pid}/fd")
    async with stack.client() as client:
        await start_run(client, task="Buy tea", model=model, run_id=run)
        # Warm the server up (its Temporal client, its store) before counting.
        await read_sse(client, f"/runs/{run}/events", stop=lambda f: f.event == "tool.started")
    await asyncio.sleep(1)
    before = len(list(fds.iterdir()))
    for _ in range(5):
        async with stack.client() as client:  # a client of its own: its connection closes with it
            frames = await read_sse(client, f"/runs/{run}/events", stop=lambda f: f.event == "tool.started")
            assert frames[-1].data["data"]["tool"] == "gate"

    async def back() -> bool:
        return len(list(fds.iterdir())) <= before
    await until(f"the server's open files back to {before}", back, 60)
    gate_a.touch()
    gate_b.touch()
    async with stack.client() as client:
        assert (await ended(client, run))["state"] == "completed"


# -- runs: start, status, list ------------------------------------------------------------
async def test_starting_listing_and_bad_input(stack) -> None:
    name = f"plain-{uuid.uuid4().hex[:6]}"
    stack.model.add_script(name, [{"content": "Green tea."}])
    async with stack.client() as client:
        started = await start_run(client, task="Which tea?", model=f"script:{name}", run_id=name, max_steps=3)
        assert started["workflow_id"] == name
        view = await ended(client, name)
        assert view["state"] == "completed" and view["status"]["final_answer"] == "Green tea."
        assert view["status"]["limits"]["max_steps"] == 3

        listed = (await client.get("/runs", params={"state": "completed", "limit": 50})).json()
        assert name in [r["run_id"] for r in listed["runs"]] and listed["temporal"] is True

        # The same words the command line refuses, spelled as the body spells them.
        error_of(await client.post("/runs", json={}), 400, 'say what to run: "task"')
        error_of(await client.post("/runs", json={"task": "x", "pipeline": "p"}), 400, "not both")
        error_of(await client.post("/runs", json={"graph": "nocolon"}), 400, "MODULE:ATTR")
        error_of(await client.post("/runs", json={"pipeline": "p", "tools": ["lookup"]}), 400, '"tools"')
        error_of(await client.post("/runs", json={"task": "x", "max_steps": 0}), 400, "max_steps")
        error_of(await client.post("/runs", json={"task": "x", "colour": "red"}), 400, "colour")
        error_of(await client.post("/runs", json={"task": "x", "run_id": "../up"}), 400, "run id")
        error_of(await client.post("/runs", content=b"{not json", headers={"content-type": "application/json"}), 400,
                 "not JSON")
        # What a page of another site can send without asking: refused, whatever it says.
        error_of(await client.post("/runs", content=b'{"task": "x"}', headers={"content-type": "text/plain"}), 415,
                 "application/json")
        error_of(await client.post(f"/runs/{name}/calls/c/approve"), 415, "application/json")
        error_of(await client.post("/runs", json={"task": "x"}, headers={"origin": "http://attacker.example"}), 403,
                 "another site")
        error_of(await client.post("/runs", json=["task"]), 400, "JSON object")
        error_of(await client.post("/runs", json={"task": "again", "run_id": name}), 409, "already exists")
        error_of(await client.get("/runs", params={"state": "sleepy"}), 400, "state")
        error_of(await client.get("/runs", params={"colour": "red"}), 400, "colour")
        error_of(await client.get("/runs/no-such-run"), 404, "no-such-run")
        error_of(await client.get("/runs/../etc"), 404)
        error_of(await client.get("/nowhere"), 404, "/docs")
        error_of(await client.delete("/runs"), 405)

        # The document says what is served, and its page loads nothing from anywhere.
        document = (await client.get("/openapi.json")).json()
        assert {"/runs", "/runs/{run}", "/runs/{run}/events", "/runs/{run}/forks",
                "/runs/{run}/calls/{call}/approve", "/runs/{run}/calls/{call}/reject"} <= set(document["paths"])
        assert "StartRequest" in document["components"]["schemas"]
        page = await client.get("/docs")
        assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
        assert "startRun" in page.text and "http://" not in page.text and "https://" not in page.text


# -- approvals and forks ------------------------------------------------------------------
async def test_approving_rejecting_and_forking_over_http(stack) -> None:
    name = f"decide-{uuid.uuid4().hex[:6]}"
    stack.model.add_script(name, [
        {"tool_calls": [{"name": "publish", "arguments": {"text": "first"}}]},
        {"tool_calls": [{"name": "publish", "arguments": {"text": "second"}}]},
        {"content": "done publishing"},
    ])
    async with stack.client() as client:
        await start_run(client, task="Publish twice", model=f"script:{name}", run_id=name, tools=["publish"])

        async def waiting() -> dict[str, Any] | None:
            pending = (await state_of(client, name))["status"]["pending_approvals"]
            return pending[0] if pending else None

        first = await until("the first call waits", waiting, 60)
        error_of(await client.post(f"/runs/{name}/calls/{first['tool_call_id']}/reject", json={}), 400, "reason")
        error_of(await client.post(f"/runs/{name}/calls/{first['tool_call_id']}/reject", json={"reason": " "}), 400,
                 "reason")
        error_of(await client.post(f"/runs/{name}/calls/nope/approve", json={}), 409, "nope")
        approved = await client.post(f"/runs/{name}/calls/{first['tool_call_id']}/approve", json={"by": "ana"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["verdict"] == "approved" and approved.json()["by"] == "ana"

        async def next_one() -> dict[str, Any] | None:
            call = await waiting()
            return call if call and call["tool_call_id"] != first["tool_call_id"] else None

        second = await until("the second call waits", next_one, 60)
        rejected = await client.post(f"/runs/{name}/calls/{second['tool_call_id']}/reject",
                                     json={"reason": "not today"})
        assert rejected.status_code == 200 and rejected.json()["verdict"] == "rejected", rejected.text
        assert rejected.json()["by"] == "http"
        view = await ended(client, name)
        assert view["state"] == "completed" and view["status"]["final_answer"] == "done publishing"
        error_of(await client.post(f"/runs/{name}/calls/{second['tool_call_id']}/approve", json={}), 409, "ended")

        # A fork of step 1 with another model: a new branch, as `rewind fork` makes it.
        other = f"fork-{uuid.uuid4().hex[:6]}"
        # The scripted model answers by the turn: the branch's first call is the conversation's second.
        stack.model.add_script(other, [{"content": "never asked"}, {"content": "forked answer"}])
        forked = await client.post(f"/runs/{name}/forks", json={"step": 1, "branch": "b", "model": f"script:{other}"})
        assert forked.status_code == 201, forked.text
        assert forked.json()["fork_point"] == f"{name}:main:1" and forked.json()["branch"] == "b"
        view = await ended(client, name, "b")
        assert view["state"] == "completed" and view["status"]["final_answer"] == "forked answer"
        frames = await read_sse(client, f"/runs/{name}/events?branch=b")
        assert frames[0].event == "run.started" and frames[-1].event == "run.completed"

        error_of(await client.post(f"/runs/{name}/forks", json={"step": 1, "branch": "b"}), 409, "b")
        error_of(await client.post(f"/runs/{name}/forks", json={"step": 99, "branch": "c"}), 404, "99")
        error_of(await client.post(f"/runs/{name}/forks", json={"branch": "c"}), 400, "step")
        error_of(await client.post(f"/runs/{name}/forks", json={"step": 1, "branch": "c", "side_effects": "x"}), 400,
                 "side_effects")
        error_of(await client.post("/runs/no-such-run/forks", json={"step": 1, "branch": "c"}), 404, "no-such-run")


# -- who may talk to it -------------------------------------------------------------------
async def test_with_an_api_key_every_request_carries_it(stack) -> None:
    folder = stack.root / f"keyed-{uuid.uuid4().hex[:6]}"
    server = UserServer(folder, stack.env(folder, REWIND_API_KEY=KEY))
    try:
        url = await server.url()
        name = f"keyed-{uuid.uuid4().hex[:6]}"
        stack.model.add_script(name, [{"content": "Oolong."}])
        async with stack.client(url=url) as client:
            error_of(await client.get("/runs"), 401, "REWIND_API_KEY")
            error_of(await client.get("/openapi.json"), 401)
            error_of(await client.get("/runs", headers={"x-api-key": "wrong"}), 401, "not this server's")
            error_of(await client.post("/runs", json={"task": "x"}), 401)
            assert (await client.get("/runs", headers={"x-api-key": KEY})).status_code == 200
            assert (await client.get("/runs", headers={"authorization": f"Bearer {KEY}"})).status_code == 200
            started = await client.post("/runs", json={"task": "Which tea?", "model": f"script:{name}",
                                                       "run_id": name}, headers={"x-api-key": KEY})
            assert started.status_code == 201, started.text
            # A browser's EventSource sends no headers: ?api_key= is taken.
            frames = await read_sse(client, f"/runs/{name}/events?api_key={KEY}")
            assert frames[-1].event == "run.completed"
            error_of(await client.get(f"/runs/{name}/events"), 401)

            # A page opened with ?api_key=: the key becomes a cookie, and the address loses it.
            page = await client.get(f"/runs/{name}?api_key={KEY}", headers={"accept": "text/html"})
            assert page.status_code == 303 and page.headers["location"] == f"/runs/{name}"
            cookie = page.headers["set-cookie"]
            assert cookie.startswith(f"rewind_api_key={KEY}") and "HttpOnly" in cookie and "SameSite=strict" in cookie
            page = await client.get(f"/runs/{name}", headers={"accept": "text/html", "cookie": f"rewind_api_key={KEY}"})
            assert page.status_code == 200 and "<title>rewind view: " in page.text
        # Without a key the server answers requests to loopback names only (no DNS rebinding).
        async with stack.client() as client:
            error_of(await client.get("/runs", headers={"host": "attacker.example:80"}), 400, "loopback")
            assert (await client.get("/runs", headers={"host": "localhost"})).status_code == 200
    finally:
        await server.stop_async()
    assert KEY not in server.log(), "the key must never be logged"
    assert f"/runs/{name}/events" in server.log()  # the access log, without the key


async def test_beyond_loopback_only_with_a_key(stack, tmp_path) -> None:
    folder = tmp_path / "nokey"
    folder.mkdir()
    code, out, err = await rewind(folder, stack.env(folder), "serve", "--host", "0.0.0.0", "--port", "0")
    one_line_error(code, err, "REWIND_API_KEY", "--host 0.0.0.0", "127.0.0.1", prefix="rewind: ")
    assert out == ""
    code, _, err = await rewind(folder, stack.env(folder, REWIND_API_KEY="has space"), "serve", "--port", "0")
    one_line_error(code, err, "REWIND_API_KEY", prefix="rewind: ")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        code, _, err = await rewind(folder, stack.env(folder), "serve", "--port", str(busy.getsockname()[1]))
        one_line_error(code, err, "in use", "--port", prefix="rewind: ")
    finally:
        busy.close()
    code, _, err = await rewind(folder, stack.env(folder), "serve", "--port", "70000")
    one_line_error(code, err, "TCP port", prefix="rewind serve: ")

    # With a key, any address: it listens, answers with the key only, and stops on SIGTERM with exit 0.
    server = UserServer(tmp_path / "keyed", stack.env(tmp_path / "keyed", REWIND_API_KEY=KEY), "--host", "0.0.0.0")
    try:
        url = await server.url()
        port = int(url.rsplit(":", 1)[1])
        async with stack.client(url=f"http://127.0.0.1:{port}") as client:
            error_of(await client.get("/runs"), 401)
            assert (await client.get("/runs", headers={"x-api-key": KEY})).status_code == 200
    finally:
        await server.stop_async()
    assert server.process.returncode == 0, server.log()


async def test_temporal_down_the_store_answers_what_it_can(stack, tmp_path) -> None:
    """A server whose Temporal is not there: a finished run is read from the store (its status,
    its events), what needs Temporal is a 503 naming it."""
    name = f"stored-{uuid.uuid4().hex[:6]}"
    stack.model.add_script(name, [{"content": "Sencha."}])
    async with stack.client() as client:
        await start_run(client, task="Which tea?", model=f"script:{name}", run_id=name)
        await ended(client, name)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    server = UserServer(tmp_path / "down", stack.env(tmp_path / "down", TEMPORAL_ADDRESS=dead))
    try:
        async with stack.client(url=await server.url()) as client:
            view = await state_of(client, name)
            assert view["status"]["final_answer"] == "Sencha." and "not reachable" in view["note"]
            frames = await read_sse(client, f"/runs/{name}/events")
            assert frames[-1].event == "run.completed" and frames[-1].data["data"]["answer"] == "Sencha."
            error_of(await client.post("/runs", json={"task": "x"}), 503, dead)
            error_of(await client.get("/runs/never-was"), 503, dead)
            error_of(await client.post(f"/runs/{name}/calls/c/approve", json={}), 503, dead)
    finally:
        await server.stop_async()


# -- the live page ------------------------------------------------------------------------
def _browser() -> str | None:
    found = chromium_path()
    if found is None and os.environ.get("REWIND_TEST_REQUIRE_BROWSER") == "1":
        pytest.fail("REWIND_TEST_REQUIRE_BROWSER=1 and no chromium on this machine (apt-get install chromium)")
    return found


async def test_the_live_page_in_headless_chromium(stack) -> None:
    chromium = _browser()
    if chromium is None:
        pytest.skip("no chromium on this machine (REWIND_TEST_REQUIRE_BROWSER=1 makes this a failure)")
    model, run, gate_a, gate_b = stack.gated_run("page")
    async with stack.client() as client, Chromium.launch(chromium) as browser:
        page = await browser.new_page(f"{stack.url}/runs/{run}")  # before the run exists: a 404 page
        await page.wait_for("document.body && document.body.innerText.includes('no run')", what="the 404")
        await start_run(client, task="Buy tea", model=model, run_id=run)
        await page.reload()
        await page.wait_for("document.body.dataset.live === 'live'", what="the page follows the run")
        running = "!!document.querySelector('#live-calls .card.running[data-call$=\"/call_{}_0\"]')"
        await page.wait_for(running.format(0), what="gate A's call shown running")
        assert "Looking up tea prices now." in await page.evaluate("document.getElementById('live').innerText")

        # Before the run ends (it waits at gate B): the model's words as it wrote them, the call in
        # flight, the steps recorded so far.
        gate_a.touch()
        await page.wait_for(running.format(1), what="gate B's call shown running")
        await page.wait_for("document.getElementById('live').innerText.includes('Waiting at the gate.')",
                            what="the model's text of step 2 in the live panel")
        await page.wait_for("Number(document.body.dataset.checkpoints) >= 2", what="the steps drawn")
        assert "Looking up tea prices now." in await page.evaluate("document.body.innerText")
        assert (await state_of(client, run))["state"] == "running"
        if STREAMS:  # the model's text of step 2 came in pieces, each shown as it came
            deltas = await page.evaluate("document.querySelector('#live-calls .card[data-call$=\"2/model\"]')"
                                         ".dataset.deltas")
            assert int(deltas or 0) > 1, deltas

        # A reload mid-run: the page picks up where it was (its stream resumes after the last
        # checkpoint it was told of: the step's model text and its call in flight come again).
        await page.reload()
        await page.wait_for("document.body.dataset.live === 'live'", what="the page follows the run again")
        facts = await page.evaluate("document.getElementById('live-facts').innerText")
        assert facts.startswith("resumed after "), facts
        await page.wait_for(running.format(1), what="the call in flight told again after the reload")
        await page.wait_for("document.getElementById('live').innerText.includes('Waiting at the gate.')",
                            what="the model's text of step 2 again after the reload")
        assert "Looking up tea prices now." in await page.evaluate("document.body.innerText")
        assert (await state_of(client, run))["state"] == "running"

        gate_b.touch()
        await page.wait_for("document.body.dataset.live === 'completed'", what="the run's end on the page")
        await page.wait_for("document.getElementById('live').innerText.includes('Tea costs 3 euros.')",
                            what="the answer")
        await page.wait_for("Number(document.body.dataset.checkpoints) === 4", what="every step drawn")
        assert await page.evaluate("document.getElementById('fatal').hidden")
        # A reload after the end: the whole stream again, and it ends where the run did.
        await page.reload()
        await page.wait_for("document.body.dataset.live === 'completed'", what="the end after a reload")
        assert "Tea costs 3 euros." in await page.evaluate("document.getElementById('live').innerText")

        # A call that waits for a person shows as it waits, and the page's own button decides it.
        name = f"page-approve-{uuid.uuid4().hex[:6]}"
        stack.model.add_script(name, [{"tool_calls": [{"name": "publish", "arguments": {"text": "hello"}}]},
                                      {"content": "published it"}])
        await start_run(client, task="Publish", model=f"script:{name}", run_id=name, tools=["publish"])
        await page.navigate(f"{stack.url}/runs/{name}")
        await page.wait_for("!!document.querySelector('#live-calls .card.waiting [data-verdict=approve]')",
                            what="the waiting call with its buttons")
        assert "waits for a person" in await page.evaluate("document.getElementById('live').innerText")
        await page.evaluate("document.querySelector('#live-calls .card.waiting [data-verdict=approve]').click()")
        await page.wait_for("document.body.dataset.live === 'completed'", what="the run's end after the approval")
        view = await state_of(client, name)
        assert view["status"]["final_answer"] == "published it"
        await page.wait_for("document.getElementById('live').innerText.includes('published hello')",
                            what="the approved call's output")
