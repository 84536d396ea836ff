"""Runs as data, as a user gets them: a few runs made with the CLI and a worker as
subprocesses (env-only configuration, empty folders, a real dev server, the scripted
model over HTTP), then `rewind export --runs` read back from an empty folder:

    ok-1       a plain run: a lookup, the same lookup again (served from the cache), an answer;
               then forked at step 1 (a branch `alt` with an answer of its own)
    team-1     asks the sub-agent `clerk`, whose run (a lookup, an answer) is a branch of team-1
    toolerr-1  completes after a tool that raises on every attempt (the model got the error)
    fail-400   fails: the model answers 400
    pipe-ok    pipeline `report`: a tool call, a model call (its own conversation), a result

- `--format parquet` read back with pyarrow adds up to `rewind stats`' totals (steps,
  tokens, cost, tool calls, cache hits), and every branch of every run is in it;
- `--format jsonl` lines are chat conversations whose tool calls pair with tool messages,
  one per branch, with `tools` naming every tool called;
- the filters select what `rewind runs` lists with the same filters;
- `rewind stats --by model|agent|day|tool` add up to the totals.
"""

from __future__ import annotations

import json
import socket

import pyarrow.parquet as pq
import pytest
from as_user import one_line_error, rewind, rewind_json, until, user_workers

