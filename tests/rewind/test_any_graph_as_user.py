"""Any LangGraph graph runs unchanged (issue 58), as users write graphs: nodes that do their own
I/O (sqlite3, HTTP, files, the clock), a module that reads its environment and `.env` at import
and builds `ChatOpenAI()` from OPENAI_API_KEY, LangGraph's prebuilt ReAct agent with ordinary
sync tools. The worker and `rewind` run as subprocesses, configured only by the environment;
each graph's nodes count their executions in files, and the worker is killed inside a node."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from as_user import UserWorker, one_line_error, rewind, rewind_json, until
from test_langgraph_runs_as_user import _explained, finished, labels_asked, lines, script, tree_labels

IO_GRAPH = '''
"""A graph whose nodes do their own I/O, as at home."""
import json
import os
import sqlite3
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import TypedDict

from dotenv import load_dotenv
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph

load_dotenv()
HERE = Path(__file__).resolve().parent
LOG = Path(os.environ["GRAPH_LOG"])
DB = os.environ.get("GRAPH_DB", str(HERE / "rows.db"))
PRICES_URL = os.environ["PRICES_URL"]
RELEASE = Path(os.environ["GRAPH_RELEASE"])
llm = ChatOpenAI(model="gpt-4o-mini")


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


class State(TypedDict, total=False):
    topic: str
    rows: list
    price: str
    summary: str
    stamped: str
    saved: str


def load_rows(state):
    count("load_rows")
    with sqlite3.connect(DB) as db:
        rows = [r[0] for r in db.execute("select name from items order by name")]
    return {"rows": rows}


def fetch_price(state):
    count("fetch_price")
    with urllib.request.urlopen(PRICES_URL + "/" + state["rows"][0]) as reply:
        return {"price": reply.read().decode()}


async def summarize(state):
    answer = await llm.ainvoke([HumanMessage("Summarize: " + ", ".join(state["rows"]) + " at " + state["price"])])
    count("summarize")
    return {"summary": str(answer.content)}


def stamp(state):
    count("stamp start")
    while not RELEASE.exists():
        time.sleep(0.05)
    count("stamp done")
    return {"stamped": datetime.now().isoformat()[:4]}


def save(state):
    out = HERE / "report.txt"
    with open(out, "a") as f:
        f.write(state["summary"] + "\\n")
    count("save")
    return {"saved": out.name}


builder = StateGraph(State)
for name, fn in [("load_rows", load_rows), ("fetch_price", fetch_price), ("summarize", summarize),
                 ("stamp", stamp), ("save", save)]:
    builder.add_node(name, fn)
builder.add_edge(START, "load_rows")
builder.add_edge("load_rows", "fetch_price")
builder.add_edge("fetch_price", "summarize")
builder.add_edge("summarize", "stamp")
builder.add_edge("stamp", "save")
builder.add_edge("save", END)
graph = builder.compile()


@task
def read_rows(limit: int) -> list:
    with sqlite3.connect(DB) as db:  # its own I/O: the task runs as one activity
        return [r[0] for r in db.execute("select name from items order by name limit ?", (limit,))]


@task
async def describe(rows: list) -> str:
    answer = await llm.ainvoke([HumanMessage("Describe: " + ", ".join(rows))])
    return str(answer.content)


@entrypoint()
async def flow(inputs: dict) -> str:
    rows = await read_rows(inputs["limit"])
    return await describe(rows)
'''


class _Prices(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"{self.path.rsplit('/', 1)[-1]}: 4 EUR".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _price_server() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prices)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/prices"


def _io_folder(world, tmp_path: Path) -> tuple[Path, Path, Path, dict]:
    import sqlite3

    folder = world.folder("io")
    (folder / "io_graph.py").write_text(IO_GRAPH)
    with sqlite3.connect(folder / "rows.db") as db:
        db.execute("create table items (name text)")
        db.executemany("insert into items values (?)", [("tea",), ("cake",)])
    log, release = tmp_path / f"io-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    # The module's settings come from the environment and from its .env file, read at import.
    (folder / ".env").write_text(f"GRAPH_LOG={log}\nGRAPH_RELEASE={release}\n")
    return folder, log, release, {}


async def test_a_graph_whose_nodes_do_their_own_io_runs_unchanged_crashes_and_forks(world, tmp_path):
    folder, log, release, _ = _io_folder(world, tmp_path)
    server, url = _price_server()
    # The worker's own folder is the module's: its .env is read from the working directory.
    env = {**world.env(folder), "PYTHONPATH": str(folder), "PRICES_URL": url}
    model = script(world.model, {"summarize": [{"content": "tea and cake, 4 EUR"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    # The machine dies inside the stamp node (a node-level node).
    await _killed_inside(folder, env, "io_graph", cli, cli_env, "io-crash",
                         "the stamp node runs", lambda: "stamp start" in lines(log),
                         "--graph", "io_graph:graph", "--input", '{"topic": "shop"}', "--model", model)
    release.touch()
    with UserWorker(folder, env, "--tool-modules", "io_graph") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "io-crash")
        assert view["state"] == "completed", (view, second.log()[-3000:])
        done = json.loads(view["status"]["final_answer"])
        assert done["rows"] == ["cake", "tea"] and done["price"] == "cake: 4 EUR", done
        assert done["summary"] == "tea and cake, 4 EUR" and done["saved"] == "report.txt", done
        counted = lines(log)
        # Each node before the crash once; the killed node again (node-level: at most once more).
        assert counted.count("load_rows") == 1 and counted.count("fetch_price") == 1, counted
        assert counted.count("summarize") == 1 and counted.count("stamp start") == 2, counted
        assert counted.count("stamp done") == 1 and counted.count("save") == 1, counted
        assert labels_asked(world.model, model) == ["summarize"]  # the model call once
        labels = await tree_labels(cli, cli_env, "io-crash")
        assert labels == ["start", "load_rows", "fetch_price", "summarize", "stamp", "save", "result"], labels
        # A fork from the summary with its channel set: the nodes before it do not run again.
        before = lines(log)
        forked = await rewind_json(cli, cli_env, "fork", "io-crash", "--step", "3", "--branch", "short",
                                   "--set", 'summary="short"', "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert json.loads(forked["status"]["final_answer"])["summary"] == "short"
        after = lines(log)[len(before):]
        assert after == ["stamp start", "stamp done", "save"], after
        code, out, err = await rewind(cli, cli_env, "diff", "io-crash", "main", "short")
        assert code == 0, err
        # A label the run never used changes nothing: refused, naming those it has.
        code, out, err = await rewind(cli, cli_env, "fork", "io-crash", "--step", "3", "--branch", "typo",
                                      "--model", "sumarize=gpt-4o")
        one_line_error(code, err, "--model sumarize=... names a label", "fetch_price, load_rows, save, stamp, summarize")
        stats = await rewind_json(cli, cli_env, "stats", "--run", "io-crash", "--by", "node")
        assert stats["groups"]["summarize"]["model_calls"] == 1, stats
        # The functional API: an @task that does its own I/O runs as one activity, one that calls
        # ChatOpenAI stays call-level.
        described = script(world.model, {"describe": [{"content": "cake, then tea"}]})
        done = await rewind_json(cli, cli_env, "start", "--graph", "io_graph:flow", "--input", '{"limit": 2}',
                                 "--model", described, "--run-id", "io-flow", "--wait")
        assert done["status"]["state"] == "completed" and done["status"]["final_answer"] == "cake, then tea", done
        assert await tree_labels(cli, cli_env, "io-flow") == ["start", "read_rows", "describe", "result"]
        shown = await rewind_json(cli, cli_env, "show", "io-flow:main:1")
        assert [c["kind"] for c in shown["pipeline"]["calls"]] == ["node"], shown["pipeline"]
        assert "sqlite3.connect" in shown["pipeline"]["calls"][0]["why"], shown["pipeline"]
    server.shutdown()
    assert (folder / "report.txt").read_text().splitlines() == ["tea and cake, 4 EUR", "short"]


def _async(check):
    async def run():
        return check()
    return run


def _when(check, cli: Path, env: dict, run_id: str, label: str, done: int):
    """`check()`, once `done` calls labelled `label` are recorded as completed."""
    async def run():
        return check() and await _completed(cli, env, run_id, label) >= done
    return run


async def _completed(cli: Path, env: dict, run_id: str, label: str) -> int:
    """How many of the run's calls labelled `label` Temporal has recorded as completed (a tool that
    wrote its last line may not have told Temporal yet when the machine dies)."""
    view = await rewind_json(cli, env, "status", run_id)
    return sum(1 for c in (view.get("status") or {}).get("pipeline_calls") or []
               if c["label"] == label and c["state"] == "completed")


async def _killed_inside(worker_dir: Path, env: dict, module: str, cli: Path, cli_env: dict, run_id: str,
                         what: str, check, *start: str) -> None:
    """`rewind start ARGS... --run-id RUN_ID` on a worker of `module`, killed (a machine that
    dies) once `check()` holds: inside the node the test holds there."""
    first = UserWorker(worker_dir, env, "--tool-modules", module)
    try:
        await first.wait_ready()
        await rewind_json(cli, cli_env, "start", *start, "--run-id", run_id)
        await _explained(cli, cli_env, run_id, first, until(what, check if asyncio.iscoroutinefunction(check)
                                                             else _async(check)))
        first.kill()
    finally:
        first.stop()


REACT_AGENT = '''
"""LangGraph's prebuilt ReAct agent with ordinary sync tools, and a sync node calling llm.invoke."""
import os
import time
from pathlib import Path
from typing import TypedDict

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import create_react_agent

