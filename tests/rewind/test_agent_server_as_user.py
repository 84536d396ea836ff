"""LangGraph's Agent Server API on `rewind serve`, as a LangGraph app's client meets it: the
dev server, a worker (the graphs in its tools modules) and `rewind serve` as subprocesses
configured only by environment variables, talked to by langgraph-sdk's own `get_client`
pointed at the server's /langgraph. The graphs' model is the scripted model, by node."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest
from as_user import UserServer, rewind_json, user_env, user_workers
from rewind.temporal.dev_server import free_port
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

CHAT = '''
import asyncio
from pathlib import Path
from typing import Annotated, TypedDict

from langchain_openai import ChatOpenAI
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

llm = ChatOpenAI(model={model!r})


class State(TypedDict):
    messages: Annotated[list, add_messages]


async def gate(state):
    # Custom parts are live only: the node writes once the client reads the stream (the test opens the gate).
    while not Path({gate!r}).exists():
        await asyncio.sleep(0.05)
    get_stream_writer()({{"thinking": len(state["messages"])}})
    return {{"messages": []}}


async def chat(state):
    answer = await llm.ainvoke(state["messages"])
    return {{"messages": [answer]}}


builder = StateGraph(State)
builder.add_node("gate", gate)
builder.add_node("chat", chat)
builder.add_edge(START, "gate")
builder.add_edge("gate", "chat")
builder.add_edge("chat", END)
graph = builder.compile()
'''

REVIEWED = '''
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

llm = ChatOpenAI(model={model!r})


class State(TypedDict, total=False):
    topic: str
    draft: str
    note: str
    report: str


async def draft(state):
    answer = await llm.ainvoke([HumanMessage("Draft on " + state["topic"])])
    return {{"draft": str(answer.content)}}


async def review(state):
    note = interrupt({{"draft": state["draft"]}})
    return {{"note": note}}


async def publish(state):
    return {{"report": state["draft"] + " / reviewer: " + str(state["note"])}}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("review", review)
builder.add_node("publish", publish)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_edge("review", "publish")
builder.add_edge("publish", END)
graph = builder.compile()
'''

REACT = '''
from pathlib import Path

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

LOG = Path({log!r})


@tool
def place_order(item: str) -> str:
    """Place an order."""
    with open(LOG, "a") as f:
        f.write(f"order {{item}}\\n")
    return f"ordered {{item}}"


rewind_tool_options = {{"place_order": {{"side_effects": True}}}}
agent = create_react_agent(ChatOpenAI(model={model!r}), [place_order])
'''

CHAT_SCRIPT = {"chat": [
    {"content": "Hello there, how can I help?", "stream": {"tokens_per_s": 200}},
    {"content": "Second answer."},
    {"content": "Third answer."},
    {"content": "A very slow answer " * 30, "stream": {"tokens_per_s": 5}},
    {"content": "Fifth and slow " * 20, "stream": {"tokens_per_s": 5}},
    {"content": "Sixth."},
    {"content": "Seventh."},
]}
SLOW_SCRIPT = {"chat": [{"content": " ".join(f"word{i}" for i in range(60)), "stream": {"tokens_per_s": 10}}]}
REVIEW_SCRIPT = {"draft": [{"content": "DRAFT one"}] * 8}
USER = {"role": "user", "content": "hi"}


@dataclass
class Stack:
    root: Path
    url: str
    env: Callable[..., dict[str, str]]
    model: Any
    chat: str  # the chat graph's model (script:NAME)

    def client(self, **headers: str) -> Any:
        return get_client(url=self.url + "/langgraph", headers=headers or None)


@pytest.fixture(scope="module")
async def stack(temporal_server, model_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent-server")
    queue = f"lg-{uuid.uuid4().hex[:8]}"
    worker_dir = root / "worker"
    worker_dir.mkdir()
    chat, review = f"chat-{uuid.uuid4().hex[:6]}", f"review-{uuid.uuid4().hex[:6]}"
    slow, remote = f"slow-{uuid.uuid4().hex[:6]}", f"remote-{uuid.uuid4().hex[:6]}"
    model_server.add_script(chat, CHAT_SCRIPT)
    model_server.add_script(slow, SLOW_SCRIPT)
    model_server.add_script(remote, {"chat": [{"content": "Remote one."}, {"content": "Remote two."}]})
    shop = f"shop-{uuid.uuid4().hex[:6]}"
    model_server.add_script(shop, [{"tool_calls": [{"name": "place_order", "arguments": {"item": "tea"}}]},
                                   {"content": "Ordered tea."}, {"content": "You are welcome."}])
    (worker_dir / "shopagent.py").write_text(REACT.format(model=f"script:{shop}", log=str(root / "orders.txt")))
    queued = f"queued-{uuid.uuid4().hex[:6]}"
    model_server.add_script(queued, {"chat": [{"content": "First and slow " * 10, "stream": {"tokens_per_s": 10}},
                                              {"content": "Queued."},
                                              {"content": "Third and slow " * 10, "stream": {"tokens_per_s": 10}}]})
    (worker_dir / "queuechat.py").write_text(CHAT.format(model=f"script:{queued}", gate=str(root / "open")))
    (worker_dir / "remotechat.py").write_text(CHAT.format(model=f"script:{remote}", gate=str(root / "open")))
    (root / "open").touch()
    (worker_dir / "slowchat.py").write_text(CHAT.format(model=f"script:{slow}", gate=str(root / "open")))
    model_server.add_script(review, REVIEW_SCRIPT)
    (worker_dir / "chatgraph.py").write_text(CHAT.format(model=f"script:{chat}", gate=str(root / "gate")))
    (worker_dir / "reviewed.py").write_text(REVIEWED.format(model=f"script:{review}"))
    (root / "serve").mkdir()
    (root / "serve" / "twoauth.py").write_text(AUTH)

    def env(home: Path, **extra: str | None) -> dict[str, str]:
        return user_env(home, **{
            "TEMPORAL_ADDRESS": temporal_server.address, "REWIND_TASK_QUEUE": queue,
            "REWIND_STORE": f"file://{root / 'store'}", "REWIND_PAYLOADS": f"file://{root / 'payloads'}",
            "REWIND_HOME": str(worker_dir / ".rewind"), "PYTHONPATH": str(worker_dir),
            "OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": model_server.base_url, **extra})

    async with user_workers() as start:
        worker = start(worker_dir, env(worker_dir), "--tool-modules", "chatgraph,reviewed,slowchat,remotechat,queuechat,shopagent")
        await worker.wait_ready()
        server = UserServer(root / "serve", env(root / "serve"))
        try:
            yield Stack(root, await server.url(), env, model_server, f"script:{chat}")
        finally:
            await server.stop_async()


def asked(model: Any, name: str) -> list[str]:
    return [r.get("label") for r in model.requests() if r.get("model") == name and r.get("status") == 200]


async def double_text(client: Any, tid: str, graph: str, first: str, second: str, strategy: str) -> tuple[Any, Any]:
    """A user writes `first`, then `second` while the model still answers the first (its first token
    is out): the first run, and the thread's values once the second has run with `strategy`."""
    busy = await client.runs.create(tid, graph, input={"messages": [{"role": "user", "content": first}]})
    async for part in client.runs.join_stream(tid, busy["run_id"], stream_mode=["messages-tuple"]):
        if part.event == "messages":
            break
    run = await client.runs.create(tid, graph, input={"messages": [{"role": "user", "content": second}]},
                                   multitask_strategy=strategy)
    return busy, await client.runs.join(tid, run["run_id"])


