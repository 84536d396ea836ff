"""LangGraph graphs as durable Rewind runs, as a user meets them: the article's research
graph (planner -> retriever -> synthesizer -> validator, back to the retriever when
validation fails -> formatter) unchanged but for its imports, in a tools module of
`rewind worker`, started with `rewind start --graph MODULE:ATTR`. Its model calls go
through ChatOpenAI to the scripted model (answering by node), its tools are LangChain
tools that count their executions in files; the worker is killed inside the retriever."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from as_user import UserWorker, empty_dir, one_line_error, rewind, rewind_json, until, user_env
from rewind.temporal.dev_server import free_port

RESEARCH_GRAPH = '''
"""The article's research graph."""
import operator
from pathlib import Path
from typing import Annotated, TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, StateGraph

LOG = Path({log!r})
RELEASE = Path({release!r})
SLOW = {slow!r}

llm = ChatOpenAI(model="gpt-4o-mini")


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
async def search_web(query: str) -> str:
    """Search the web."""
    import asyncio
    count(f"start {{query}}")
    while query in SLOW and not RELEASE.exists():
        await asyncio.sleep(0.05)
    count(f"done {{query}}")
    return f"results for {{query}}"


@tool
async def save_report(text: str) -> str:
    """Save the report where the team reads it."""
    count("save")
    return "saved"


rewind_tool_options = {{"save_report": {{"side_effects": True}}}}


class ResearchAgentState(TypedDict):
    messages: Annotated[list, operator.add]
    research_notes: str
    sources_consulted: list[str]
    draft_report: str
    validation_passed: bool


async def planner_node(state):
    plan = await llm.ainvoke([SystemMessage("You plan research."), *state["messages"]])
    return {{"messages": [plan]}}


async def retriever_node(state):
    queries = [q.strip() for q in state["messages"][-1].content.split(",")]
    notes = [await search_web.ainvoke({{"query": q}}) for q in queries]
    return {{"research_notes": "\\n".join(notes), "sources_consulted": state.get("sources_consulted", []) + queries}}


async def synthesizer_node(state):
    draft = await llm.ainvoke([SystemMessage("You write reports."), HumanMessage(state["research_notes"])])
    return {{"draft_report": draft.content}}


async def validator_node(state):
    verdict = await llm.ainvoke([HumanMessage("Is this report supported? " + state["draft_report"])])
    return {{"validation_passed": verdict.content.strip().upper().startswith("PASS")}}


async def formatter_node(state):
    await save_report.ainvoke({{"text": state["draft_report"]}})
    return {{"messages": [{{"role": "assistant", "content": "REPORT: " + state["draft_report"]}}]}}


def build_research_agent_graph():
    graph = StateGraph(ResearchAgentState)
    graph.add_node("planner", planner_node)
    graph.add_node("retriever", retriever_node)
    graph.add_node("synthesizer", synthesizer_node)
    graph.add_node("validator", validator_node)
    graph.add_node("formatter", formatter_node)
    graph.set_entry_point("planner")
    graph.add_edge("planner", "retriever")
    graph.add_edge("retriever", "synthesizer")
    graph.add_edge("synthesizer", "validator")
    graph.add_conditional_edges(
        "validator",
        lambda state: "formatter" if state["validation_passed"] else "retriever",
        {{"formatter": "formatter", "retriever": "retriever"}},
    )
    graph.add_edge("formatter", END)
    return graph.compile()