LOG = Path(os.environ["GRAPH_LOG"])
RELEASE = Path(os.environ["GRAPH_RELEASE"])
llm = ChatOpenAI(model="gpt-4o-mini")


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
def lookup_price(item: str) -> str:
    """The price of one item."""
    count(f"price {item}")
    while item == "cake" and not RELEASE.exists():
        time.sleep(0.05)
    count(f"priced {item}")
    return f"{item}: 4 EUR"


@tool
def place_order(item: str) -> str:
    """Place an order."""
    count(f"order {item}")
    return f"ordered {item}"


rewind_tool_options = {"place_order": {"side_effects": True}}
agent = create_react_agent(llm, [lookup_price, place_order])


class Brief(TypedDict, total=False):
    topic: str
    brief: str


def write_brief(state):
    answer = llm.invoke("Write a brief on " + state["topic"])
    count("brief")
    return {"brief": answer.content}


builder = StateGraph(Brief)
builder.add_node("write_brief", write_brief)
builder.add_edge(START, "write_brief")
builder.add_edge("write_brief", END)
brief = builder.compile()
'''


async def test_the_prebuilt_react_agent_with_sync_tools_runs_offline_crashes_and_forks(world, tmp_path):
    folder = world.folder("react")
    (folder / "shop_agent.py").write_text(REACT_AGENT)
    log, release = tmp_path / f"react-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    scripts = tmp_path / "scripts.json"
    scripts.write_text(json.dumps({
        "shop": {"agent": [
            {"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}},
                            {"name": "lookup_price", "arguments": {"item": "cake"}}]},
            {"tool_calls": [{"name": "place_order", "arguments": {"item": "tea"}}]},
            {"content": "Ordered tea for 4 EUR."}]},
        "brief": {"write_brief": [{"content": "BRIEF on tea"}]}}))
    # Offline: no OPENAI_API_KEY, so the worker answers from its scripted model and lends it to
    # the module's ChatOpenAI(), which reads its key and address from the environment at import.
    env = world.env(folder, PYTHONPATH=str(folder), OPENAI_API_KEY=None, OPENAI_BASE_URL=None,
                    REWIND_SCRIPTS=str(scripts), GRAPH_LOG=str(log), GRAPH_RELEASE=str(release),
                    REWIND_SCRIPTED_LATENCY_MS="0")
    cli = world.folder("cli")
    cli_env = world.env(cli)
    ask = json.dumps({"messages": [{"role": "user", "content": "Buy tea if it is cheaper than cake"}]})
    # The machine dies inside the tools node: one lookup done, the other running.
    await _killed_inside(folder / "w1", env, "shop_agent", cli, cli_env, "react-crash",
                         "tea's price recorded, the cake's being looked up",
                         _when(lambda: "price cake" in lines(log), cli, cli_env, "react-crash", "lookup_price", 1),
                         "--graph", "shop_agent:agent", "--input", ask, "--model", "script:shop")
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "shop_agent") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "react-crash")
        assert view["state"] == "completed", (view, second.log()[-3000:])
        assert view["status"]["final_answer"] == "Ordered tea for 4 EUR."
        counted = lines(log)
        assert counted.count("price tea") == 1 and counted.count("priced tea") == 1, counted  # not repeated
        assert counted.count("priced cake") == 1 and counted.count("order tea") == 1, counted
        assert view["status"]["ledger"]["model_calls"] == 3, view["status"]["ledger"]
        labels = await tree_labels(cli, cli_env, "react-crash")
        # The prebuilt agent sends each tool call to its tools node (a Send): one step per call.
        assert labels == ["start", "agent", "tools", "tools", "agent", "tools", "agent", "result"], labels
        # From before the order, with the order reused: nothing runs twice.
        forked = await rewind_json(cli, cli_env, "fork", "react-crash", "--step", "4", "--branch", "again",
                                   "--side-effects", "reuse", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert lines(log) == counted, lines(log)
        code, out, err = await rewind(cli, cli_env, "diff", "react-crash", "main", "again")
        assert code == 0 and "agent" in out, out + err
        # A sync node calling llm.invoke runs as one activity; its model call is in the ledger, by node.
        done = await rewind_json(cli, cli_env, "start", "--graph", "shop_agent:brief", "--input",
                                 '{"topic": "tea"}', "--model", "script:brief", "--run-id", "react-brief", "--wait")
        assert done["status"]["state"] == "completed", done
        assert json.loads(done["status"]["final_answer"])["brief"] == "BRIEF on tea"
        assert done["status"]["ledger"]["model_calls"] == 1, done["status"]["ledger"]
        stats = await rewind_json(cli, cli_env, "stats", "--run", "react-brief", "--by", "node")
        assert stats["groups"]["write_brief"]["model_calls"] == 1, stats
        shown = await rewind_json(cli, cli_env, "show", "react-brief:main:1")
        [node_call] = shown["pipeline"]["calls"]
        assert node_call["kind"] == "node" and node_call["model_calls"][0]["model"] == "script:brief", node_call


FANOUT = '''
"""A research subgraph, then a Send map-reduce over what it found, then a report."""
import asyncio
import operator
import os
from pathlib import Path
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