async def test_a_thread_is_a_rewind_run_streamed_waited_joined_and_listed_by_the_sdk(stack) -> None:
    client = stack.client()
    offered = {a["graph_id"] for a in await client.assistants.search()}
    assert offered == {"chatgraph:graph", "reviewed:graph", "slowchat:graph", "remotechat:graph",
                       "queuechat:graph", "shopagent:agent"}, offered
    schemas = await client.assistants.get_schemas("reviewed:graph")
    assert "topic" in str(schemas["input_schema"]), schemas
    thread = await client.threads.create(metadata={"user": "ann"})
    tid = thread["thread_id"]
    assert thread["status"] == "idle" and thread["metadata"] == {"user": "ann"}, thread

    parts = []
    async for part in client.runs.stream(tid, "chatgraph:graph", input={"messages": [USER]},
                                         stream_mode=["values", "updates", "messages-tuple", "custom"]):
        parts.append(part)
        if part.event == "values":
            (stack.root / "gate").touch()  # the stream is read: the node may write its custom part
    events = [p.event for p in parts]
    assert events[0] == "metadata", events
    assert {"values", "updates", "messages", "custom"} <= set(events), events
    updates = [p.data for p in parts if p.event == "updates"]
    assert [list(u) for u in updates] == [["gate"], ["chat"]], updates
    assert [p.data for p in parts if p.event == "custom"] == [{"thinking": 1}]
    chunks = [p.data for p in parts if p.event == "messages"]
    text = "".join(c[0]["content"] for c in chunks if c[0]["type"] in ("AIMessageChunk", "ai"))
    assert text == "Hello there, how can I help?", chunks
    assert all(c[1]["langgraph_node"] == "chat" for c in chunks), chunks
    last = [p.data for p in parts if p.event == "values"][-1]
    assert [(m["type"], m["content"]) for m in last["messages"]] == [
        ("human", "hi"), ("ai", "Hello there, how can I help?")], last

    # The next run on the thread continues it: the graph invoked again with the new input.
    values = await client.runs.wait(tid, "chatgraph:graph", input={"messages": [{"role": "user", "content": "more"}]})
    assert [m["content"] for m in values["messages"]] == ["hi", "Hello there, how can I help?", "more",
                                                            "Second answer."], values

    # In the background: create, join, get, list.
    run = await client.runs.create(tid, "chatgraph:graph", input={"messages": [{"role": "user", "content": "end"}]})
    joined = await client.runs.join(tid, run["run_id"])
    assert [m["content"] for m in joined["messages"]][-2:] == ["end", "Third answer."], joined
    assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"
    listed = await client.runs.list(tid)
    assert [r["run_id"] for r in listed][0] == run["run_id"] and len(listed) == 3, listed
    assert asked(stack.model, stack.chat).count("chat") >= 3  # one call per turn, none twice
    assert asked(stack.model, stack.chat)[:3] == ["chat", "chat", "chat"]

    # The thread's state and history, and the Rewind run under it.
    state = await client.threads.get_state(tid)
    assert state["values"]["messages"][-1]["content"] == "Third answer." and state["next"] == [], state
    history = await client.threads.get_history(tid, limit=50)
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"], history[0]
    assert [h["values"]["messages"][-1]["content"] for h in history if h["metadata"]["rewind_label"] == "chat"] == [
        "Third answer.", "Second answer.", "Hello there, how can I help?"], [h["metadata"] for h in history]
    cli = stack.root / f"cli-{uuid.uuid4().hex[:6]}"
    cli.mkdir()
    view = await rewind_json(cli, stack.env(cli), "status", tid)
    assert view["state"] == "completed", view
    shown = await rewind_json(cli, stack.env(cli), "show", state["checkpoint"]["checkpoint_id"])
    assert shown["messages"][-1]["content"] == "Third answer.", shown["messages"]
    found = await client.threads.search(metadata={"user": "ann"})
    assert [t["thread_id"] for t in found] == [tid] and found[0]["status"] == "idle", found

    # A run while another runs on the thread is refused (multitask_strategy reject); cancel stops it.
    slow = await client.runs.create(tid, "chatgraph:graph", input={"messages": [{"role": "user", "content": "go"}]})
    with pytest.raises(ConflictError):
        await client.runs.create(tid, "chatgraph:graph", input={"messages": [USER]})
    resumed = []
    async for part in client.runs.join_stream(tid, slow["run_id"], stream_mode=["messages-tuple"]):
        resumed.append(part)
        if part.event == "messages":
            break
    await client.runs.cancel(tid, slow["run_id"])
    await client.runs.join(tid, slow["run_id"])
    assert (await client.runs.get(tid, slow["run_id"]))["status"] == "interrupted"
    with pytest.raises(NotFoundError):
        await client.runs.get(tid, str(uuid.uuid4()))
    # multitask_strategy interrupt: the run in progress is stopped, the new one goes on from the thread's head.
    busy, after = await double_text(client, tid, "chatgraph:graph", "x", "y", "interrupt")
    contents = [m["content"] for m in after["messages"]]
    # The stopped invocation's remaining node ran first (its model call answered from the record), then "y".
    assert contents[-4:] == ["x", "Fifth and slow " * 20, "y", "Sixth."], contents
    assert contents[6:8] == ["go", "A very slow answer " * 30], contents  # so did the cancelled one's
    assert (await client.runs.get(tid, busy["run_id"]))["status"] == "interrupted"
    # One model call per input, and again the two cut off mid-stream (by the cancel, by the interrupt strategy):
    # the thread going on finishes their invocations, and a call with no answer yet is made again.
    assert asked(stack.model, stack.chat) == ["chat"] * 8

    # Time travel to the first answer: the fork has none of the later inputs.
    history = await client.threads.get_history(tid, limit=100)
    [first] = [h for h in history if h["metadata"]["rewind_label"] == "chat"
               and h["values"]["messages"][-1]["content"] == "Hello there, how can I help?"]
    await client.threads.update_state(tid, {}, checkpoint_id=first["checkpoint"]["checkpoint_id"])
    forked = await client.runs.wait(tid, "chatgraph:graph", input={"messages": [{"role": "user", "content": "fork"}]})
    assert [m["content"] for m in forked["messages"]] == ["hi", "Hello there, how can I help?", "fork",
                                                          "Second answer."], forked