agent = build_research_agent_graph()
'''

SCRIPT = {
    "planner": [{"content": "acme, globex, initech"}],
    "synthesizer": [{"content": "DRAFT: three rivals grow"}],
    "validator": [{"content": "PASS"}],
}
TASK = {"messages": [{"role": "user", "content": "Research our top competitors"}]}


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_graph(folder: Path, tmp_path: Path, *, slow: tuple[str, ...] = ()) -> tuple[Path, Path]:
    log, release = tmp_path / f"calls-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    (folder / "research_graph.py").write_text(RESEARCH_GRAPH.format(log=str(log), release=str(release),
                                                                    slow=list(slow)))
    return log, release


def script(model, by_label: dict) -> str:
    name = f"g-{uuid.uuid4().hex[:8]}"
    model.add_script(name, by_label)
    return f"script:{name}"


def labels_asked(model, name: str) -> list[str]:
    return [r.get("label") for r in model.requests() if r.get("model") == name and r.get("status") == 200]


async def finished(cli: Path, env: dict, run_id: str) -> dict:
    async def check():
        view = await rewind_json(cli, env, "status", run_id)
        return view if view["state"] in ("completed", "failed") and view["workflow_status"] != "running" else None
    return await until(f"run {run_id} ends", check, timeout_s=120)


async def tree_labels(cli: Path, env: dict, run_id: str, branch: str = "main") -> list[str]:
    tree = await rewind_json(cli, env, "tree", run_id)
    return [r["step_label"] for r in tree["branches"][branch]]


async def test_a_killed_worker_inside_a_node_costs_no_completed_node_or_tool_call(world, tmp_path):
    folder = world.folder("graph")
    log, release = write_graph(folder, tmp_path, slow=("initech",))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, SCRIPT)
    cli = world.folder("cli")
    cli_env = world.env(cli)
    first = UserWorker(folder / "w1", env, "--tool-modules", "research_graph")
    try:
        await first.wait_ready()
        started = await rewind_json(cli, cli_env, "start", "--graph", "research_graph:agent", "--input",
                                    json.dumps(TASK), "--model", model, "--run-id", "graph-crash")
        assert started["run_id"] == "graph-crash", started
        # Two searches of the retriever done, the third running: the machine dies.
        await _explained(cli, cli_env, "graph-crash", first, until("two searches done, the third started",
                    _async(lambda: lines(log) == ["start acme", "done acme", "start globex", "done globex",
                                                  "start initech"])))
        first.kill()
    finally:
        first.stop()
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "research_graph") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "graph-crash")
    assert view["state"] == "completed", view
    assert view["status"]["final_answer"] == "REPORT: DRAFT: three rivals grow"
    done = [x for x in lines(log) if x.startswith("done")]
    assert done == ["done acme", "done globex", "done initech"], lines(log)  # each completed search once
    assert lines(log).count("save") == 1
    assert labels_asked(world.model, model) == ["planner", "synthesizer", "validator"]  # no model call twice
    labels = await tree_labels(cli, cli_env, "graph-crash")
    assert labels == ["start", "planner", "retriever", "synthesizer", "validator", "formatter", "result"], labels
    shown = await rewind_json(cli, cli_env, "show", "graph-crash:main:2")
    assert shown["agent_variables"]["sources_consulted"] == ["acme", "globex", "initech"], shown["agent_variables"]
    assert [c["label"] for c in shown["pipeline"]["calls"]] == ["search_web"] * 3, shown["pipeline"]
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]  # the messages channel
    # LangGraph reads the run through RewindSaver on the same store: the same steps, newest first.
    history = await _state_history(folder, tmp_path / "store", "research_graph", "agent", "graph-crash")
    assert [s.metadata["rewind_label"] for s in reversed(history)] == labels
    retrieved = history[-3]  # the retriever's super-step
    assert retrieved.values["sources_consulted"] == ["acme", "globex", "initech"], retrieved.values
    assert [type(m).__name__ for m in history[0].values["messages"]][:2] == ["HumanMessage", "AIMessage"]
    # Rolled back to the synthesizer's step, the thread is the branch as it stands: the new revision's line.
    with UserWorker(folder / "w3", env, "--tool-modules", "research_graph") as third:
        await third.wait_ready()
        code, out, err = await rewind(cli, cli_env, "rollback", "graph-crash", "--step", "3", "--wait")
        assert code == 0, out + err
    history = await _state_history(folder, tmp_path / "store", "research_graph", "agent", "graph-crash")
    assert [s.metadata["rewind_label"] for s in reversed(history)] == labels
    ids = [s.metadata["rewind_checkpoint"] for s in reversed(history)]
    assert ids[:4] == [f"graph-crash:main:{k}" for k in range(4)] and ids[4].startswith("graph-crash:main.r1:"), ids


async def _state_history(folder: Path, store: Path, module_name: str, attribute: str, thread: str) -> list:
    """`graph.aget_state_history` of the user's graph compiled with RewindSaver on the run's store."""
    import importlib
    import os
    import sys

    from checkpoint_bridge.langgraph.saver import AsyncRewindSaver

    os.environ.setdefault("OPENAI_API_KEY", "unused")
    sys.path.insert(0, str(folder))
    try:
        module = importlib.reload(sys.modules[module_name]) if module_name in sys.modules else \
            importlib.import_module(module_name)
    finally:
        sys.path.remove(str(folder))
    async with AsyncRewindSaver.from_url(str(store)) as saver:
        app = getattr(module, attribute).copy(update={"checkpointer": saver})
        return [s async for s in app.aget_state_history({"configurable": {"thread_id": thread}})]


async def test_a_fork_at_the_validator_with_a_set_channel_and_another_model_reruns_nothing_before_it(world, tmp_path):
    folder = world.folder("graph")
    log, _ = write_graph(folder, tmp_path)
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, SCRIPT)
    other = script(world.model, {"synthesizer": [{"content": "DRAFT: three rivals grow"}],
                                 "validator": [{"content": "PASS, after a second look"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "research_graph") as worker:
        await worker.wait_ready()
        run = await rewind_json(cli, cli_env, "start", "--graph", "research_graph:agent", "--input",
                                json.dumps(TASK), "--model", model, "--run-id", "graph-fork", "--wait")
        assert run["status"]["state"] == "completed", run
        labels = await tree_labels(cli, cli_env, "graph-fork")
        validator = labels.index("validator")
        before = lines(log)
        forked = await rewind_json(cli, cli_env, "fork", "graph-fork", "--step", str(validator), "--branch",
                                   "doubt", "--set", "validation_passed=false", "--model", other,
                                   "--side-effects", "reuse", "--wait")
        assert forked["status"]["state"] == "completed", forked
        # An experiment varies the same super-step: a channel set either way, another model.
        code, out, err = await rewind(cli, cli_env, "experiment", "graph-fork", "--step", str(validator),
                                      "--variant", "again:validation_passed=false", "--variant", f"other:model={other}",
                                      "--side-effects", "reuse", "--wait", "--json")
        assert code == 0, out + err
    tree = await rewind_json(cli, cli_env, "tree", "graph-fork")
    varied = {name: [r["step_label"] for r in rows] for name, rows in tree["branches"].items()
              if name not in ("main", "doubt")}
    assert sorted(varied.values()) == [["formatter", "result"],
                                       ["retriever", "synthesizer", "validator", "formatter", "result"]], varied
    # Nothing before the fork ran again; the retriever's repeated searches came from the run's
    # cache, and the same report's save was reused, not repeated.
    assert lines(log) == before, lines(log)
    # The run, then the experiment's `again` variant (the run's model after the point).
    assert labels_asked(world.model, model) == ["planner", "synthesizer", "validator", "synthesizer", "validator"]
    assert labels_asked(world.model, other) == ["synthesizer", "validator"]  # the fork's; `other` needed none
    branch = await tree_labels(cli, cli_env, "graph-fork", "doubt")
    assert branch == ["retriever", "synthesizer", "validator", "formatter", "result"], branch
    tree = await rewind_json(cli, cli_env, "tree", "graph-fork")
    first = tree["branches"]["doubt"][0]["step_index"]
    retrieved = await rewind_json(cli, cli_env, "show", f"graph-fork:doubt:{first}")
    assert retrieved["agent_variables"]["validation_passed"] is False  # the --set, at the fork point
    searches = retrieved["tool_call_cache"][-3:]
    assert [r["served_from_cache"] for r in searches] == [True, True, True], searches
    code, out, err = await rewind(cli, cli_env, "diff", "graph-fork", "main", "doubt")
    assert code == 0, err
    assert "super-step 7 validator (node): step - | 7" in out, out
    diffed = await rewind_json(cli, cli_env, "diff", "graph-fork", "main", "doubt")
    nodes = {(c["label"], c["kind"]): c for c in diffed["calls"]}
    assert nodes[("formatter", "node")]["a"] == nodes[("formatter", "node")]["b"], nodes
    assert nodes[("validator", "node")]["a"] is None and "validation_passed" in nodes[("validator", "node")]["b"]
    # `redo` runs a graph's step again: the validator's model call; every other call is answered
    # from the record (the report's save too: the same draft, the same call).
    asked = len(labels_asked(world.model, model))
    with UserWorker(folder / "w2", env, "--tool-modules", "research_graph") as worker:
        await worker.wait_ready()
        redone = await rewind_json(cli, cli_env, "redo", "graph-fork", "--step", str(validator), "--wait")
        assert redone["status"]["state"] == "completed", redone
    assert labels_asked(world.model, model)[asked:] == ["validator"]
    assert lines(log) == before, lines(log)


async def test_stats_by_node_over_three_runs_add_up_to_their_checkpoints_ledgers(world, tmp_path):
    folder = world.folder("graph")
    write_graph(folder, tmp_path)
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    runs = [f"graph-stats-{i}" for i in range(3)]
    with UserWorker(folder / "w", env, "--tool-modules", "research_graph") as worker:
        await worker.wait_ready()
        for run_id in runs:
            model = script(world.model, SCRIPT)
            done = await rewind_json(cli, cli_env, "start", "--graph", "research_graph:agent", "--input",
                                     json.dumps(TASK), "--model", model, "--run-id", run_id, "--wait")
            assert done["status"]["state"] == "completed", done
    expected: dict[str, dict[str, float]] = {}
    for run_id in runs:
        for index, label in enumerate(await tree_labels(cli, cli_env, run_id)):
            if label in ("start", "result"):
                continue
            shown = await rewind_json(cli, cli_env, "show", f"{run_id}:main:{index}")
            step = shown["ledger"]["step"]
            sums = expected.setdefault(label, {"steps": 0, "total_tokens": 0, "cost_usd": 0.0, "model_calls": 0,
                                               "tool_calls": 0, "cache_hits": 0})
            sums["steps"] += 1
            for field in ("total_tokens", "cost_usd", "model_calls", "tool_calls", "cache_hits"):
                sums[field] += step.get(field, 0)
    args = [a for run_id in runs for a in ("--run", run_id)]
    stats = await rewind_json(cli, cli_env, "stats", *args, "--by", "node")
    assert stats["by"] == "node", stats
    groups = stats["groups"]
    assert set(groups) == {"planner", "retriever", "synthesizer", "validator", "formatter"}, groups
    for node, sums in expected.items():
        got = groups[node]
        assert got["runs"] == 3 and got["steps"] == sums["steps"], (node, got)
        for field in ("total_tokens", "model_calls", "tool_calls", "cache_hits"):
            assert got[field] == sums[field], (node, field, got, sums)
        assert abs(got["cost_usd"] - sums["cost_usd"]) < 1e-9, (node, got, sums)
    assert groups["retriever"]["tool_calls"] == 9 and groups["planner"]["model_calls"] == 3
    code, out, err = await rewind(cli, cli_env, "stats", *args, "--by", "node")
    assert code == 0 and "by node" in out and "retriever" in out, out + err


async def test_the_example_graph_as_a_user_runs_it_with_rewind_demo(tmp_path):
    """`rewind demo --langgraph` (examples/langgraph_research.py, offline, in an empty folder): the
    article's graph, its first draft sent back by the validator, the second accepted, the report
    saved once; then a fork from the validator's step with the channel set the other way."""
    folder = empty_dir(tmp_path, "demo")
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0",
                   REWIND_DEMO_FAILURE_RATE="0.2", REWIND_DEMO_SEARCH_LATENCY_S="0")
    code, out, err = await rewind(folder, env, "demo", "--langgraph", "--json", timeout_s=240)
    assert code == 0, err[-3000:]
    result = json.loads(out)
    assert result["status"]["state"] == "completed", result["status"]
    assert result["final_answer"].startswith("The five companies compared"), result["final_answer"]
    run_id = result["status"]["run_id"]
    assert await tree_labels(folder, env, run_id) == [
        "start", "planner", "retriever", "synthesizer", "validator", "retriever", "synthesizer", "validator",
        "formatter", "result"]
    reports = list((folder / ".rewind" / "outbox").glob("*.md"))
    assert len(reports) == 1, reports  # saved once
    rerun = await rewind_json(folder, env, "show", f"{run_id}:main:5")
    assert [r["served_from_cache"] for r in rerun["tool_call_cache"][-1:]] == [True]  # the same search, cached


def _async(check):
    async def run():
        return check()
    return run


async def _explained(cli: Path, env: dict, run_id: str, worker: UserWorker, waiting):
    """`waiting`, or its failure with the run's status and the worker's log."""
    try:
        return await waiting
    except AssertionError as exc:
        code, out, err = await rewind(cli, env, "status", run_id)
        raise AssertionError(f"{exc}\nrewind status: {out}{err}\nworker log:\n{worker.log()[-4000:]}") from None


FUNCTIONAL = '''
"""Three @tasks under an @entrypoint: outline, research in parallel, write."""
import asyncio
from pathlib import Path

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.func import entrypoint, task