LOG = Path(os.environ["GRAPH_LOG"])
RELEASE = Path(os.environ["GRAPH_RELEASE"])
llm = ChatOpenAI(model="gpt-4o-mini")


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
async def lookup(item: str) -> str:
    """Facts about one item."""
    count(f"lookup {item}")
    while item == "cake" and not RELEASE.exists():
        await asyncio.sleep(0.05)
    count(f"looked {item}")
    return f"{item} is sweet"


class State(TypedDict, total=False):
    topic: str
    items: list
    summaries: Annotated[list, operator.add]
    report: str


async def plan(state):
    answer = await llm.ainvoke([HumanMessage("List items on " + state["topic"])])
    return {"items": [i.strip() for i in str(answer.content).split(",")]}


def check(state):
    count("check " + ",".join(state["items"]))  # its own I/O: one activity
    return {}


research_graph = StateGraph(State)
research_graph.add_node("plan", plan)
research_graph.add_node("check", check)
research_graph.add_edge(START, "plan")
research_graph.add_edge("plan", "check")
research_graph.add_edge("check", END)
research = research_graph.compile()


async def summarize(task):
    facts = await lookup.ainvoke({"item": task["item"]})
    answer = await llm.ainvoke([HumanMessage("Summarize: " + facts)])
    return {"summaries": [f"{task['item']}: {answer.content}"]}