async def test_an_interrupt_is_resumed_with_a_command_and_the_run_goes_on(stack) -> None:
    client = stack.client()
    # A graph run started by the command line is a thread too.
    cli = stack.root / f"cli-{uuid.uuid4().hex[:6]}"
    cli.mkdir()
    started = f"cli-{uuid.uuid4().hex[:8]}"
    await rewind_json(cli, stack.env(cli), "start", "--graph", "reviewed:graph", "--input", '{"topic": "cli"}',
                      "--run-id", started)
    for _ in range(600):
        with contextlib.suppress(NotFoundError):
            if (await client.threads.get(started))["status"] == "interrupted":
                break
        await asyncio.sleep(0.1)
    assert (await client.threads.get_state(started))["interrupts"][0]["value"] == {"draft": "DRAFT one"}
    done = await client.runs.wait(started, "reviewed:graph", command={"resume": "from the api"})
    assert done["report"] == "DRAFT one / reviewer: from the api", done

    tid = (await client.threads.create())["thread_id"]
    values = await client.runs.wait(tid, "reviewed:graph", input={"topic": "rivals"})
    assert values["draft"] == "DRAFT one" and values["__interrupt__"][0]["value"] == {"draft": "DRAFT one"}, values
    thread = await client.threads.get(tid)
    assert thread["status"] == "interrupted", thread
    state = await client.threads.get_state(tid)
    assert state["next"] == ["review"] and state["interrupts"][0]["value"] == {"draft": "DRAFT one"}, state
    parts = [p async for p in client.runs.stream(tid, "reviewed:graph", command={"resume": "fine"},
                                                 stream_mode="updates")]
    updates = [p.data for p in parts if p.event == "updates"]
    assert {"publish": {"report": "DRAFT one / reviewer: fine"}} in updates, updates
    final = await client.threads.get_state(tid)
    assert final["values"]["report"] == "DRAFT one / reviewer: fine" and final["next"] == [], final
    assert (await client.threads.get(tid))["status"] == "idle"

    # Time travel: the draft's checkpoint, its channel set, the run from there is a Rewind fork.
    history = await client.threads.get_history(tid, limit=50)
    [drafted] = [h for h in history if h["metadata"]["rewind_label"] == "draft"]
    assert drafted["next"] == ["review"] and drafted["values"]["draft"] == "DRAFT one", drafted
    at = await client.threads.get_state(tid, checkpoint_id=drafted["checkpoint"]["checkpoint_id"])
    assert at["values"] == drafted["values"] and at["next"] == ["review"], at
    updated = await client.threads.update_state(tid, {"draft": "DRAFT two"},
                                                checkpoint_id=drafted["checkpoint"]["checkpoint_id"])
    assert updated["checkpoint"]["checkpoint_id"] == drafted["checkpoint"]["checkpoint_id"], updated
    again = await client.runs.wait(tid, "reviewed:graph")
    assert again["__interrupt__"][0]["value"] == {"draft": "DRAFT two"}, again
    done = await client.runs.wait(tid, "reviewed:graph", command={"resume": "ok"})
    assert done["report"] == "DRAFT two / reviewer: ok", done
    assert [h["values"].get("report") for h in await client.threads.get_history(tid, limit=50)][0] == done["report"]
    # Command(update=..., goto=...): the graph invoked again from the thread's head with it.
    moved = await client.runs.wait(tid, "reviewed:graph", command={"update": {"draft": "DRAFT three"},
                                                                    "goto": "publish"})
    assert moved["report"] == "DRAFT three / reviewer: ok", moved
    cli = stack.root / f"cli-{uuid.uuid4().hex[:6]}"
    cli.mkdir()
    tree = await rewind_json(cli, stack.env(cli), "tree", tid)
    assert "thread-fork-1" in tree["branches"], tree["branches"].keys()
    old = await rewind_json(cli, stack.env(cli), "status", tid)  # main keeps its own report
    assert "DRAFT one / reviewer: fine" in old["status"]["final_answer"], old