LOG = Path({log!r})
RELEASE = Path({release!r})
SLOW = {slow!r}
llm = ChatOpenAI(model="gpt-4o-mini")


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
async def search_web(query: str) -> str:
    """Search the web."""
    count(f"start {{query}}")
    while query in SLOW and not RELEASE.exists():
        await asyncio.sleep(0.05)
    count(f"done {{query}}")
    return f"results for {{query}}"


@task
async def outline(topic: str) -> list[str]:
    answer = await llm.ainvoke([HumanMessage("Outline: " + topic)])
    return [p.strip() for p in str(answer.content).split(",")]


@task
async def research(point: str) -> str:
    return await search_web.ainvoke({{"query": point}})


@task
async def write(points: list[str], notes: list[str]) -> str:
    answer = await llm.ainvoke([HumanMessage("Write from: " + "; ".join(notes))])
    return str(answer.content)


@entrypoint()
async def report(inputs: dict) -> str:
    points = await outline(inputs["topic"])
    notes = await asyncio.gather(*(research(p) for p in points))
    return await write(points, list(notes))
'''

FUNCTIONAL_SCRIPT = {"outline": [{"content": "acme, globex, initech"}], "write": [{"content": "REPORT on three"}]}


async def test_a_functional_graph_crashes_forks_and_counts_by_task(world, tmp_path):
    folder = world.folder("functional")
    log, release = tmp_path / f"f-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"r-{uuid.uuid4().hex[:6]}"
    (folder / "report_flow.py").write_text(FUNCTIONAL.format(log=str(log), release=str(release), slow=["initech"]))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, FUNCTIONAL_SCRIPT)
    other = script(world.model, {"write": [{"content": "SHORTER REPORT"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    first = UserWorker(folder / "w1", env, "--tool-modules", "report_flow")
    try:
        await first.wait_ready()
        await rewind_json(cli, cli_env, "start", "--graph", "report_flow:report", "--input",
                          json.dumps({"topic": "rivals"}), "--model", model, "--run-id", "flow-crash")
        await _explained(cli, cli_env, "flow-crash", first, until(
            "two searches done, the third started",
            _async(lambda: sorted(lines(log)) == ["done acme", "done globex", "start acme", "start globex",
                                                  "start initech"])))
        first.kill()
    finally:
        first.stop()
    release.touch()
    with UserWorker(folder / "w2", env, "--tool-modules", "report_flow") as second:
        await second.wait_ready()
        view = await finished(cli, cli_env, "flow-crash")
        assert view["state"] == "completed" and view["status"]["final_answer"] == "REPORT on three", view
        assert sorted(x for x in lines(log) if x.startswith("done")) == ["done acme", "done globex", "done initech"]
        assert labels_asked(world.model, model) == ["outline", "write"]
        labels = await tree_labels(cli, cli_env, "flow-crash")
        assert labels[:2] == ["start", "outline"] and sorted(labels[2:5]) == ["research"] * 3, labels
        assert labels[5:] == ["write", "result"], labels
        # A fork after the research, with another model for the writing: no task before it runs again.
        forked = await rewind_json(cli, cli_env, "fork", "flow-crash", "--step", "4", "--branch", "short",
                                   "--model", other, "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert forked["status"]["final_answer"] == "SHORTER REPORT"
    assert len([x for x in lines(log) if x.startswith("done")]) == 3
    assert labels_asked(world.model, other) == ["write"]
    stats = await rewind_json(cli, cli_env, "stats", "--run", "flow-crash", "--by", "node")
    assert stats["groups"]["research"]["tool_calls"] == 3 and stats["groups"]["write"]["model_calls"] == 2, stats


REVIEWED = '''
"""A draft, a person's look at it (interrupt), the report."""
from pathlib import Path
from typing import TypedDict