async def write(state):
    answer = await llm.ainvoke([HumanMessage("Report from: " + "; ".join(sorted(state["summaries"])))])
    return {"report": str(answer.content)}


def fan_out(state):
    return [Send("summarize", {"item": item}) for item in state["items"]]


builder = StateGraph(State)
builder.add_node("research", research)
builder.add_node("summarize", summarize)
builder.add_node("write", write)
builder.add_edge(START, "research")
builder.add_conditional_edges("research", fan_out, ["summarize"])
builder.add_edge("summarize", "write")
builder.add_edge("write", END)
graph = builder.compile()
'''


async def test_a_subgraph_and_a_send_fan_out_are_steps_forkable_and_redone_one_by_one(world, tmp_path):
    folder = world.folder("fanout")
    (folder / "fanout.py").write_text(FANOUT)
    log, release = tmp_path / f"fan-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    env = world.env(folder, PYTHONPATH=str(folder), GRAPH_LOG=str(log), GRAPH_RELEASE=str(release))
    model = script(world.model, {"research/plan": [{"content": "tea, cake, jam"}],
                                 "summarize": [{"content": "fine"}], "write": [{"content": "REPORT"}]})
    other = script(world.model, {"summarize": [{"content": "finer"}], "write": [{"content": "REPORT 2"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    # The machine dies inside one branch of the fan-out.
    await _killed_inside(folder / "w1", env, "fanout", cli, cli_env, "fan-crash", "two sends looked up, the cake's running",
                         _when(lambda: "lookup cake" in lines(log), cli, cli_env, "fan-crash", "lookup", 2),
                         "--graph", "fanout:graph", "--input", '{"topic": "sweets"}', "--model", model)
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "fanout") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "fan-crash")
        assert view["state"] == "completed", (view, second.log()[-3000:])
        assert json.loads(view["status"]["final_answer"])["report"] == "REPORT"
        counted = lines(log)
        assert counted.count("looked tea") == 1 and counted.count("looked jam") == 1, counted  # no call repeated
        assert counted.count("looked cake") == 1 and counted.count("check tea,cake,jam") == 1, counted
        assert sorted(labels_asked(world.model, model)) == ["research/plan", "summarize", "summarize", "summarize",
                                                            "write"]
        labels = await tree_labels(cli, cli_env, "fan-crash")
        assert labels == ["start", "research/plan", "research/check", "research", "summarize", "summarize",
                          "summarize", "write", "result"], labels
        shown = await rewind_json(cli, cli_env, "show", "fan-crash:main:1")
        assert shown["pipeline"]["ns"] == "research" and shown["agent_variables"]["items"] == ["tea", "cake", "jam"]
        sends = [(await rewind_json(cli, cli_env, "show", f"fan-crash:main:{k}"))["pipeline"] for k in (4, 5, 6)]
        assert sorted(s["send"] for s in sends) == [0, 1, 2], sends
        assert all(len(s["calls"]) == 2 for s in sends), sends  # each send's own lookup and model call
        # A fork inside the subgraph, its plan's answer set otherwise: the plan is not asked again.
        before = len(labels_asked(world.model, model))
        forked = await rewind_json(cli, cli_env, "fork", "fan-crash", "--step", "1", "--branch", "tea",
                                   "--set", 'items=["tea"]', "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert labels_asked(world.model, model)[before:] == ["summarize", "write"]
        # The subgraph's check and tea's branch run live again (after the fork point); the plan does not.
        assert lines(log)[len(counted):] == ["check tea", "lookup tea", "looked tea"], lines(log)
        assert await tree_labels(cli, cli_env, "fan-crash", "tea") == [
            "research/check", "research", "summarize", "write", "result"]
        # One branch of the fan-out redone alone, on another model: the other two are answered from the record.
        cake = 4 + [s["send"] for s in sends].index(1)
        done = await rewind_json(cli, cli_env, "redo", "fan-crash", "--step", str(cake), "--model", other,
                                 "--branch", "cake-again", "--wait")
        assert done["status"]["state"] == "completed", done
        asked = [json.dumps(r.get("messages"))[-80:] for r in world.model.requests() if r.get("model") == other]
        assert labels_asked(world.model, other) == ["summarize"], (asked, sends,
                                                                    await tree_labels(cli, cli_env, "fan-crash", "cake-again"))
        assert labels_asked(world.model, model)[before + 2:] == ["write"]  # the report, from the new summary
        code, out, err = await rewind(cli, cli_env, "diff", "fan-crash", "main", "cake-again")
        assert code == 0, err
        stats = await rewind_json(cli, cli_env, "stats", "--run", "fan-crash", "--by", "node")
        assert stats["groups"]["summarize"]["model_calls"] >= 3 and "research/plan" in stats["groups"], stats


STORE_GRAPH = '''
"""Nodes that remember in LangGraph's Store (get_store()), one of them doing its own I/O."""
import os
import time
from pathlib import Path
from typing import TypedDict

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.memory import InMemoryStore