async def test_a_client_streaming_a_run_loses_nothing_when_rewind_serve_is_killed_and_restarted(stack) -> None:
    port = free_port()
    first = UserServer(stack.root / "restart-1", stack.env(stack.root / "restart-1"), "--port", str(port))
    second = None
    try:
        url = await first.url()
        client = get_client(url=url + "/langgraph")
        tid = (await client.threads.create())["thread_id"]
        parts = []
        async for part in client.runs.stream(tid, "slowchat:graph", input={"messages": [USER]},
                                             stream_mode=["updates", "messages-tuple", "values"]):
            parts.append(part)
            if part.event == "messages" and second is None:
                first.kill()  # kill -9 mid-stream; the same address answers again a moment later
                second = UserServer(stack.root / "restart-2", stack.env(stack.root / "restart-2"), "--port", str(port))
        assert second is not None, [p.event for p in parts]
        updates = [p.data for p in parts if p.event == "updates"]
        assert [list(u) for u in updates] == [["gate"], ["chat"]], updates  # each once, none lost
        answer = " ".join(f"word{i}" for i in range(60))
        assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == answer
        state = await client.threads.get_state(tid)
        assert state["values"]["messages"][-1]["content"] == answer
    finally:
        first.stop()
        if second is not None:
            await second.stop_async()


