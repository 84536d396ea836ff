"""Watching runs as a user does: `rewind watch` and the worker as subprocesses in empty folders,
configured by environment only (docs/streaming.md).

A pipeline's gather shows each search as it finishes, in the stream and in `rewind show`, while
one search still runs; its `ctx.emit` and a tool's `rewind.emit` come as custom events; the
durable events a live watcher got are those `rewind watch` replays from the store once the run
has ended, with Temporal out of reach; a reader resumed after any durable event gets the rest
once. A loop run waits for a person: the stream says how to approve, and a watcher that connects
while it waits is told too. A watcher that stops reading does not slow the run. A fan-out's
sub-agents come merged in their caller's stream, with their path. With S3 and Redis, a watcher in
a third folder sees what the workers publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

from as_user import BIN, UserWorker, rewind, rewind_json

from rewind.local.testing import LoggedProcess
from rewind.temporal.dev_server import free_port

RESEARCH = '''
import asyncio
from pathlib import Path

from rewind import emit, pipeline, tool

RELEASE = Path({release!r})
WATCHED = RELEASE.with_name("watched")


@tool
async def begin() -> str:
    """Wait until someone watches (the test starts its watcher first)."""
    while not WATCHED.exists():
        await asyncio.sleep(0.05)
    return "go"


@tool
async def search_company(company: str) -> str:
    """What the web says about one company."""
    emit({{"searching": company}})
    while company == "Slowco" and not RELEASE.exists():
        await asyncio.sleep(0.05)
    return f"{{company}}: revenue up"


@pipeline
async def report(ctx, companies: list[str]) -> str:
    """Search in parallel, then write."""
    await ctx.tool("begin")
    ctx.emit({{"phase": "search", "companies": len(companies)}})
    found = await asyncio.gather(*(ctx.tool("search_company", company=c) for c in companies))
    ctx.emit({{"phase": "write"}})
    return await ctx.llm("write", system="You write reports.", user="\\n".join(found))
'''

TEAM = '''
import json

from rewind import subagent, tool


@tool
async def search_company(company: str) -> str:
    """Look up public facts about one company."""
    return json.dumps({"company": company, "revenue_musd": len(company) * 10, "growth_pct": 5})


research_company = subagent(
    name="research_company",
    description="Research one company and return a short profile.",
    system_prompt="You research one company with search_company, then answer with a short profile.",
    tools=["search_company"],
    max_steps=5,
)

orchestrator = subagent(
    name="orchestrator",
    description="Research several companies in parallel and synthesize.",
    system_prompt="You give each company to research_company in one step, then synthesize their answers.",
    tools=["research_company"],
    max_steps=6,
)
'''

SLOW_FIRST = '''
import asyncio
from pathlib import Path

from rewind import tool

RELEASE = Path({release!r})


@tool
async def fetch(page: str) -> str:
    """Fetch one page (the first waits until released)."""
    while page == "one" and not RELEASE.exists():
        await asyncio.sleep(0.05)
    return f"page {{page}}"
'''

WATCHED_GRAPH = '''
import operator
import pathlib
import sqlite3
import time
from typing import Annotated, TypedDict

from langchain_openai import ChatOpenAI
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph

llm = ChatOpenAI(model="gpt-4o-mini")


class State(TypedDict):
    messages: Annotated[list, operator.add]
    rows: int


async def plan(state: State) -> dict:
    get_stream_writer()({{"phase": "planning"}})
    return {{"messages": [await llm.ainvoke(state["messages"])]}}


def count(state: State) -> dict:
    # custom events are live only: the test lets the node go on once its watcher reads the stream
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.05)
    with sqlite3.connect({db!r}) as db:  # its own I/O: the node runs as one activity
        rows = db.execute("select count(*) from items").fetchone()[0]
    get_stream_writer()({{"phase": "counted", "rows": rows}})
    return {{"rows": rows}}


builder = StateGraph(State)
builder.add_node("plan", plan)
builder.add_node("count", count)
builder.add_edge(START, "plan")
builder.add_edge("plan", "count")
builder.add_edge("count", END)
graph = builder.compile()
'''

BILLING = '''
from rewind import tool


@tool(side_effects=True, needs_approval=True)
async def wire(to: str, amount_cents: int) -> str:
    """Send money: a person approves every transfer."""
    return f"sent {amount_cents} to {to}"
'''


class Watcher(LoggedProcess):
    """`rewind watch RUN --json` as a subprocess: its events, read from its log as they come."""

    def __init__(self, cwd: Path, env: dict[str, str], run_id: str, *args: str) -> None:
        self.out = cwd / f"watch-{run_id}-{uuid.uuid4().hex[:6]}.jsonl"
        super().__init__([str(BIN / "rewind"), "watch", run_id, "--json", *args], self.out, env=env, cwd=cwd,
                         err_log=self.out.with_suffix(".err"))

    def events(self) -> list[dict]:
        text = self.out.read_text() if self.out.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def error(self) -> str:
        err = self.out.with_suffix(".err")
        return err.read_text() if err.exists() else ""

    async def until(self, what: str, check, timeout_s: float = 60.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.events()
            if check(found):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"watcher: {what} not seen after {timeout_s:.0f}s; got "
                                     f"{[(e['id'], e['type']) for e in found]}; stderr: {self.error()[-2000:]}")
            await asyncio.sleep(0.1)

    async def exit_code(self, timeout_s: float = 60.0) -> int:
        try:
            return await asyncio.to_thread(self.process.wait, timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"watcher still running after {timeout_s:.0f}s; got "
                                 f"{[(e['id'], e['type']) for e in self.events()]}; stderr: {self.error()[-2000:]}")


def durable(events: list[dict]) -> list[tuple[str, str, str]]:
    """(id, type, data) of the durable events, in the order they came."""
    return [(e["id"], e["type"], json.dumps(e["data"], sort_keys=True)) for e in events if "~" not in e["id"]]


async def watch_json(cli: Path, env: dict[str, str], run_id: str, *args: str) -> list[dict]:
    code, out, err = await rewind(cli, env, "watch", run_id, "--json", *args)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


async def test_a_gather_shows_each_search_as_it_finishes_and_the_stream_replays_from_the_store(world, tmp_path):
    folder, cli = world.folder("research"), world.folder("cli")
    release = tmp_path / "release"
    (folder / "research.py").write_text(RESEARCH.format(release=str(release)))
    name = f"w-{uuid.uuid4().hex[:8]}"
    world.model.add_script(name, {"write": [{"content": "Acme, Globex and Slowco all grow."}]})
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "research") as worker:
        await worker.wait_ready()
        started = await rewind_json(cli, cli_env, "start", "--pipeline", "report", "--input",
                                    json.dumps({"companies": ["Acme", "Slowco", "Globex"]}), "--model",
                                    f"script:{name}", "--run-id", "watched-gather")
        assert started["run_id"] == "watched-gather"
        watcher = Watcher(cli, cli_env, "watched-gather")
        try:
            await watcher.until("the run's start", lambda es: any(e["type"] == "run.started" for e in es))
            (tmp_path / "watched").touch()
            # Two searches done, one held: each finished one is in the stream with its checkpoint...
            seen = await watcher.until("two searches and their checkpoints", lambda es: sum(
                1 for e in es if e["type"] == "tool.completed" and e["data"]["tool"] == "search_company") == 2 and sum(
                1 for e in es if e["type"] == "checkpoint" and e["data"]["label"] == "search_company") == 2)
            steps = [e["step"] for e in seen if e["type"] == "tool.completed" and e["data"]["tool"] == "search_company"]
            # ... and in the store: `rewind show` has it while the slow search still runs.
            for step in steps:
                shown = await rewind_json(cli, cli_env, "show", f"watched-gather:main:{step}")
                assert shown["pipeline"]["label"] == "search_company", shown["pipeline"]
            status = await rewind_json(cli, cli_env, "status", "watched-gather")
            assert status["state"] == "running" and not status["status"]["mirror_pending"], status
            customs = [e["data"] for e in seen if e["type"] == "custom"]
            assert {"data": {"phase": "search", "companies": 3}, "source": "pipeline"} in customs, customs
            assert {c["data"].get("searching") for c in customs if c["source"] == "tool"} >= {"Acme", "Globex"}
            assert "write" not in json.dumps(customs)
            release.touch()
            assert await watcher.exit_code() == 0, watcher.error()
        finally:
            watcher.stop()
        live = watcher.events()
    types = [e["type"] for e in live]
    assert types[-1] == "run.completed" and live[-1]["data"]["answer"] == "Acme, Globex and Slowco all grow."
    assert types.count("tool.completed") == 4 and types.count("model.completed") == 1, types
    assert all(e["cursor"] for e in live if "~" not in e["id"]) and not any(e.get("cursor") for e in live
                                                                           if "~" in e["id"])
    # The same durable events from the store alone: Temporal out of reach, the worker gone.
    offline = {**cli_env, "TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    replay = await watch_json(cli, offline, "watched-gather")
    assert durable(replay) == durable(live)
    # Resumed after any durable event: the rest, once, in order.
    full = durable(replay)
    cursors = [e["cursor"] for e in replay if "~" not in e["id"]]
    for index in random.Random(7).sample(range(len(cursors)), 4):
        rest = durable(await watch_json(cli, offline, "watched-gather", "--after", cursors[index]))
        assert full[: index + 1] + rest == full, (index, rest)
    # A plain event id resumes too; garbage is one line naming what to give.
    rest = durable(await watch_json(cli, offline, "watched-gather", "--after", full[-3][0]))
    assert rest == full[-2:]
    code, _, err = await rewind(cli, offline, "watch", "watched-gather", "--after", "not-an-id")
    assert code != 0 and err.count("\n") == 1 and "event id" in err, err


async def test_a_parallel_steps_calls_come_as_each_completes_under_the_ids_the_store_gives_them(world, tmp_path):
    folder, cli = world.folder("pages"), world.folder("cli")
    release = tmp_path / "release"
    (folder / "pages.py").write_text(SLOW_FIRST.format(release=str(release)))
    name = f"pages-{uuid.uuid4().hex[:8]}"
    world.model.add_script(name, [{"tool_calls": [{"name": "fetch", "arguments": {"page": p}}
                                                  for p in ("one", "two", "three")]}, {"content": "Read three pages."}])
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "pages") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--task", "read", "--model", f"script:{name}", "--run-id", "pages")
        watcher = Watcher(cli, cli_env, "pages")
        try:
            seen = await watcher.until("two of three calls", lambda es: sum(
                1 for e in es if e["type"] == "tool.completed") == 2)
            done = [e["data"]["arguments"]["page"] for e in seen if e["type"] == "tool.completed"]
            assert sorted(done) == ["three", "two"], done  # the step is not over: "one" still runs
            release.touch()
            assert await watcher.exit_code() == 0, watcher.error()
        finally:
            watcher.stop()
    live = watcher.events()
    calls = [e for e in live if e["type"] == "tool.completed"]
    assert [c["data"]["arguments"]["page"] for c in calls][-1] == "one"
    assert [c["id"] for c in calls] == ["1.1", "1.2", "1.3"]  # in the order they completed
    assert durable(live) == durable(await watch_json(cli, cli_env, "pages"))


async def test_a_worker_killed_while_the_model_writes_costs_a_watcher_nothing(world, tmp_path):
    folder, cli = world.folder("streaming"), world.folder("cli")
    answer = " ".join(f"word{i}" for i in range(120))
    name = f"slow-{uuid.uuid4().hex[:8]}"
    # The offline model writes its answer at 20 tokens a second: the worker dies in the middle.
    world.model.add_script(name, [{"content": answer, "stream": {"tokens_per_s": 20}}])
    env, cli_env = world.env(folder), world.env(cli)
    first = UserWorker(folder / "w1", env)
    try:
        await first.wait_ready()
        await rewind_json(cli, cli_env, "start", "--task", "write", "--model", f"script:{name}", "--run-id", "killed")
        watcher = Watcher(cli, cli_env, "killed")
        try:
            await watcher.until("the model writing", lambda es: sum(e["type"] == "model.delta" for e in es) >= 5)
            first.kill()
            with UserWorker(folder / "w2", env) as second:
                await second.wait_ready()
                assert await watcher.exit_code(120) == 0, watcher.error()
        finally:
            watcher.stop()
    finally:
        first.stop()
    events = watcher.events()
    deltas = [e["data"] for e in events if e["type"] == "model.delta"]
    retrying = [e["data"] for e in events if e["type"] == "model.retrying"]
    assert [r["attempt"] for r in retrying] == [2], retrying
    second_try = "".join(d["text"] for d in deltas if d["attempt"] == 2)
    first_try = "".join(d["text"] for d in deltas if d["attempt"] == 1)
    assert second_try == answer and answer.startswith(first_try) and first_try, (first_try, second_try)
    indexes = [d["index"] for d in deltas if d["attempt"] == 2]
    assert indexes == list(range(1, len(indexes) + 1))  # the new attempt's deltas from its start, once each
    completed = [e for e in events if e["type"] == "model.completed"]
    assert len(completed) == 1 and completed[0]["data"]["message"]["content"] == answer
    assert events[-1]["type"] == "run.completed"


async def test_a_graph_run_streams_its_tokens_node_updates_and_writers(world, tmp_path):
    import sqlite3

    folder, cli = world.folder("graph"), world.folder("cli")
    db = tmp_path / "items.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table items (name text)")
        conn.executemany("insert into items values (?)", [("tea",), ("cake",)])
    go = tmp_path / "watcher-is-reading"
    (folder / "watched_graph.py").write_text(WATCHED_GRAPH.format(db=str(db), go=str(go)))
    name = f"g-{uuid.uuid4().hex[:8]}"
    answer = "First count the items, then report."
    world.model.add_script(name, {"plan": [{"content": answer, "stream": {"tokens_per_s": 50}}]})
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "watched_graph") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--graph", "watched_graph:graph", "--input",
                          json.dumps({"messages": [{"role": "user", "content": "how many items?"}]}),
                          "--model", f"script:{name}", "--run-id", "graph-watch")
        watcher = Watcher(cli, cli_env, "graph-watch")
        try:
            await watcher.until("the plan's answer", lambda found: any(
                e["type"] == "model.completed" for e in found), timeout_s=120)
            go.touch()
            assert await watcher.exit_code(120) == 0, watcher.error()
        finally:
            watcher.stop()
    events = watcher.events()
    types = [e["type"] for e in events]
    text = "".join(e["data"]["text"] for e in events if e["type"] == "model.delta" and "text" in e["data"])
    completed = [e["data"] for e in events if e["type"] == "model.completed"]
    assert completed and completed[0]["node"] == "plan" and completed[0]["message"]["content"] == answer
    if text:  # deltas come unless the watcher connected after the model had written (it writes at 50/s)
        assert answer.startswith(text) or text == answer
    updates = [(e["data"]["node"], e["data"]["update"]) for e in events if e["type"] == "graph.update"]
    assert [node for node, _ in updates] == ["plan", "count"], updates
    assert updates[1][1] == {"rows": 2} and updates[0][1]["messages"][0]["content"] == answer
    customs = [e["data"] for e in events if e["type"] == "custom"]
    assert {"data": {"phase": "counted", "rows": 2}, "source": "graph"} in [
        {k: c[k] for k in ("data", "source")} for c in customs], customs
    assert types[-1] == "run.completed"
    assert durable(events) == durable(await watch_json(cli, cli_env, "graph-watch"))


async def test_a_run_waiting_for_a_person_says_how_to_approve_to_every_watcher(world, tmp_path):
    folder, cli = world.folder("billing"), world.folder("cli")
    (folder / "billing.py").write_text(BILLING)
    name = f"wire-{uuid.uuid4().hex[:8]}"
    world.model.add_script(name, [{"tool_calls": [{"name": "wire", "arguments": {"to": "bob", "amount_cents": 500}}]},
                                  {"content": "Sent."}])
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "billing") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--task", "pay bob", "--model", f"script:{name}", "--run-id",
                          "pay-bob")
        early = Watcher(cli, cli_env, "pay-bob")
        try:
            waiting = await early.until("approval.waiting", lambda es: any(e["type"] == "approval.waiting" for e in es))
            asked = next(e for e in waiting if e["type"] == "approval.waiting")["data"]
            assert asked["tool"] == "wire" and asked["approve"].startswith("rewind approve pay-bob "), asked
            # A watcher that connects while the run waits is told from the run's state.
            late = Watcher(cli, cli_env, "pay-bob")
            try:
                told = await late.until("approval.waiting", lambda es: any(e["type"] == "approval.waiting" for e in es))
                assert next(e for e in told if e["type"] == "approval.waiting")["id"] == \
                    next(e for e in waiting if e["type"] == "approval.waiting")["id"]
                code, out, err = await rewind(cli, cli_env, *asked["approve"].split()[1:], "--by", "ana")
                assert code == 0, err
                assert await early.exit_code() == 0 and await late.exit_code() == 0, early.error() + late.error()
            finally:
                late.stop()
        finally:
            early.stop()
    for events in (early.events(), late.events()):
        types = [e["type"] for e in events]
        assert types.count("approval.waiting") == 1, types
        resolved = [e["data"] for e in events if e["type"] == "approval.resolved"]
        assert resolved == [{"call": resolved[0]["call"], "tool_call_id": asked["tool_call_id"], "verdict": "approved",
                             "by": "ana", "reason": None}] or "approval.resolved" not in types, resolved
        completed = [e["data"] for e in events if e["type"] == "tool.completed"]
        assert completed and completed[0]["approval"] == {"verdict": "approved", "by": "ana"}, completed
        assert types[-1] == "run.completed"
    assert "approval.resolved" in [e["type"] for e in early.events()]


async def test_a_watcher_that_stops_reading_never_slows_the_run(world, tmp_path):
    folder, cli = world.folder("research"), world.folder("cli")
    release = tmp_path / "release"
    release.touch()
    (tmp_path / "watched").touch()
    (folder / "research.py").write_text(RESEARCH.format(release=str(release)))
    name = f"w-{uuid.uuid4().hex[:8]}"
    world.model.add_script(name, {"write": [{"content": "done"}]})
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    companies = [f"Co{i}" for i in range(12)]
    with UserWorker(folder / "w", env, "--tool-modules", "research") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--pipeline", "report", "--input",
                          json.dumps({"companies": ["Acme"]}), "--model", f"script:{name}", "--run-id", "warm-up",
                          "--wait")
        await rewind_json(cli, cli_env, "start", "--pipeline", "report", "--input",
                          json.dumps({"companies": companies}), "--model", f"script:{name}", "--run-id", "unwatched")
        stalled = Watcher(cli, cli_env, "unwatched")
        try:
            await stalled.until("the run's start", lambda es: any(e["type"] == "run.started" for e in es))
            os.kill(stalled.process.pid, signal.SIGSTOP)  # it reads nothing more
            view = await rewind_json(cli, cli_env, "status", "unwatched")
            deadline = time.monotonic() + 120
            while view["workflow_status"] == "running" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                view = await rewind_json(cli, cli_env, "status", "unwatched")
            assert view["state"] == "completed", view  # the run ended while its watcher read nothing
            os.kill(stalled.process.pid, signal.SIGCONT)
            assert await stalled.exit_code() == 0, stalled.error()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stalled.process.pid, signal.SIGCONT)
            stalled.stop()
    got = stalled.events()
    assert [e["type"] for e in got].count("tool.completed") == len(companies) + 1  # and `begin`
    assert durable(got) == durable(await watch_json(cli, cli_env, "unwatched"))


async def test_sub_agents_come_merged_into_their_callers_stream(world, tmp_path):
    cli = world.folder("cli")
    folder = world.folder("fanout")
    (folder / "team.py").write_text(TEAM)
    env, cli_env = world.env(folder, PYTHONPATH=str(folder)), world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "team") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--agent", "orchestrator", "--task",
                          "Research these companies: Acme, Globex", "--run-id", "fan-watch", "--wait")
    events = await watch_json(cli, cli_env, "fan-watch")
    children = {tuple(e["path"]) for e in events if e["path"]}
    assert len(children) == 2, children
    for path in children:
        own = [e for e in events if tuple(e["path"]) == path]
        assert own[0]["type"] == "run.started" and own[-1]["type"] in ("checkpoint", "run.completed"), own
        assert all(e["id"].startswith("/".join(path) + "/") for e in own)
        assert all(e["branch"].startswith("main.s") for e in own)
    assert events[-1]["type"] == "run.completed" and not events[-1]["path"]
    # Resumed after a child's event: nothing twice.
    full = durable(events)
    middle = next(i for i, e in enumerate(events) if e["path"] and "~" not in e["id"])
    cursor = events[middle]["cursor"]
    rest = durable(await watch_json(cli, cli_env, "fan-watch", "--after", cursor))
    assert sorted(full[: len(durable(events[: middle + 1]))] + rest) == sorted(full)
    assert len(set(rest)) == len(rest)


async def test_a_watcher_in_a_third_folder_sees_the_workers_through_s3_and_redis(temporal_server, tmp_path, model,
                                                                                  moto_endpoint, redis_url):
    import boto3

    from as_user import user_env

    bucket = f"watch-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    queue = f"watch-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    (tmp_path / "watched").touch()

    def env(home: Path, **extra: str) -> dict[str, str]:
        return user_env(home, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue,
                        REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_HOT_STORE=redis_url,
                        AWS_ENDPOINT_URL=moto_endpoint, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing",
                        AWS_SECRET_ACCESS_KEY="testing", OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url,
                        **extra)

    first, second, third = (tmp_path / n for n in ("machine-a", "machine-b", "machine-c"))
    for d in (first, second, third):
        d.mkdir()
    for d in (first, second):
        (d / "research.py").write_text(RESEARCH.format(release=str(release)))
    name = f"w-{uuid.uuid4().hex[:8]}"
    model.add_script(name, {"write": [{"content": "all grow"}]})
    with UserWorker(first / "w", env(first, PYTHONPATH=str(first)), "--tool-modules", "research") as a, \
            UserWorker(second / "w", env(second, PYTHONPATH=str(second)), "--tool-modules", "research") as b:
        await a.wait_ready()
        await b.wait_ready()
        await rewind_json(third, env(third), "start", "--pipeline", "report", "--input",
                          json.dumps({"companies": ["Acme", "Slowco"]}), "--model", f"script:{name}", "--run-id",
                          "far-away")
        watcher = Watcher(third, env(third), "far-away")
        try:
            # Live from the workers' Redis: a tool's progress (never stored) reaches the third folder.
            await watcher.until("the tool's progress", lambda es: any(
                e["type"] == "custom" and e["data"].get("source") == "tool" for e in es))
            release.touch()
            assert await watcher.exit_code() == 0, watcher.error()
        finally:
            watcher.stop()
    live = watcher.events()
    assert live[-1]["type"] == "run.completed"
    assert durable(live) == durable(await watch_json(third, env(third), "far-away"))
    assert not (third / ".rewind" / "live").exists()  # nothing local carried it