TOOLS = '''
from rewind import pipeline, subagent, tool


@tool
async def lookup(term: str) -> str:
    """Read-only facts about a term."""
    return f"about {term}"


@tool(max_attempts=2)
async def broken(term: str) -> str:
    """A tool with a bug: raises on every attempt."""
    raise RuntimeError(f"bug in broken({term})")


clerk = subagent(name="clerk", description="Looks things up.", system_prompt="Look it up.", tools=["lookup"],
                 model="script:{clerk}")


@pipeline
async def report(ctx, term: str) -> str:
    facts = await ctx.tool("lookup", term=term)
    return await ctx.llm("summarize", system="Be short.", user=facts)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def _paired(messages: list[dict]) -> bool:
    """Every assistant tool call answered by the tool messages right after it, and no other tool message."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] in ("system", "user", "assistant", "tool"), m
        if m["role"] == "tool":
            return False
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            answered = set()
            while i < len(messages) and messages[i]["role"] == "tool":
                answered.add(messages[i]["tool_call_id"])
                assert isinstance(messages[i]["content"], str)
                i += 1
            if answered != {c["id"] for c in m["tool_calls"]}:
                return False
            for c in m["tool_calls"]:
                assert c["type"] == "function" and isinstance(json.loads(c["function"]["arguments"]), dict)
    return True


async def test_export_runs_add_up_to_stats_and_select_as_runs_does(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    q = world.queue
    names = {n: f"{n}-{q}" for n in ("plain", "alt", "toolerr", "bad", "team", "clerk", "report")}
    (wdir / "datatools.py").write_text(TOOLS.replace("{clerk}", names["clerk"]))
    lookup = {"tool_calls": [{"name": "lookup", "arguments": {"term": "tea"}}]}
    world.model.add_script(names["plain"], [lookup, lookup, {"content": "tea is fine"}])
    world.model.add_script(names["alt"], [lookup, {"content": "tea, in short"}])  # by turn: the fork asks the second
    world.model.add_script(names["toolerr"], [{"tool_calls": [{"name": "broken", "arguments": {"term": "tea"}}]},
                                              {"content": "the tool is broken; no answer"}])
    world.model.add_script(names["bad"], [{"error": {"status": 400, "message": "this request is refused"}}])
    world.model.add_script(names["team"], [{"tool_calls": [{"name": "clerk", "arguments": {"task": "tea?"}}]},
                                           {"content": "the clerk says: about tea"}])
    world.model.add_script(names["clerk"], [lookup, {"content": "about tea"}])
    world.model.add_script(names["report"], {"summarize": [{"content": "tea: fine"}]})
    prices = {f"script:{n}": {"input": 1.0, "output": 2.0} for n in names.values()}
    env = world.env(cli)

    port = _free_port()
    async with user_workers() as workers:
        worker = workers(wdir, world.env(wdir, REWIND_PRICES=json.dumps(prices), REWIND_METRICS_PORT=str(port)),
                         "--tool-modules", "datatools")
        await worker.wait_ready()
        for run_id, args, exit_code in [
            ("ok-1", ["--task", "tea?", "--model", f"script:{names['plain']}"], 0),
            ("toolerr-1", ["--task", "tea?", "--model", f"script:{names['toolerr']}"], 0),
            ("fail-400", ["--task", "tea?", "--model", f"script:{names['bad']}"], 1),
            ("pipe-ok", ["--pipeline", "report", "--input", '{"term": "tea"}', "--model", f"script:{names['report']}"], 0),
            ("team-1", ["--task", "tea?", "--model", f"script:{names['team']}", "--tools", "clerk"], 0),
        ]:
            code, out, err = await rewind(cli, env, "start", "--run-id", run_id, *args, "--wait")
            assert code == exit_code, (run_id, code, out, err)
        code, _, err = await rewind(cli, env, "fork", "ok-1", "--step", "1", "--branch", "alt",
                                    "--model", f"script:{names['alt']}", "--wait")
        assert code == 0, err
        # Checkpoint write latency: the store keeps none; the worker measured every write it made.
        async def written() -> dict | None:
            found = await rewind_json(cli, env, "stats", "--metrics", f"http://127.0.0.1:{port}/metrics")
            return found if found["write_latency"]["checkpoint_write"]["count"] >= found["totals"]["steps"] else None

        latency = (await until("the worker's checkpoint writes", written))["write_latency"]
        writes = latency["checkpoint_write"]
        assert writes["mean_ms"] > 0 and writes["p50_ms"] <= writes["p95_ms"] <= writes["p99_ms"], latency
        assert latency["mirror_lag"]["count"] == writes["count"]
        code, text, _ = await rewind(cli, env, "stats", "--metrics", f"http://127.0.0.1:{port}/metrics")
        assert code == 0 and "checkpoint write " in text and "mirror lag" in text, text

    code, _, err = await rewind(cli, env, "stats", "--metrics", f"http://127.0.0.1:{port}/metrics")
    one_line_error(code, err, "cannot read worker metrics", "REWIND_METRICS_PORT", prefix="rewind: ")

    reader = world.folder("reader")  # an empty folder: what the store and Temporal say
    renv = world.env(reader)

    async def held_still() -> tuple[dict, dict] | None:
        """stats, the export and stats again, until nothing was mirrored in between (a failed run's
        last checkpoint may land after its workflow closed)."""
        before = await rewind_json(reader, renv, "stats")
        exported = await rewind_json(reader, renv, "export", "--runs", "--format", "parquet", "--out", "steps.parquet")
        return (before, exported) if before == await rewind_json(reader, renv, "stats") else None

    stats, done = await until("stats that hold still", held_still)
    totals = stats["totals"]
    assert stats["runs"] == 5 and totals["steps"] > 0 and totals["cost_usd"] > 0

    # -- parquet: one row per step, adding up to stats' totals ---------------------------------
    assert done["runs"] == 5 and done["rows"] == totals["steps"], done
    table = pq.read_table(reader / "steps.parquet").to_pylist()
    assert len(table) == totals["steps"]
    for column in ("prompt_tokens", "completion_tokens", "total_tokens", "model_calls", "tool_calls", "cache_hits"):
        assert sum(r[column] for r in table) == totals.get(column, stats.get(column)), column
    assert sum(r["tool_calls"] for r in table) == stats["tool_calls"]
    assert sum(r["cache_hits"] for r in table) == stats["cache_hits"] == 1  # ok-1's second lookup
    assert abs(sum(r["cost_usd"] for r in table) - totals["cost_usd"]) < 1e-9
    assert {(r["run_id"], r["branch_id"]) for r in table} >= {("ok-1", "main"), ("ok-1", "alt"), ("toolerr-1", "main"),
                                                              ("pipe-ok", "main")}
    by_step = {(r["run_id"], r["branch_id"], r["step"]): r for r in table}
    assert by_step[("ok-1", "alt", 2)]["final_answer"] == "tea, in short"
    assert [r["final_answer"] for r in table if r["run_id"] == "ok-1" and r["branch_id"] == "main"][-1] == "tea is fine"
    assert sum(r["tool_errors"] for r in table if r["run_id"] == "toolerr-1") == 1
    assert any("bug in broken(tea)" in e for r in table if r["run_id"] == "toolerr-1" for e in r["errors"])
    assert any("this request is refused" in e for r in table if r["run_id"] == "fail-400" for e in r["errors"])
    assert {r["agent"] for r in table if r["run_id"] == "pipe-ok"} == {"report"}
    # The sub-agent's run: rows of its own branch, under its agent and model, counted once.
    clerk_rows = [r for r in table if r["run_id"] == "team-1" and r["subagent"]]
    assert clerk_rows and {(r["agent"], r["model"], r["branch"]) for r in clerk_rows} == {
        ("clerk", f"script:{names['clerk']}", "main")}
    assert clerk_rows[-1]["final_answer"] == "about tea" and sum(r["tool_calls"] for r in clerk_rows) == 1
    assert all(r["model"] for r in table if r["model_calls"])
    assert sum(r["retries"] for r in table) == sum(stats["retries"].values())

    # -- jsonl: conversations whose tool calls pair with tool messages ----------------------------
    code, out, err = await rewind(reader, renv, "export", "--runs", "--format", "jsonl")
    assert code == 0 and err == "", err
    lines = [json.loads(line) for line in out.splitlines()]
    by_branch = {(c["metadata"]["run_id"], c["metadata"]["branch_id"]): c for c in lines}
    assert {("ok-1", "main"), ("ok-1", "alt"), ("toolerr-1", "main")} <= set(by_branch)
    assert ("fail-400", "main") not in by_branch  # the model refused its first turn: no conversation to learn from
    for c in lines:
        assert set(c) == {"messages", "tools", "metadata"} and _paired(c["messages"]), c
        called = {tc["function"]["name"] for m in c["messages"] for tc in m.get("tool_calls") or []}
        assert called <= {t["function"]["name"] for t in c["tools"]}
        assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in c["tools"])
    # The tools each model was offered, as its history has them (the schemas the worker described).
    for key in (("ok-1", "main"), ("ok-1", "alt"), ("toolerr-1", "main")):
        offered = {t["function"]["name"]: t["function"] for t in by_branch[key]["tools"]}
        assert by_branch[key]["metadata"]["tools_inferred"] is False and {"lookup", "broken"} <= set(offered), key
        assert offered["lookup"]["description"] == "Read-only facts about a term."
        assert offered["lookup"]["parameters"]["properties"]["term"]["type"] == "string"
    ok = by_branch[("ok-1", "main")]["messages"]
    assert [m["role"] for m in ok] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"][-len(ok):]
    assert ok[-1]["content"] == "tea is fine" and ok[1 if ok[0]["role"] == "system" else 0]["content"] == "tea?"
    assert by_branch[("ok-1", "alt")]["messages"][-1]["content"] == "tea, in short"
    # A pipeline's branch strings its calls together: each model call is a conversation of its own.
    piped = [c for c in lines if c["metadata"]["run_id"] == "pipe-ok"]
    assert [(c["metadata"]["label"], c["metadata"]["agent"]) for c in piped] == [("summarize", "report")], piped
    assert [(m["role"], m["content"]) for m in piped[0]["messages"]] == [
        ("system", "Be short."), ("user", "about tea"), ("assistant", "tea: fine")]
    assert by_step[("pipe-ok", "main", 3)]["final_answer"] == "tea: fine"
    sub = [c for (run, _), c in by_branch.items() if run == "team-1" and c["metadata"]["subagent"]]
    assert len(sub) == 1 and sub[0]["metadata"]["agent"] == "clerk" and sub[0]["messages"][-1]["content"] == "about tea"
    assert [t["function"]["name"] for t in sub[0]["tools"]] == ["lookup"]
    assert [t["function"]["name"] for t in by_branch[("team-1", "main")]["tools"]] == ["clerk"]
    broken = [m for m in by_branch[("toolerr-1", "main")]["messages"] if m["role"] == "tool"]
    assert len(broken) == 1 and "bug in broken(tea)" in broken[0]["content"]
    assert by_branch[("toolerr-1", "main")]["metadata"]["state"] == "completed"

    # Temporal down: the store alone selects (one line says so), the tools are inferred from the calls.
    down = world.env(reader, TEMPORAL_ADDRESS=f"127.0.0.1:{_free_port()}")
    code, out, err = await rewind(reader, down, "export", "--runs", "--state", "completed")
    assert code == 0 and err.count("\n") == 1 and "Temporal is not reachable" in err, err
    alone = {(c["metadata"]["run_id"], c["metadata"]["branch_id"]): c for c in map(json.loads, out.splitlines())}
    assert {k[0] for k in alone} == {"ok-1", "toolerr-1", "pipe-ok", "team-1"}
    assert alone[("ok-1", "main")]["messages"] == by_branch[("ok-1", "main")]["messages"]
    assert alone[("ok-1", "main")]["metadata"]["tools_inferred"] is True
    assert alone[("toolerr-1", "main")]["tools"] == [{"type": "function", "function": {
        "name": "broken", "description": "", "parameters": {"type": "object", "properties": {"term": {"type": "string"}},
                                                             "required": ["term"]}}}]

    # -- the filters select as `rewind runs` does ------------------------------------------------
    for args in (["--state", "failed"], ["--state", "completed"], ["--tool-errors"], ["--agent", "report"],
                 ["--limit", "2"], ["--since", "1d"], ["--until", "1d"]):
        # (Temporal also lists other tests' runs, which have no checkpoint in this store: not exported.)
        listed = {r["run_id"] for r in (await rewind_json(reader, renv, "runs", *args))["runs"] if r["stored"]}
        await rewind_json(reader, renv, "export", "--runs", *args, "--format", "parquet", "--out", "part.parquet")
        exported = {r["run_id"] for r in pq.read_table(reader / "part.parquet").to_pylist()}
        code, out, _ = await rewind(reader, renv, "export", "--runs", *args)
        conversed = {json.loads(line)["metadata"]["run_id"] for line in out.splitlines()}
        assert exported == listed and conversed <= listed, (args, listed, exported, conversed)
    assert {r["run_id"] for r in pq.read_table(reader / "part.parquet").to_pylist()} == set()  # --until 1d: none

    # -- stats --by: each grouping adds up to the totals ----------------------------------------
    for by in ("model", "agent", "day"):
        grouped = await rewind_json(reader, renv, "stats", "--by", by)
        groups = grouped["groups"]
        assert grouped["by"] == by and groups, grouped
        for column in ("steps", "total_tokens", "prompt_tokens", "completion_tokens", "tool_calls", "cache_hits"):
            assert sum(g[column] for g in groups.values()) == totals.get(column, stats.get(column)), (by, column)
        assert abs(sum(g["cost_usd"] for g in groups.values()) - totals["cost_usd"]) < 1e-9, by
        assert all(g["cost_per_run"] == pytest.approx(g["cost_usd"] / g["runs"]) for g in groups.values())
    assert set((await rewind_json(reader, renv, "stats", "--by", "model"))["groups"]) >= {
        f"script:{names['plain']}", f"script:{names['alt']}"}
    tools = (await rewind_json(reader, renv, "stats", "--by", "tool"))["groups"]
    assert set(tools) == {"lookup", "broken", "clerk"}  # a sub-agent is a tool of its caller
    assert (tools["clerk"]["subagent_calls"], tools["clerk"]["tool_calls"]) == (1, 0)  # its run's steps count on their own
    assert sum(g["tool_calls"] for g in tools.values()) == stats["tool_calls"]
    assert sum(g["cache_hits"] for g in tools.values()) == stats["cache_hits"] == tools["lookup"]["cache_hits"]
    assert (tools["broken"]["tool_calls"], tools["broken"]["tool_errors"]) == (0, 1)  # it never returned
    assert stats["cost_per_run"] == pytest.approx(totals["cost_usd"] / 5)
    recent = await rewind_json(reader, renv, "stats", "--since", "1d")
    assert recent["runs"] == 5 and (await rewind_json(reader, renv, "stats", "--since", "2026-01-01"))["runs"] == 5
    code, text, _ = await rewind(reader, renv, "stats", "--by", "tool")
    assert code == 0 and "by tool" in text and "lookup" in text, text

    # -- usage errors: one line each ---------------------------------------------------------------
    code, _, err = await rewind(reader, renv, "export", "--runs", "--format", "json")
    one_line_error(code, err, "--format jsonl", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "export")
    one_line_error(code, err, "--runs", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "export", "ok-1:main:1", "--state", "failed")
    one_line_error(code, err, "--state selects runs", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "stats", "--by", "colour")
    one_line_error(code, err, "--by", prefix="rewind stats: ")


def test_parquet_without_pyarrow_names_the_extra(monkeypatch) -> None:
    import sys

    from checkpoint_bridge.views.parquet import schema
    from workflows.vocabulary.errors import ConfigError

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigError, match=r"pip install 'rewind-agents\[export\]'"):
        schema()