async def test_remote_graph_and_stateless_runs_on_rewind_serve(stack) -> None:
    from langgraph.pregel.remote import RemoteGraph

    graph = RemoteGraph("remotechat:graph", url=stack.url + "/langgraph")
    config = {"configurable": {"thread_id": str(uuid.uuid4())}}
    values = await graph.ainvoke({"messages": [USER]}, config)
    assert [m["content"] for m in values["messages"]] == ["hi", "Remote one."], values
    chunks = [c async for c in graph.astream({"messages": [{"role": "user", "content": "again"}]}, config,
                                             stream_mode="updates")]
    assert [list(c) for c in chunks] == [["gate"], ["chat"]], chunks
    assert chunks[-1]["chat"]["messages"][-1]["content"] == "Remote two.", chunks
    state = await graph.aget_state(config)
    assert [m.content if hasattr(m, "content") else m["content"] for m in state.values["messages"]] == [
        "hi", "Remote one.", "again", "Remote two."], state.values
    # Without a thread: a stateless run, on a thread of its own the API forgets at its end (a run of its
    # own: the scripted model answers it from its script's start).
    alone = await graph.ainvoke({"messages": [{"role": "user", "content": "alone"}]})
    assert [m["content"] for m in alone["messages"]] == ["alone", "Remote one."], alone
    waited = await stack.client().runs.wait(None, "remotechat:graph",
                                            input={"messages": [{"role": "user", "content": "waited"}]})
    assert [m["content"] for m in waited["messages"]] == ["waited", "Remote one."], waited
    parts = [p async for p in stack.client().runs.stream(None, "remotechat:graph", input={"messages": [
        {"role": "user", "content": "streamed"}]}, stream_mode=["messages", "debug"])]
    events = {p.event for p in parts}
    assert {"messages/complete", "debug"} <= events, events
    [complete] = [p.data for p in parts if p.event == "messages/complete"]
    assert complete[-1]["content"] == "Remote one.", complete
    assert {p.data["type"] for p in parts if p.event == "debug"} >= {"checkpoint", "task_result"}

    # A thread deleted: the API forgets it (its Rewind run stays).
    client = stack.client()
    await client.threads.delete(config["configurable"]["thread_id"])
    with pytest.raises(NotFoundError):
        await client.threads.get(config["configurable"]["thread_id"])