from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

LOG = Path({log!r})
llm = ChatOpenAI(model="gpt-4o-mini")


class State(TypedDict, total=False):
    topic: str
    draft: str
    note: str
    report: str


async def draft(state):
    answer = await llm.ainvoke([HumanMessage("Draft on " + state["topic"])])
    return {{"draft": str(answer.content)}}


async def review(state):
    hint = await llm.ainvoke([HumanMessage("What should a reviewer check in: " + state["draft"])])
    note = interrupt({{"draft": state["draft"], "check": str(hint.content)}})
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


async def test_an_interrupt_waits_as_an_approval_and_resumes_with_the_value_after_a_crash(world, tmp_path):
    folder = world.folder("reviewed")
    log = tmp_path / f"review-{uuid.uuid4().hex[:6]}.txt"
    (folder / "reviewed.py").write_text(REVIEWED.format(log=str(log)))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, {"draft": [{"content": "DRAFT one"}], "review": [{"content": "the figures"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    first = UserWorker(folder / "w1", env, "--tool-modules", "reviewed")
    try:
        await first.wait_ready()
        await rewind_json(cli, cli_env, "start", "--graph", "reviewed:graph", "--input",
                          json.dumps({"topic": "rivals"}), "--model", model, "--run-id", "graph-review")

        async def waiting():
            view = await rewind_json(cli, cli_env, "status", "graph-review")
            return view if view["state"] == "waiting_for_approval" else None
        view = await _explained(cli, cli_env, "graph-review", first, until("the interrupt waits", waiting))
        [pending] = view["status"]["pending_approvals"]
        assert pending["tool_name"] == "interrupt" and pending["arguments"]["value"] == {
            "draft": "DRAFT one", "check": "the figures"}, pending
        code, out, err = await rewind(cli, cli_env, "pending")
        assert code == 0 and "graph-review" in out and pending["tool_call_id"] in out, out + err
        first.kill()  # the machine dies while the run waits for a person
    finally:
        first.stop()
    # A new worker: the run waits again where it was, its model calls answered from history.
    with UserWorker(folder / "w2", env, "--tool-modules", "reviewed") as second:
        await second.wait_ready()
        await until("the interrupt waits again", waiting)
        code, out, err = await rewind(cli, cli_env, "approve", "graph-review", pending["tool_call_id"],
                                      "--by", "ann", "--value", '"checked: fine"')
        assert code == 0, out + err
        view = await finished(cli, cli_env, "graph-review")
    assert view["state"] == "completed", view
    result = json.loads(view["status"]["final_answer"])
    assert result["report"] == "DRAFT one / reviewer: checked: fine", result
    assert labels_asked(world.model, model) == ["draft", "review"]  # the review's call ran once
    labels = await tree_labels(cli, cli_env, "graph-review")
    assert labels == ["start", "draft", "review", "publish", "result"], labels
    shown = await rewind_json(cli, cli_env, "show", "graph-review:main:2")
    decided = [c for c in shown["pipeline"]["calls"] if c["kind"] == "interrupt"]
    assert decided and decided[0]["resume"] == "checked: fine" and decided[0]["by"] == "ann", shown["pipeline"]


async def test_a_node_that_does_io_itself_runs_as_an_activity_and_routing_code_that_does_fails_in_one_line(
        world, tmp_path):
    folder = world.folder("io")
    (folder / "io_graph.py").write_text('''
from typing import TypedDict
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    text: str


async def read(state):
    with open("/etc/hostname") as f:
        return {"text": f.read().strip()}


def route(state):
    with open("/etc/hostname") as f:
        return END if f.read() else "read"


builder = StateGraph(State)
builder.add_node("read", read)
builder.add_edge(START, "read")
builder.add_edge("read", END)
graph = builder.compile()

routed = StateGraph(State)
routed.add_node("read", read)
routed.add_edge(START, "read")
routed.add_conditional_edges("read", route)
routed_graph = routed.compile()
''')
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "io_graph") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, cli_env, "start", "--graph", "io_graph:graph", "--run-id", "io-node", "--wait")
        assert done["status"]["state"] == "completed", done
        assert json.loads(done["status"]["final_answer"])["text"] == Path("/etc/hostname").read_text().strip()
        shown = await rewind_json(cli, cli_env, "show", "io-node:main:1")
        assert [c["kind"] for c in shown["pipeline"]["calls"]] == ["node"], shown["pipeline"]
        code, out, err = await rewind(cli, cli_env, "start", "--graph", "io_graph:routed_graph", "--run-id",
                                      "io-route", "--wait")
        assert code != 0
        view = await finished(cli, cli_env, "io-route")
        code, out, err = await rewind(cli, cli_env, "start", "--graph", "io_graph:graph", "--input", '{"nope": 1}',
                                      "--wait")
        assert code != 0 and "nope is not a channel of the graph" in out + err, out + err
    assert view["state"] == "failed"
    assert view["failure"].startswith("AgentRunFailed: graph io_graph:routed_graph called open in route (io_graph.py:"), view
    assert "do that in a node" in view["failure"]
    code, out, err = await rewind(cli, cli_env, "start", "--graph", "io_graph", "--input", "{}")
    assert code == 2 and "MODULE:ATTR" in err, err


async def test_a_budget_pauses_a_graph_run_and_its_side_effect_waits_for_approval(world, tmp_path):
    folder = world.folder("graph")
    log, _ = write_graph(folder, tmp_path)
    module = folder / "research_graph.py"
    module.write_text(module.read_text().replace('{"save_report": {"side_effects": True}}',
                                                 '{"save_report": {"side_effects": True, "needs_approval": True}}'))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, SCRIPT)
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "research_graph") as worker:
        await worker.wait_ready()
        await rewind_json(cli, cli_env, "start", "--graph", "research_graph:agent", "--input", json.dumps(TASK),
                          "--model", model, "--run-id", "graph-budget", "--max-tokens", "10")

        async def state_is(*wanted):
            async def check():
                view = await rewind_json(cli, cli_env, "status", "graph-budget")
                return view if view["state"] in wanted else None
            return await until(f"graph-budget {wanted}", check)
        view = await state_is("budget_exceeded")
        assert "max_tokens" in view["status"]["budget_reason"], view
        assert labels_asked(world.model, model) == ["planner"] and lines(log) == []  # nothing after the budget
        await rewind_json(cli, cli_env, "continue", "graph-budget", "--max-tokens", "100000")
        view = await state_is("waiting_for_approval")
        [waiting] = view["status"]["pending_approvals"]
        assert waiting["tool_name"] == "save_report" and lines(log).count("save") == 0, waiting
        await rewind_json(cli, cli_env, "approve", "graph-budget", waiting["tool_call_id"], "--by", "ann")
        view = await finished(cli, cli_env, "graph-budget")
    assert view["state"] == "completed", view
    assert lines(log).count("save") == 1


