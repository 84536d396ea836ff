"""LangGraph threads into Rewind and back, the way a user moves them: a real
LangGraph agent (tool node, scripted model through the openai client)
checkpointed with SqliteSaver and with RewindSaver, `rewind import langgraph`
and `rewind export --format langgraph` as subprocesses, and a fork of the
imported run on Temporal that does not re-run the imported tool calls."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from as_user import one_line_error, rewind, rewind_json, user_workers

pytest.importorskip("langgraph.checkpoint.sqlite", reason="the langgraph extra is not installed")

from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

TOOLS = '''
import json, os

from activities.tools.registry import tool


@tool
async def lookup(key: str, size: int = 64) -> str:
    """The same tool the LangGraph agent has."""
    with open(os.environ["TOOL_LOG"], "a") as f:
        f.write(json.dumps({"key": key}) + "\\n")
    return f"{key}: from rewind"
'''


def _agent_module():
    path = Path(__file__).resolve().parent.parent / "checkpoint_bridge" / "langgraph" / "langgraph_agent.py"
    spec = importlib.util.spec_from_file_location("langgraph_agent_for_interop", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # LangGraph reads the state's type hints through the module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _lookup(key: str) -> dict:
    return {"tool_calls": [{"name": "lookup", "arguments": {"key": key}}]}


def _logged(path: Path) -> list[str]:
    return [json.loads(line)["key"] for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_sqlite_thread_imported_forked_on_temporal_and_exported_back(world, tmp_path) -> None:
    agent = _agent_module()
    name, cont, after = (f"{p}-{world.queue}" for p in ("lg", "lgcont", "lgafter"))
    world.model.add_script(name, [_lookup("a"), {"content": "found a"}])
    graph_log = tmp_path / "graph-tools.jsonl"
    db = tmp_path / "threads.db"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        graph = agent.build_graph(world.model.base_url, f"script:{name}", tool_log=graph_log).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t1"}}
        graph.invoke({"messages": [HumanMessage("look a up")]}, config)
        # Time travel: from the checkpoint after the input, another question (a second line).
        history = list(graph.get_state_history(config))
        first = next(s for s in reversed(history) if len(s.values.get("messages", [])) == 1)
        forked = graph.update_state(first.config, {"messages": [HumanMessage("and quickly")]})
        graph.invoke(None, forked)
        lg_checkpoints = len(list(saver.list({"configurable": {"thread_id": "t1"}})))
    assert _logged(graph_log) == ["a", "a"]

    cli = world.folder("cli")
    env = world.env(cli)
    imported = await rewind_json(cli, env, "import", "langgraph", "--thread", "t1", "--sqlite", str(db),
                                 "--run-id", "lg-" + world.queue)
    run_id = imported["run_id"]
    assert imported["checkpoints"] + imported["skipped_without_messages"] == lg_checkpoints
    tree = await rewind_json(cli, env, "tree", run_id)
    # The newest line is main, the one time travel left behind is a branch lg-<checkpoint id>.
    assert sorted(tree["branches"])[1:] == ["main"] and sorted(tree["branches"])[0].startswith("lg-")
    main = tree["branches"]["main"]
    last = await rewind_json(cli, env, "show", main[-1]["checkpoint_id"])
    assert last["step_label"] == "final answer" and last["messages"][-1]["content"] == "found a"
    (record,) = last["tool_call_cache"]
    assert (record["tool_name"], record["tool_input"]["key"]) == ("lookup", "a")
    assert record["tool_output"].startswith("a: lorem ipsum")  # paired with its result
    other = next(b for b in tree["branches"] if b != "main")
    assert tree["branches"][other][0]["fork_of"] is not None
    code, _, _ = await rewind(cli, env, "diff", run_id, "main", other)
    assert code == 0

    # A fork of the imported run continues it on Temporal, with Rewind's own tool.
    world.model.add_script(cont, [_lookup("x"), {"content": "x"}, _lookup("c"), {"content": "found c too"}])
    wdir = world.folder("w")
    (wdir / "tools.py").write_text(TOOLS)
    tool_log = tmp_path / "rewind-tools.jsonl"
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, TOOL_LOG=str(tool_log)), "--tool-modules", "tools")
        await worker.wait_ready()
        step = main[-1]["step_index"]
        done = await rewind_json(cli, env, "fork", run_id, "--step", str(step), "--branch", "cont",
                                 "--model", f"script:{cont}", "--tools", "lookup", "--wait")
    assert done["status"]["state"] == "completed", done
    assert _logged(tool_log) == ["c"]  # the imported lookup of "a" did not run again
    final = await rewind_json(cli, env, "show", f"{run_id}:cont:{done['status']['step']}")
    assert final["messages"][-1]["content"] == "found c too"

    # And back: the fork's last checkpoint as a LangGraph thread, which a graph goes on from.
    out_db = tmp_path / "exported.db"
    written = await rewind_json(cli, env, "export", final["checkpoint_id"], "--format", "langgraph",
                                "--sqlite", str(out_db), "--thread", "t2")
    assert written["thread_id"] == "t2"
    world.model.add_script(after, [{"content": "-"}] * 4 + [{"content": "and that is all"}])
    with SqliteSaver.from_conn_string(str(out_db)) as saver:
        graph = agent.build_graph(world.model.base_url, f"script:{after}").compile(checkpointer=saver)
        result = graph.invoke({"messages": [HumanMessage("anything else?")]}, {"configurable": {"thread_id": "t2"}})
    assert result["messages"][-1].content == "and that is all"
    seen = [r for r in world.model.requests() if r["model"] == f"script:{after}"][-1]["messages"]
    assert [m.get("content") for m in seen][-3:] == ["c: from rewind", "found c too", "anything else?"]

    code, _, err = await rewind(cli, env, "import", "langgraph", "--thread", "nope", "--sqlite", str(db),
                                "--run-id", "other-" + world.queue)
    one_line_error(code, err, "no LangGraph thread 'nope'", prefix="rewind: ")
    code, _, err = await rewind(cli, env, "import", "langgraph", "--thread", "t1", "--sqlite", str(db),
                                "--run-id", run_id)
    one_line_error(code, err, "already has a run", prefix="rewind: ")
    code, _, err = await rewind(cli, env, "import", "langgraph", "--thread", "t1", "--run-id", "x-" + world.queue)
    one_line_error(code, err, "--sqlite PATH or --store URL", prefix="rewind: ")


async def test_a_rewind_saver_thread_is_imported_from_its_store(world, tmp_path) -> None:
    from checkpoint_bridge.langgraph.saver import RewindSaver

    agent = _agent_module()
    name = f"lgstore-{world.queue}"
    world.model.add_script(name, [_lookup("k"), {"content": "found k"}])
    url = f"file://{tmp_path / 'lg-store'}"
    with RewindSaver.from_url(url) as saver:
        graph = agent.build_graph(world.model.base_url, f"script:{name}").compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("look k up")]}, {"configurable": {"thread_id": "s1"}})
    cli = world.folder("cli")
    env = world.env(cli)
    imported = await rewind_json(cli, env, "import", "langgraph", "--thread", "s1", "--store", url,
                                 "--run-id", "lgs-" + world.queue)
    tree = await rewind_json(cli, env, "tree", imported["run_id"])
    assert list(tree["branches"]) == ["main"]
    last = await rewind_json(cli, env, "show", tree["branches"]["main"][-1]["checkpoint_id"])
    assert last["messages"][-1]["content"] == "found k" and last["tool_call_cache"][0]["tool_input"]["key"] == "k"