JS_CLIENT = """
const { Client } = require(process.env.LANGGRAPH_SDK_JS);

async function main() {
  const client = new Client({ apiUrl: process.env.API_URL });
  const thread = await client.threads.create();
  const seen = [];
  for await (const part of client.runs.stream(thread.thread_id, "reviewed:graph",
      { input: { topic: "js" }, streamMode: ["updates", "values"] })) {
    seen.push({ event: part.event, data: part.data });
  }
  for await (const part of client.runs.stream(thread.thread_id, "reviewed:graph",
      { command: { resume: "from js" }, streamMode: "updates" })) {
    seen.push({ event: part.event, data: part.data });
  }
  const state = await client.threads.getState(thread.thread_id);
  console.log(JSON.stringify({ seen, values: state.values }));
}

main().catch((err) => { console.error(err); process.exit(1); });
"""


def js_sdk() -> Path | None:
    """The npm @langchain/langgraph-sdk .ci/run installs into .js-clients/ (REWIND_JS_CLIENTS_DIR elsewhere)."""
    import os

    root = Path(os.environ.get("REWIND_JS_CLIENTS_DIR", Path(__file__).resolve().parents[2] / ".js-clients"))
    found = root / "node_modules" / "@langchain" / "langgraph-sdk" / "dist" / "index.cjs"
    return found if found.exists() else None