LOG = Path(os.environ["GRAPH_LOG"])
RELEASE = Path(os.environ["GRAPH_RELEASE"])
memory = InMemoryStore()
memory.put(("prefs", "ann"), "drink", {"value": "tea"})


class State(TypedDict, total=False):
    user: str
    visits: int
    said: str


def remember(state):
    store = get_store()
    seen = store.get(("visits",), state["user"])
    visits = (seen.value["n"] if seen else 0) + 1
    store.put(("visits",), state["user"], {"n": visits})
    return {"visits": visits}


def greet(state):
    with open(LOG, "a") as f:  # its own I/O: one activity, with the run's store
        f.write("greet start\\n")
    while not RELEASE.exists():
        time.sleep(0.05)
    store = get_store()
    drink = store.get(("prefs", state["user"]), "drink").value["value"]
    store.put(("greeted",), state["user"], {"drink": drink, "visits": state["visits"]})
    with open(LOG, "a") as f:
        f.write("greet done\\n")
    return {"said": f"hello {state['user']}, {drink} again (visit {state['visits']})"}


def check(state):
    greeted = get_store().get(("greeted",), state["user"])
    return {"said": state["said"] + (" [noted]" if greeted and greeted.value["visits"] == state["visits"] else "")}


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_node("greet", greet)
builder.add_node("check", check)
builder.add_edge(START, "remember")
builder.add_edge("remember", "greet")
builder.add_edge("greet", "check")
builder.add_edge("check", END)
graph = builder.compile(store=memory)
'''


async def test_a_store_using_graph_keeps_its_store_across_a_crash_and_a_fork(world, tmp_path):
    folder = world.folder("store")
    (folder / "remembering.py").write_text(STORE_GRAPH)
    log, release = tmp_path / f"store-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    env = world.env(folder, PYTHONPATH=str(folder), GRAPH_LOG=str(log), GRAPH_RELEASE=str(release))
    cli = world.folder("cli")
    cli_env = world.env(cli)
    await _killed_inside(folder / "w1", env, "remembering", cli, cli_env, "store-crash",
                         "greet runs", lambda: "greet start" in lines(log),
                         "--graph", "remembering:graph", "--input", '{"user": "ann"}')
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "remembering") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "store-crash")
        assert view["state"] == "completed", (view, second.log()[-3000:])
        done = json.loads(view["status"]["final_answer"])
        assert done["said"] == "hello ann, tea again (visit 1) [noted]", done
        assert lines(log) == ["greet start", "greet start", "greet done"], lines(log)
        # A fork after the first node: the store holds that node's write, and the fork's own.
        forked = await rewind_json(cli, cli_env, "fork", "store-crash", "--step", "1", "--branch", "again",
                                   "--set", "visits=5", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert json.loads(forked["status"]["final_answer"])["said"] == "hello ann, tea again (visit 5) [noted]"
        diffed = await rewind_json(cli, cli_env, "diff", "store-crash", "main", "again")
        assert {c["label"] for c in diffed["calls"]} >= {"greet", "check"}, diffed["calls"]
        stats = await rewind_json(cli, cli_env, "stats", "--run", "store-crash", "--by", "node")
        assert set(stats["groups"]) == {"remember", "greet", "check"}, stats


OTHER_MODELS = '''
"""LangChain's create_agent (init_chat_model, sync tools), and nodes on other chat models."""
import os
import time
from pathlib import Path
from typing import Any, TypedDict

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_anthropic import ChatAnthropic
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

