"""A real LangGraph agent on RewindSaver: killed between nodes and resumed by a new
process, and time travel (history, update_state, invoking a past checkpoint)
giving what LangGraph's SqliteSaver gives for the same script.

The agent (langgraph_agent.py) is a StateGraph with a model node (the scripted
model through the openai client) and a tool node run once per tool call;
both the local-folder and the S3 (moto server) store are used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph_agent import build_graph, first_input, summary
from store_backends import make_bucket

from checkpoint_bridge.langgraph.saver import AsyncRewindSaver, RewindSaver
from checkpoint_bridge.stores import FileObjectStore, ObjectStore, S3ObjectStore
from rewind.worker.scripted_model import ScriptedModelServer

REPO = Path(__file__).resolve().parents[3]
AGENT = Path(__file__).with_name("langgraph_agent.py")
TURNS = [
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a", "size": 2048}},
                    {"name": "lookup", "arguments": {"key": "b", "size": 2048}}]},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "c", "size": 2048}}]},
    {"content": "a, b and c looked up"},
]


@pytest.fixture(params=["file", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Where the saver keeps the thread: a URL (for a subprocess) and a way to open it here."""
    if request.param == "file":
        root = tmp_path / "store"
        yield {"url": f"file://{root}", "endpoint": None, "open": lambda: FileObjectStore(root)}
    else:
        endpoint = request.getfixturevalue("moto_endpoint")
        _s3, bucket = make_bucket(endpoint)
        prefix = f"lg-{uuid.uuid4().hex[:8]}"
        yield {"url": f"s3://{bucket}/{prefix}", "endpoint": endpoint,
               "open": lambda: S3ObjectStore(bucket, prefix, endpoint_url=endpoint)}


def _agent(location: dict[str, Any], model: ScriptedModelServer, script: str, thread: str, log: Path,
           *extra: str) -> list[str]:
    args = [sys.executable, str(AGENT), "--store", location["url"], "--thread", thread, "--base-url", model.base_url,
            "--model", f"script:{script}", "--tool-log", str(log), *extra]
    if location["endpoint"]:
        args += ["--endpoint", location["endpoint"]]
    return args


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(AGENT.parent)])}


def _turns_asked(model: ScriptedModelServer, script: str) -> list[int]:
    return [sum(1 for m in r["messages"] if m.get("role") == "assistant")
            for r in model.requests() if r["model"] == f"script:{script}" and r["status"] == 200]