async def test_the_javascript_client_streams_a_run_and_resumes_its_interrupt(stack) -> None:
    import asyncio
    import json
    import os
    import shutil

    sdk, node = js_sdk(), shutil.which("node")
    if sdk is None or node is None:
        if os.environ.get("REWIND_TEST_REQUIRE_JS"):
            raise AssertionError("node or the npm @langchain/langgraph-sdk is missing (.ci/run installs them)")
        pytest.skip("node and the npm @langchain/langgraph-sdk (.ci/run installs them into .js-clients/)")
    folder = stack.root / f"js-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "client.cjs").write_text(JS_CLIENT)
    env = {"PATH": os.environ["PATH"], "HOME": str(folder), "API_URL": stack.url + "/langgraph",
           "LANGGRAPH_SDK_JS": str(sdk)}
    process = await asyncio.create_subprocess_exec(node, "client.cjs", cwd=folder, env=env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    result = json.loads(out)
    events = [p["event"] for p in result["seen"]]
    assert events[0] == "metadata" and "updates" in events and "values" in events, events
    interrupts = [p["data"]["__interrupt__"] for p in result["seen"] if p["event"] == "updates"
                  and "__interrupt__" in p["data"]]
    assert interrupts and interrupts[0][0]["value"] == {"draft": "DRAFT one"}, result["seen"]
    assert {"publish": {"report": "DRAFT one / reviewer: from js"}} in [p["data"] for p in result["seen"]]
    assert result["values"]["report"] == "DRAFT one / reviewer: from js", result["values"]


async def test_a_client_streaming_a_run_gets_its_answer_when_the_worker_is_killed_mid_call(stack) -> None:
    # A worker and a server of its own (its own task queue): this one is killed.
    queue = f"lg-kill-{uuid.uuid4().hex[:6]}"
    work = stack.root / f"kill-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    name = f"kill-{uuid.uuid4().hex[:6]}"
    text = " ".join(f"token{i}" for i in range(40))
    stack.model.add_script(name, {"chat": [{"content": text, "stream": {"tokens_per_s": 10}}] * 2})
    (work / "killchat.py").write_text(CHAT.format(model=f"script:{name}", gate=str(stack.root / "open")))
    env = {**stack.env(work / "w1", REWIND_TASK_QUEUE=queue), "PYTHONPATH": str(work),
           "REWIND_HOME": str(work / "w1" / ".rewind")}  # where the workers announce their live events
    async with user_workers() as start:
        first = start(work / "w1", env, "--tool-modules", "killchat")
        await first.wait_ready()
        server = UserServer(work / "serve", {**env, "HOME": str(work / "serve")})
        try:
            client = get_client(url=await server.url() + "/langgraph")
            tid = (await client.threads.create())["thread_id"]
            parts, second = [], None
            async for part in client.runs.stream(tid, "killchat:graph", input={"messages": [USER]},
                                                 stream_mode=["updates", "messages-tuple", "values"]):
                parts.append(part)
                if part.event == "messages" and second is None:
                    first.kill()  # the machine dies inside the model call; another worker takes the run
                    second = start(work / "w2", env, "--tool-modules", "killchat")
            assert second is not None
            updates = [p.data for p in parts if p.event == "updates"]
            assert [list(u) for u in updates] == [["gate"], ["chat"]], updates
            assert updates[-1]["chat"]["messages"][-1]["content"] == text
            assert [p.data for p in parts if p.event == "values"][-1]["messages"][-1]["content"] == text
            attempts = {p.data[1].get("rewind_attempt") for p in parts if p.event == "messages"}
            assert attempts == {1, 2}, attempts  # the call in flight streamed again from its new attempt's start
        finally:
            await server.stop_async()


async def test_the_prebuilt_react_agent_orders_once_across_the_threads_runs(stack) -> None:
    client = stack.client()
    tid = (await client.threads.create())["thread_id"]
    parts = [p async for p in client.runs.stream(tid, "shopagent:agent", input={"messages": [
        {"role": "user", "content": "Buy tea"}]}, stream_mode=["updates", "messages-tuple"])]
    assert [list(p.data) for p in parts if p.event == "updates"] == [["agent"], ["tools"], ["agent"]], parts
    tool_messages = [p.data[0] for p in parts if p.event == "messages" and p.data[0]["type"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["ordered tea"], tool_messages
    values = await client.runs.wait(tid, "shopagent:agent", input={"messages": [{"role": "user", "content": "thanks"}]})
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "tool", "ai", "human", "ai"], values
    assert values["messages"][-1]["content"] == "You are welcome."
    assert (stack.root / "orders.txt").read_text().splitlines() == ["order tea"]  # once, though the graph ran again


async def test_an_enqueued_run_starts_when_the_one_before_ends_and_its_webhook_is_called(stack) -> None:
    import asyncio
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    received: list[dict[str, Any]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            received.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    hooks = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    try:
        client = stack.client()
        tid = (await client.threads.create())["thread_id"]
        first = await client.runs.create(tid, "queuechat:graph", input={"messages": [USER]})
        second = await client.runs.create(tid, "queuechat:graph", input={"messages": [{"role": "user", "content": "b"}]},
                                          multitask_strategy="enqueue",
                                          webhook=f"http://127.0.0.1:{hooks.server_port}/done")
        assert second["status"] == "pending", second
        values = await client.runs.join(tid, second["run_id"])
        assert [m["content"] for m in values["messages"]] == ["hi", "First and slow " * 10, "b", "Queued."], values
        assert (await client.runs.get(tid, first["run_id"]))["status"] == "success"
        for _ in range(200):
            if received:
                break
            await asyncio.sleep(0.1)
        assert [(r["run_id"], r["status"]) for r in received] == [(second["run_id"], "success")], received

        # multitask_strategy rollback: the run in progress is undone (the thread rolled back to where it began),
        # the new input runs from there.
        third, values = await double_text(client, tid, "queuechat:graph", "c", "d", "rollback")
        assert [m["content"] for m in values["messages"]] == [
            "hi", "First and slow " * 10, "b", "Queued.", "d", "Third and slow " * 10], values
        assert (await client.runs.get(tid, third["run_id"]))["status"] == "interrupted"
    finally:
        hooks.shutdown()


async def test_every_bad_request_is_one_line_and_changes_nothing(stack) -> None:
    client = stack.client()
    tid = (await client.threads.create())["thread_id"]
    faults = [
        (lambda: client.runs.create(tid, "no-colon", input={}), 400, "MODULE:ATTR"),
        (lambda: client.runs.create(tid, "reviewed:graph", input={}, stream_mode="events"), 400, "not supported"),
        (lambda: client.runs.create(tid, "reviewed:graph", input={}, multitask_strategy="bogus"), 400, "choose"),
        (lambda: client.runs.create(tid, "reviewed:graph", input={}, webhook="ftp://x"), 400, "http"),
        (lambda: client.runs.create(tid, "reviewed:graph", command={"resume": 1}), 400, "has not run yet"),
        (lambda: client.threads.get_state(str(uuid.uuid4())), 404, "no thread"),
        (lambda: client.threads.update_state(tid, {"draft": "x"}), 400, "has not run yet"),
    ]
    for call, status, needle in faults:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await call()
        answer = refused.value.response
        assert answer.status_code == status and needle in answer.json()["error"], answer.text
        assert "\n" not in answer.json()["error"]
    assert await client.runs.list(tid) == [] and (await client.threads.get(tid))["status"] == "idle"
    values = await client.runs.wait(tid, "reviewed:graph", input={"topic": "faults"})
    assert "__interrupt__" in values
    for call, needle in [
        (lambda: client.runs.create(tid, "chatgraph:graph", input={}), "one graph's run"),
        (lambda: client.threads.update_state(tid, {}, checkpoint_id=f"{uuid.uuid4()}:main:1"), "not one of thread"),
    ]:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await call()
        assert refused.value.response.status_code == 400 and needle in refused.value.response.json()["error"]
    assert len(await client.runs.list(tid)) == 1


AUTH = '''
from rewind.serve.agent.identity import Refused

USERS = {"token-ann": "ann", "token-bob": "bob"}


def authenticate(request):
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    if token not in USERS:
        raise Refused("unknown token")
    return USERS[token]
'''


async def test_with_an_auth_hook_each_identity_sees_only_its_own_threads(stack) -> None:
    folder = stack.root / "serve"
    key = "k-" + uuid.uuid4().hex  # REWIND_API_KEY too: langgraph-sdk's api_key= sends it as x-api-key
    server = UserServer(stack.root / f"authed-{uuid.uuid4().hex[:6]}",
                        stack.env(folder, REWIND_SERVE_AUTH="twoauth:authenticate", PYTHONPATH=str(folder),
                                  REWIND_API_KEY=key))
    try:
        url = await server.url()
        ann = get_client(url=url + "/langgraph", api_key=key, headers={"Authorization": "Bearer token-ann"})
        bob = get_client(url=url + "/langgraph", api_key=key, headers={"Authorization": "Bearer token-bob"})
        nobody = get_client(url=url + "/langgraph", api_key=key, headers={"Authorization": "Bearer wrong"})
        keyless = get_client(url=url + "/langgraph", api_key="", headers={"Authorization": "Bearer token-ann"})
        tid = (await ann.threads.create(metadata={"who": "ann"}))["thread_id"]
        values = await ann.runs.wait(tid, "reviewed:graph", input={"topic": "secrets"})
        assert "__interrupt__" in values, values
        assert [t["thread_id"] for t in await ann.threads.search()] == [tid]
        assert await bob.threads.search() == []
        for read in (lambda c: c.threads.get(tid), lambda c: c.threads.get_state(tid),
                     lambda c: c.runs.list(tid),
                     lambda c: c.runs.wait(tid, "reviewed:graph", command={"resume": "stolen"})):
            with pytest.raises(httpx.HTTPStatusError) as refused:  # runs.wait raises httpx's own
                await read(bob)
            assert refused.value.response.status_code == 404
        from langgraph_sdk.errors import AuthenticationError

        with pytest.raises(AuthenticationError):
            await nobody.threads.search()
        with pytest.raises(AuthenticationError):  # the key is asked before the hook
            await keyless.threads.search()
        async with httpx.AsyncClient(base_url=url) as raw:  # Rewind's own routes know no owner: refused
            for path in ("/runs", f"/runs/{tid}", f"/runs/{tid}/events"):
                answer = await raw.get(path, headers={"Authorization": "Bearer token-ann", "x-api-key": key})
                assert answer.status_code == 403 and "REWIND_SERVE_AUTH" in answer.json()["error"], answer.text
        done = await ann.runs.wait(tid, "reviewed:graph", command={"resume": "mine"})
        assert done["report"].endswith("reviewer: mine"), done
    finally:
        await server.stop_async()