LOG = Path(os.environ["GRAPH_LOG"])
RELEASE = Path(os.environ["GRAPH_RELEASE"])


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
def get_weather(city: str) -> str:
    """The weather in one city."""
    count(f"weather {city}")
    while city == "Paris" and not RELEASE.exists():
        time.sleep(0.05)
    return f"{city}: sunny"


@tool
def send_alert(text: str) -> str:
    """Alert the on-call person."""
    count(f"alert {text}")
    return "sent"


rewind_tool_options = {"send_alert": {"side_effects": True}}
agent = create_agent(init_chat_model("openai:gpt-4o-mini"), [get_weather, send_alert],
                     system_prompt="You watch the weather.")


class HouseModel(BaseChatModel):
    """A chat model of another provider (its own client, its own usage metadata)."""

    @property
    def _llm_type(self) -> str:
        return "house"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        count("house model")
        reply = AIMessage(content="house says hi", usage_metadata={"input_tokens": 11, "output_tokens": 4,
                                                                   "total_tokens": 15},
                          response_metadata={"model_name": "house-1"})
        return ChatResult(generations=[ChatGeneration(message=reply)])


house = HouseModel()
claude = ChatAnthropic(model=os.environ["CLAUDE_MODEL"])  # its key and URL from ANTHROPIC_* as the user set them
responder = ChatOpenAI(model="gpt-4o-mini", use_responses_api=True)


class Talk(TypedDict, total=False):
    topic: str
    house: str
    claude: str
    answer: str


async def ask_house(state):
    return {"house": (await house.ainvoke("About " + state["topic"])).content}


def ask_claude(state):
    return {"claude": claude.invoke("About " + state["topic"]).text}


async def ask_responses(state):
    answer = await responder.ainvoke("About " + state["topic"])
    return {"answer": answer.text}