def _reference(model: ScriptedModelServer, script: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The same script, uninterrupted, on SqliteSaver."""
    graph = build_graph(model.base_url, f"script:{script}")
    with SqliteSaver.from_conn_string(str(tmp_path / f"ref-{uuid.uuid4().hex[:6]}.sqlite")) as saver:
        final = graph.compile(checkpointer=saver).invoke(first_input(), {"configurable": {"thread_id": "ref"}})
    return summary(final["messages"])


def test_an_agent_killed_between_nodes_resumes_from_the_saver_in_a_new_process(
    location: dict[str, Any], model: ScriptedModelServer, tmp_path: Path,
) -> None:
    script, thread = f"crash-{uuid.uuid4().hex[:6]}", "crash-thread"
    model.add_script(script, TURNS)
    log, marker = tmp_path / "tools.jsonl", tmp_path / "hung"
    first = subprocess.Popen(_agent(location, model, script, thread, log, "--hang-on", "b", "--marker", str(marker)),
                             env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    config = {"configurable": {"thread_id": thread}}
    with RewindSaver(location["open"]()) as saver:
        try:
            # The turn's two tool calls run as two tasks: `a` finishes (its writes are saved),
            # `b` hangs. Kill the process once the store shows exactly that.
            deadline = time.monotonic() + 120
            while True:
                assert first.poll() is None, first.communicate()[1].decode()[-3000:]
                assert time.monotonic() < deadline, "the agent never reached the hanging tool call"
                hung = marker.exists()  # before reading the store: `a` may finish while `b` hangs
                state = saver.get_tuple(config)
                answered = [m.tool_call_id for w in (state.pending_writes if state else []) if w[1] == "messages"
                            for m in w[2] if getattr(m, "tool_call_id", None)]
                if hung and answered == ["call_0_0"]:
                    break
                time.sleep(0.05)
            first.send_signal(signal.SIGKILL)
            first.communicate()
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == -signal.SIGKILL
        at_kill = saver.get_tuple(config)
        assert at_kill is not None
        assert [m.type for m in at_kill.checkpoint["channel_values"]["messages"]] == ["human", "ai"]
        assert [w[2][0].tool_call_id for w in at_kill.pending_writes if w[1] == "messages"] == ["call_0_0"]

        second = subprocess.run(_agent(location, model, script, thread, log, "--resume"), env=_env(), cwd=tmp_path,
                                capture_output=True, timeout=300)
        assert second.returncode == 0, second.stderr.decode()[-3000:]
        resumed = json.loads(second.stdout.decode().strip().splitlines()[-1])
        history = list(saver.list(config))

    runs = [json.loads(line) for line in log.read_text().splitlines()]
    by_key = {k: [r["pid"] for r in runs if r["key"] == k] for k in "abc"}
    # `a` finished before the kill and is not run again; `b` died with the process and runs again.
    assert by_key["a"] == [first.pid], runs
    assert len(by_key["b"]) == 2 and by_key["b"][0] == first.pid and by_key["b"][1] != first.pid, runs
    assert len(by_key["c"]) == 1 and by_key["c"][0] == by_key["b"][1], runs
    # No model turn was asked twice: the resumed process started from the saved state.
    assert _turns_asked(model, script) == [0, 1, 2]
    assert resumed == _reference(model, script, tmp_path)
    assert [m["type"] for m in resumed] == ["human", "ai", "tool", "tool", "ai", "tool", "ai"]
    assert len(history) == 7 and history[0].checkpoint["channel_values"]["messages"][-1].content == "a, b and c looked up"


# ---------------------------------------------------------------------- time travel


def _snapshots(history: list[Any]) -> list[dict[str, Any]]:
    """A state history as two checkpointers must agree on it (ids replaced by positions)."""
    position = {h.config["configurable"]["checkpoint_id"]: i for i, h in enumerate(history)}
    out = []
    for h in history:
        parent = h.parent_config["configurable"]["checkpoint_id"] if h.parent_config else None
        out.append({
            "messages": summary(h.values.get("messages", [])), "next": list(h.next),
            "source": h.metadata.get("source"), "step": h.metadata.get("step"),
            "parent": position.get(parent, "outside") if parent else None,
            "tasks": sorted(t.name for t in h.tasks),
        })
    return out


def _past(history: list[Any]) -> Any:
    """The checkpoint before the model's second turn (the first tool results are in)."""
    return next(h for h in history if list(h.next) == ["model"] and len(h.values["messages"]) == 4)


NOTE = {"messages": [HumanMessage(content="also note d", id="human-1")]}


def _travel(graph: Any, thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    out: dict[str, Any] = {"run": summary(graph.invoke(first_input(), config)["messages"])}
    history = list(graph.get_state_history(config))
    out["history"] = _snapshots(history)
    past = _past(history)
    forked = graph.update_state(past.config, NOTE, as_node="tool")
    out["update"] = _snapshots([graph.get_state(forked)])
    out["fork"] = summary(graph.invoke(None, forked)["messages"])
    out["replay"] = summary(graph.invoke(None, past.config)["messages"])
    out["history_after"] = _snapshots(list(graph.get_state_history(config)))
    out["latest"] = _snapshots([graph.get_state(config)])
    return out


async def _atravel(graph: Any, thread: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    out: dict[str, Any] = {"run": summary((await graph.ainvoke(first_input(), config))["messages"])}
    history = [h async for h in graph.aget_state_history(config)]
    out["history"] = _snapshots(history)
    past = _past(history)
    forked = await graph.aupdate_state(past.config, NOTE, as_node="tool")
    out["update"] = _snapshots([await graph.aget_state(forked)])
    out["fork"] = summary((await graph.ainvoke(None, forked))["messages"])
    out["replay"] = summary((await graph.ainvoke(None, past.config))["messages"])
    out["history_after"] = _snapshots([h async for h in graph.aget_state_history(config)])
    out["latest"] = _snapshots([await graph.aget_state(config)])
    return out


def _check_travel(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for part in theirs:
        assert ours[part] == theirs[part], f"{part} differs from SqliteSaver's"
    # The comparison is not empty: the fork and the replay each added a branch.
    assert len(theirs["history"]) == 7 and len(theirs["history_after"]) > len(theirs["history"]) + 4
    assert theirs["update"][0]["source"] == "update" and theirs["fork"][4]["id"] == "human-1"
    assert theirs["replay"] == theirs["run"]


def test_time_travel_gives_what_sqlitesaver_gives(location: dict[str, Any], model: ScriptedModelServer,
                                                   tmp_path: Path) -> None:
    script = f"travel-{uuid.uuid4().hex[:6]}"
    model.add_script(script, TURNS)
    builder = build_graph(model.base_url, f"script:{script}")
    with SqliteSaver.from_conn_string(str(tmp_path / "travel.sqlite")) as sqlite:
        theirs = _travel(builder.compile(checkpointer=sqlite), "t")
    with RewindSaver(location["open"]()) as saver:
        ours = _travel(builder.compile(checkpointer=saver), "t")
    _check_travel(ours, theirs)
    # A second saver on the same store (another process's view, cold caches) sees the same history.
    with RewindSaver(location["open"]()) as again:
        assert _snapshots(list(builder.compile(checkpointer=again).get_state_history({"configurable": {"thread_id": "t"}}))) \
            == theirs["history_after"]


async def test_time_travel_with_the_async_saver_gives_what_sqlitesaver_gives(
    location: dict[str, Any], model: ScriptedModelServer, tmp_path: Path,
) -> None:
    script = f"atravel-{uuid.uuid4().hex[:6]}"
    model.add_script(script, TURNS)
    builder = build_graph(model.base_url, f"script:{script}")
    with SqliteSaver.from_conn_string(str(tmp_path / "travel.sqlite")) as sqlite:
        theirs = _travel(builder.compile(checkpointer=sqlite), "t")
    objects: ObjectStore = location["open"]()
    async with AsyncRewindSaver(objects) as saver:
        ours = await _atravel(builder.compile(checkpointer=saver), "t")
    _check_travel(ours, theirs)