REACT = '''
"""An agent node with tools bound, and a ToolNode: the ReAct loop of LangGraph's docs."""
import asyncio
from pathlib import Path
from typing import Annotated, TypedDict

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

LOG = Path({log!r})


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
async def lookup_price(item: str) -> str:
    """The price of one item."""
    count(f"price {{item}}")
    return f"{{item}}: 12.50 EUR"


@tool
async def place_order(item: str) -> str:
    """Place an order."""
    count(f"order {{item}}")
    return f"ordered {{item}}"


rewind_tool_options = {{"place_order": {{"side_effects": True}}}}
tools = [lookup_price, place_order]
llm = ChatOpenAI(model="gpt-4o-mini").bind_tools(tools)


class State(TypedDict):
    messages: Annotated[list, add_messages]


async def agent(state):
    return {{"messages": [await llm.ainvoke(state["messages"])]}}


builder = StateGraph(State)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()
'''


async def test_a_toolnode_graph_runs_its_tools_as_the_workers_tools_once(world, tmp_path):
    folder = world.folder("react")
    log = tmp_path / f"react-{uuid.uuid4().hex[:6]}.txt"
    (folder / "shop_graph.py").write_text(REACT.format(log=str(log)))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, {"agent": [
        {"tool_calls": [{"name": "lookup_price", "arguments": {"item": "tea"}},
                        {"name": "lookup_price", "arguments": {"item": "cake"}}]},
        {"tool_calls": [{"name": "place_order", "arguments": {"item": "tea"}}]},
        {"content": "Ordered tea for 12.50 EUR."}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "shop_graph") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, cli_env, "tools")
        assert "place_order" in out and "side effect" in out and "shop_graph:graph" in out, out + err
        done = await rewind_json(cli, cli_env, "start", "--graph", "shop_graph:graph", "--input",
                                 json.dumps({"messages": [{"role": "user", "content": "Buy tea"}]}),
                                 "--model", model, "--run-id", "graph-react", "--wait")
        assert done["status"]["state"] == "completed", done
        assert done["status"]["final_answer"] == "Ordered tea for 12.50 EUR."
        # From before the order: the agent asks again, the tools node's order is reused, not sent twice.
        labels = await tree_labels(cli, cli_env, "graph-react")
        assert labels == ["start", "agent", "tools", "agent", "tools", "agent", "result"], labels
        forked = await rewind_json(cli, cli_env, "fork", "graph-react", "--step", "3", "--branch", "again",
                                   "--side-effects", "reuse", "--wait")
        assert forked["status"]["state"] == "completed", forked
    assert sorted(lines(log)) == ["order tea", "price cake", "price tea"], lines(log)
    shown = await rewind_json(cli, cli_env, "show", "graph-react:main:2")
    assert [r["tool_name"] for r in shown["tool_call_cache"]] == ["lookup_price", "lookup_price"]
    roles = [m["role"] for m in shown["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"], roles  # the ToolNode's messages, in the channel
    # The result step holds the final state: the answer once, as the channel ends with it.
    result = await rewind_json(cli, cli_env, "show", "graph-react:main:6")
    assert [m.get("content") for m in result["messages"]].count("Ordered tea for 12.50 EUR.") == 1, result["messages"]


WITH_REWIND_TOOLS = '''
"""A node that awaits Rewind @tool functions directly."""
from pathlib import Path
from typing import TypedDict

from langgraph.graph import END, START, StateGraph

from rewind import tool

LOG = Path({log!r})


@tool
async def lookup(item: str) -> str:
    """The price of one item."""
    with open(LOG, "a") as f:
        f.write(f"lookup {{item}}\\n")
    return f"{{item}}: 3 EUR"


@tool(side_effects=True)
async def notify(who: str, text: str) -> str:
    """Tell someone."""
    with open(LOG, "a") as f:
        f.write(f"notify {{who}}\\n")
    return "sent"


class State(TypedDict, total=False):
    item: str
    price: str
    sent: str


async def price(state):
    return {{"price": await lookup(state["item"])}}


async def tell(state):
    return {{"sent": await notify(who="ann", text=state["price"])}}


builder = StateGraph(State)
builder.add_node("price", price)
builder.add_node("tell", tell)
builder.add_edge(START, "price")
builder.add_edge("price", "tell")
builder.add_edge("tell", END)
graph = builder.compile()
'''


async def test_rewind_tools_awaited_in_nodes_are_the_runs_tool_calls(world, tmp_path):
    folder = world.folder("rtools")
    log = tmp_path / f"rtools-{uuid.uuid4().hex[:6]}.txt"
    (folder / "priced.py").write_text(WITH_REWIND_TOOLS.format(log=str(log)))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "priced") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, cli_env, "start", "--graph", "priced:graph", "--input", '{"item": "tea"}',
                                 "--run-id", "graph-rtools", "--wait")
        assert done["status"]["state"] == "completed", done
        assert json.loads(done["status"]["final_answer"]) == {"item": "tea", "price": "tea: 3 EUR", "sent": "sent"}
        forked = await rewind_json(cli, cli_env, "fork", "graph-rtools", "--step", "1", "--branch", "again",
                                   "--side-effects", "reuse", "--wait")
        assert forked["status"]["state"] == "completed", forked
    assert lines(log) == ["lookup tea", "notify ann"], lines(log)  # neither ran again in the fork
    shown = await rewind_json(cli, cli_env, "show", "graph-rtools:main:2")
    [sent] = shown["tool_call_cache"][-1:]
    assert sent["tool_name"] == "notify" and sent["side_effects"] and sent["idempotency_key"], sent