builder = StateGraph(Talk)
builder.add_node("ask_house", ask_house)
builder.add_node("ask_claude", ask_claude)
builder.add_node("ask_responses", ask_responses)
builder.add_edge(START, "ask_house")
builder.add_edge("ask_house", "ask_claude")
builder.add_edge("ask_claude", "ask_responses")
builder.add_edge("ask_responses", END)
talk = builder.compile()
'''


async def test_langchains_create_agent_and_other_chat_models_run_with_their_usage_counted(world, tmp_path):
    folder = world.folder("others")
    (folder / "others.py").write_text(OTHER_MODELS)
    log, release = tmp_path / f"others-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    claude = script(world.model, [{"content": "claude says hi"}])
    env = world.env(folder, PYTHONPATH=str(folder), GRAPH_LOG=str(log), GRAPH_RELEASE=str(release),
                    CLAUDE_MODEL=claude, ANTHROPIC_API_KEY="unused",
                    ANTHROPIC_BASE_URL=world.model.base_url.removesuffix("/v1"))
    model = script(world.model, {"model": [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}},
                        {"name": "get_weather", "arguments": {"city": "Paris"}}]},
        {"tool_calls": [{"name": "send_alert", "arguments": {"text": "sun everywhere"}}]},
        {"content": "Sunny in Oslo and Paris; alert sent."}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    ask = json.dumps({"messages": [{"role": "user", "content": "Weather in Oslo and Paris? Alert if sunny."}]})
    await _killed_inside(folder / "w1", env, "others", cli, cli_env, "agent-crash",
                         "Oslo's weather recorded, Paris's asked",
                         _when(lambda: "weather Paris" in lines(log), cli, cli_env, "agent-crash", "get_weather", 1),
                         "--graph", "others:agent", "--input", ask, "--model", model)
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "others") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "agent-crash")
        assert view["state"] == "completed", (view, second.log()[-3000:])
        assert view["status"]["final_answer"] == "Sunny in Oslo and Paris; alert sent."
        counted = lines(log)
        assert counted.count("weather Oslo") == 1 and counted.count("weather Paris") == 2, counted  # the killed call again
        assert counted.count("alert sun everywhere") == 1, counted
        assert labels_asked(world.model, model) == ["model", "model", "model"]
        forked = await rewind_json(cli, cli_env, "fork", "agent-crash", "--step", "3", "--branch", "again",
                                   "--side-effects", "reuse", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert lines(log) == counted, lines(log)
        code, out, err = await rewind(cli, cli_env, "diff", "agent-crash", "main", "again")
        assert code == 0 and "model" in out, out + err
        # Other providers' models (a chat model of its own, ChatAnthropic) and ChatOpenAI's Responses API:
        # each node one activity, each call counted.
        other = script(world.model, {"ask_responses": [{"content": "responses say hi"}]})
        done = await rewind_json(cli, cli_env, "start", "--graph", "others:talk", "--input", '{"topic": "tea"}',
                                 "--model", other, "--run-id", "talk", "--wait")
        assert done["status"]["state"] == "completed", done
        answer = json.loads(done["status"]["final_answer"])
        assert answer == {"topic": "tea", "house": "house says hi", "claude": "claude says hi",
                          "answer": "responses say hi"}, answer
        ledger = done["status"]["ledger"]
        assert ledger["model_calls"] == 3 and ledger["prompt_tokens"] >= 11, ledger
        stats = await rewind_json(cli, cli_env, "stats", "--run", "talk", "--by", "node")
        assert stats["groups"]["ask_house"]["model_calls"] == 1, stats
        assert stats["groups"]["ask_house"]["total_tokens"] == 15, stats
        assert stats["groups"]["ask_responses"]["model_calls"] == 1, stats
        asked_claude = [r for r in world.model.requests() if r.get("model") == claude]
        assert [r.get("api") for r in asked_claude] == ["messages"], asked_claude  # Anthropic's Messages API
        claude_usage = asked_claude[0]["response"]["usage"]
        assert stats["groups"]["ask_claude"]["model_calls"] == 1, stats
        assert stats["groups"]["ask_claude"]["total_tokens"] == (
            claude_usage["prompt_tokens"] + claude_usage["completion_tokens"]) > 0, (stats, claude_usage)
        shown = await rewind_json(cli, cli_env, "show", "talk:main:1")
        assert shown["pipeline"]["calls"][0]["model_calls"][0]["model"] == "house-1", shown["pipeline"]
        shown = await rewind_json(cli, cli_env, "show", "talk:main:2")
        assert shown["pipeline"]["calls"][0]["model_calls"][0]["model"] == claude, shown["pipeline"]
        assert [r.get("api") for r in world.model.requests() if r.get("model") == other] == ["responses"]


ASKING = '''
"""A node that does its own I/O and asks a person (interrupt()) before it goes on."""
import os
from pathlib import Path
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