OWN_MODEL_GRAPH = '''
from typing import TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

llm = ChatOpenAI(model={model!r})


class State(TypedDict, total=False):
    topic: str
    answer: str


async def answer(state):
    reply = await llm.ainvoke("Say something about " + state["topic"])
    return {{"answer": reply.content}}


builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
'''


async def test_a_graph_without_model_runs_on_its_chat_models_own_and_says_so(world, tmp_path):
    # REWIND_MODEL is the model of runs whose code names none: the graph's chat model names its own,
    # and the run's status says which one answered (it said REWIND_MODEL's).
    own = script(world.model, {"answer": [{"content": "tea is hot"}]})
    folder = world.folder("own")
    (folder / "own_model.py").write_text(OWN_MODEL_GRAPH.format(model=own))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = {**world.env(cli), "REWIND_MODEL": "gpt-4o"}
    with UserWorker(folder / "w", env, "--tool-modules", "own_model") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, cli_env, "start", "--graph", "own_model:graph", "--input",
                                 '{"topic": "tea"}', "--run-id", "graph-own", "--wait")
    assert done["status"]["state"] == "completed" and "tea is hot" in done["status"]["final_answer"], done
    assert done["status"]["model"] == own, done["status"]
    assert labels_asked(world.model, own) == ["answer"]
    code, out, err = await rewind(cli, cli_env, "status", "graph-own")
    assert code == 0 and f"(model {own})" in out, out
    # `rewind runs` names the graph, and selects by it; export writes its messages channel as a conversation.
    listed = await rewind_json(cli, cli_env, "runs", "--agent", "own_model:graph")
    assert [(r["run_id"], r["kind"], r["agent"]) for r in listed["runs"]] == [("graph-own", "graph", "own_model:graph")]
    code, out, err = await rewind(cli, cli_env, "export", "--runs", "--agent", "own_model:graph", "--format", "jsonl")
    assert code == 0, err
    (conversation,) = [json.loads(line) for line in out.splitlines()]
    assert conversation["messages"][-1]["role"] == "assistant", conversation
    assert json.loads(conversation["messages"][-1]["content"]) == {"topic": "tea", "answer": "tea is hot"}
    assert conversation["metadata"]["kind"] == "graph" and conversation["metadata"]["agent"] == "own_model:graph"