LOG = Path(os.environ["GRAPH_LOG"])


class State(TypedDict, total=False):
    amount: int
    decision: str


def confirm(state):
    with open(LOG, "a") as f:  # its own I/O: one activity, run again when the person answers
        f.write(f"confirm {state['amount']}\\n")
    answer = interrupt({"question": f"pay {state['amount']}?"})
    return {"decision": f"paid {state['amount']}" if answer == "yes" else "not paid"}


builder = StateGraph(State)
builder.add_node("confirm", confirm)
builder.add_edge(START, "confirm")
builder.add_edge("confirm", END)
graph = builder.compile()
'''


async def test_a_node_level_node_that_calls_interrupt_waits_for_a_person_and_resumes_with_the_answer(world, tmp_path):
    folder = world.folder("asking")
    (folder / "asking.py").write_text(ASKING)
    log = tmp_path / f"asking-{uuid.uuid4().hex[:6]}.txt"
    env = world.env(folder, PYTHONPATH=str(folder), GRAPH_LOG=str(log))
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "asking") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--graph", "asking:graph", "--input", '{"amount": 12}',
                          "--run-id", "asking")

        async def waiting():
            view = await rewind_json(cli, cli_env, "status", "asking")
            return view if view["state"] == "waiting_for_approval" else None
        view = await _explained(cli, cli_env, "asking", worker, until("the interrupt waits", waiting))
        [pending] = view["status"]["pending_approvals"]
        assert pending["arguments"]["value"] == {"question": "pay 12?"}, pending
        await rewind_json(cli, cli_env, "approve", "asking", pending["tool_call_id"], "--value", '"yes"')
        view = await finished(cli, cli_env, "asking")
    assert view["state"] == "completed", view
    assert json.loads(view["status"]["final_answer"])["decision"] == "paid 12"
    assert lines(log) == ["confirm 12", "confirm 12"]  # asked, then run again with the answer (LangGraph's way)


ESCAPING = '''
"""A node whose input comes from a value read where no guard sees it (a helper module's global,
read from a file when that module was imported): on replay it asks another model call."""
import asyncio
import os
from pathlib import Path
from typing import TypedDict

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import facts_cache

RELEASE = Path(os.environ["GRAPH_RELEASE"])
LOG = Path(os.environ["GRAPH_LOG"])
llm = ChatOpenAI(model="gpt-4o-mini")


@tool
async def wait_a_bit(note: str) -> str:
    """Hold on."""
    with open(LOG, "a") as f:
        f.write("waiting\\n")
    while not RELEASE.exists():
        await asyncio.sleep(0.05)
    return "ok"


class State(TypedDict, total=False):
    verdict: str


async def assess(state):
    answer = await llm.ainvoke("Assess: " + facts_cache.FACTS)
    await wait_a_bit.ainvoke({"note": str(answer.content)})
    return {"verdict": str(answer.content)}


builder = StateGraph(State)
builder.add_node("assess", assess)
builder.add_edge(START, "assess")
builder.add_edge("assess", END)
graph = builder.compile()
'''


async def test_a_node_whose_input_escapes_every_guard_stops_in_one_line_naming_it(world, tmp_path):
    folder = world.folder("escaping")
    (folder / "escaping.py").write_text(ESCAPING)
    facts = tmp_path / "facts.txt"
    facts.write_text("tea is cheap")
    (folder / "facts_cache.py").write_text(f"from pathlib import Path\nFACTS = Path({str(facts)!r}).read_text()\n")
    log, release = tmp_path / f"esc-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    env = world.env(folder, PYTHONPATH=str(folder), GRAPH_LOG=str(log), GRAPH_RELEASE=str(release))
    model = script(world.model, {"assess": [{"content": "fine"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    await _killed_inside(folder / "w1", env, "escaping", cli, cli_env, "escaping", "the node's tool waits",
                         lambda: "waiting" in lines(log), "--graph", "escaping:graph", "--input", "{}",
                         "--model", model)
    facts.write_text("tea is dear")  # what the node read has changed when the run replays it
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "escaping") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "escaping")
        code, out, err = await rewind(cli, cli_env, "status", "escaping")
    assert view["state"] == "failed", view
    said = view["code_change"] or ""
    assert "call 0 (llm call 'assess') asked other arguments" in said, view
    assert "rewind_node_options" in said and "changed since" in said, said
    assert said in out, out
    assert labels_asked(world.model, model) == ["assess"]  # not answered with the recorded call's answer
