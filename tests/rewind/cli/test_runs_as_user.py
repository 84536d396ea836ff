"""`rewind runs` as a user runs it: ten runs made with the CLI and a worker as
subprocesses (env-only configuration, empty folders, a Temporal dev server of
this test's own, the scripted model over HTTP), then every filter lists exactly
the runs it should, with Temporal up and after the dev server is killed (the
listing then comes from the checkpoint store, saying so in one line).

    ok-1        a plain agent run that completes, then forked and rolled back (still one run)
    clerk-1     a run of the declared agent `clerk`, on a 1000x dearer model: completes
    toolerr-1   completes, after a tool that raises on every attempt (the model got the error)
    fail-400    fails: the model answers 400
    pipe-ok     pipeline `report`: completes
    pipe-bug    pipeline `report` whose tool raises on every attempt: the pipeline fails
    wait-1      waits for an approval
    paused-1    paused by its budget (--max-steps 1)
    cancel-1    cancelled while it waited for an approval
    stuck-1     started on a task queue no worker polls
"""

from __future__ import annotations

import json

from as_user import one_line_error, rewind, rewind_json, until, user_workers
from rewind.temporal.dev_server import DevServer

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


@tool(side_effects=True, needs_approval=True)
async def wire(to: str) -> str:
    """Send money: a person approves every transfer."""
    return f"sent to {to}"


clerk = subagent(name="clerk", description="Looks things up.", system_prompt="Look it up.", tools=["lookup"],
                 model="script:{dear}")


@pipeline
async def report(ctx, term: str, buggy: bool = False) -> str:
    facts = await ctx.tool("broken" if buggy else "lookup", term=term)
    return f"report: {facts}"
'''

ALL = {"ok-1", "clerk-1", "toolerr-1", "fail-400", "pipe-ok", "pipe-bug", "wait-1", "paused-1", "cancel-1", "stuck-1"}
ENDED_IN_STORE = {"completed": {"ok-1", "clerk-1", "toolerr-1", "pipe-ok"}, "failed": {"fail-400", "pipe-bug"}}
WITH_TOOL_ERRORS = {"toolerr-1", "pipe-bug"}  # pipe-bug's failed call is recorded before the pipeline fails




async def test_runs_lists_exactly_what_each_filter_selects_with_temporal_up_and_down(world, tmp_path) -> None:
    server = DevServer.start(tmp_path / "temporal.db", headless=True)
    try:
        await _scenario(world, server, tmp_path)
    finally:
        server.kill()


async def _scenario(world, server: DevServer, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    q = world.queue
    names = {n: f"{n}-{q}" for n in ("plain", "dear", "toolerr", "bad", "wire", "steps")}
    (wdir / "runtools.py").write_text(TOOLS.replace("{dear}", names["dear"]))
    lookup = {"tool_calls": [{"name": "lookup", "arguments": {"term": "tea"}}]}
    world.model.add_script(names["plain"], [lookup, {"content": "tea is fine"}])
    world.model.add_script(names["dear"], [lookup, {"content": "tea, dearly"}])
    world.model.add_script(names["toolerr"], [{"tool_calls": [{"name": "broken", "arguments": {"term": "tea"}}]},
                                              {"content": "the tool is broken; no answer"}])
    world.model.add_script(names["bad"], [{"error": {"status": 400, "message": "this request is refused"}}])
    world.model.add_script(names["wire"], [{"tool_calls": [{"name": "wire", "arguments": {"to": "bob"}}]},
                                           {"content": "sent"}])
    world.model.add_script(names["steps"], [lookup, lookup, {"content": "two lookups"}])
    prices = {f"script:{n}": {"input": 1.0, "output": 2.0} for n in names.values()}
    prices[f"script:{names['dear']}"] = {"input": 1000.0, "output": 2000.0}
    env = world.env(cli, TEMPORAL_ADDRESS=server.address)

    async def runs(*args: str) -> dict:
        return await rewind_json(cli, env, "runs", *args)

    async def ids(*args: str) -> list[str]:
        return [r["run_id"] for r in (await runs(*args))["runs"]]

    async def start(run_id: str, *args: str) -> tuple[int, str, str]:
        return await rewind(cli, env, "start", "--run-id", run_id, *args)

    async with user_workers() as workers:
        worker = workers(wdir, world.env(wdir, TEMPORAL_ADDRESS=server.address, REWIND_PRICES=json.dumps(prices)),
                         "--tool-modules", "runtools")
        await worker.wait_ready()
        # No run yet: an empty list is not an error.
        code, out, err = await rewind(cli, env, "runs")
        assert (code, out.strip(), err) == (0, "no runs match", ""), (code, out, err)

        def model(n: str) -> tuple[str, str]:
            return "--model", f"script:{names[n]}"

        # The runs that end, in order (their start times order the listing), then those that wait.
        for run_id, args, exit_code in [
            ("ok-1", ["--task", "tea?", *model("plain")], 0),
            ("clerk-1", ["--agent", "clerk", "--task", "tea?"], 0),
            ("toolerr-1", ["--task", "tea?", *model("toolerr")], 0),
            ("fail-400", ["--task", "tea?", *model("bad")], 1),
            ("pipe-ok", ["--pipeline", "report", "--input", '{"term": "tea"}'], 0),
            ("pipe-bug", ["--pipeline", "report", "--input", '{"term": "tea", "buggy": true}'], 1),
            ("paused-1", ["--task", "tea?", *model("steps"), "--max-steps", "1"], 3),
        ]:
            code, out, err = await start(run_id, *args, "--wait")
            assert code == exit_code, (run_id, code, out, err)
        # A fork and a rollback of ok-1 are branches of it, not runs: it stays one line, dated by its start.
        for args in (["fork", "ok-1", "--step", "1", "--branch", "alt", "--wait"],
                     ["rollback", "ok-1", "--step", "1", "--wait"]):
            code, _, err = await rewind(cli, env, *args)
            assert code == 0, (args, err)
        for run_id in ("cancel-1", "wait-1"):
            code, _, err = await start(run_id, "--task", "pay bob", *model("wire"))
            assert code == 0, err
        for run_id in ("cancel-1", "wait-1"):
            await until(f"{run_id} waits for its approval", lambda r=run_id: _waits(cli, env, r))
        code, _, err = await rewind(cli, env, "cancel", "cancel-1")
        assert code == 0, err
        # A run on a queue no worker polls: it never starts.
        code, _, err = await rewind(cli, world.env(cli, TEMPORAL_ADDRESS=server.address,
                                                   REWIND_TASK_QUEUE=f"nobody-{q}"),
                                    "start", "--run-id", "stuck-1", "--task", "tea?", *model("plain"))
        assert code == 0 and "no worker" in err, err

        # -- Temporal up ------------------------------------------------------------------
        expected_states = {"ok-1": "completed", "clerk-1": "completed", "toolerr-1": "completed",
                           "fail-400": "failed", "pipe-ok": "completed", "pipe-bug": "failed",
                           "paused-1": "paused", "cancel-1": "cancelled", "wait-1": "waiting", "stuck-1": "stuck"}

        async def settled() -> dict | None:  # until visibility has every state change
            listed = await runs()
            return listed if {r["run_id"]: r["state"] for r in listed["runs"]} == expected_states else None

        listed = await until("every run in its state", settled)
        rows = {r["run_id"]: r for r in listed["runs"]}
        assert listed["temporal"] is True and listed["more"] is False
        # Newest first: the order they were started in, reversed.
        order = ["ok-1", "clerk-1", "toolerr-1", "fail-400", "pipe-ok", "pipe-bug", "paused-1"]
        newest_first = [r["run_id"] for r in listed["runs"]]
        assert [r for r in newest_first if r in order] == order[::-1], newest_first
        assert newest_first.index("stuck-1") < newest_first.index("wait-1") < newest_first.index("paused-1")
        # The columns: what runs, steps and cost from the store, the reason of a failed or stuck run.
        assert (rows["clerk-1"]["agent"], rows["clerk-1"]["kind"]) == ("clerk", "agent")
        assert (rows["pipe-ok"]["agent"], rows["pipe-ok"]["kind"]) == ("report", "pipeline")
        assert rows["pipe-bug"]["agent"] == "report" and rows["ok-1"]["agent"] is None
        assert rows["ok-1"]["steps"] == 2 and rows["ok-1"]["cost_usd"] > 0 and rows["paused-1"]["steps"] == 1
        assert "this request is refused" in rows["fail-400"]["reason"], rows["fail-400"]
        assert "bug in broken(tea)" in rows["pipe-bug"]["reason"], rows["pipe-bug"]
        assert rows["stuck-1"]["reason"] == (f"no worker is polling task queue 'nobody-{q}'; start one "
                                             "(`rewind worker`) and the run goes on"), rows["stuck-1"]
        assert rows["stuck-1"]["steps"] == 0 and rows["stuck-1"]["task_queue"] == f"nobody-{q}"
        for run_id in ALL - {"fail-400", "pipe-bug", "stuck-1"}:
            assert rows[run_id]["reason"] is None, rows[run_id]
        code, text, _ = await rewind(cli, env, "runs")
        assert code == 0 and text.splitlines()[0].split() == ["RUN", "AGENT", "STARTED", "(UTC)", "STATE", "STEPS",
                                                             "COST", "REASON"], text
        line = next(line for line in text.splitlines() if line.startswith("stuck-1 "))
        assert "stuck" in line and "no worker is polling task queue" in line, text

        for state in ("running", "waiting", "paused", "completed", "failed", "cancelled", "stuck"):
            assert set(await ids("--state", state)) == {r for r, s in expected_states.items() if s == state}, state
        by_tool_errors = await runs("--tool-errors")
        assert {r["run_id"] for r in by_tool_errors["runs"]} == WITH_TOOL_ERRORS
        assert all(r["tool_errors"] == 1 and "broken failed after retries" in r["reason"]
                   for r in by_tool_errors["runs"]), by_tool_errors
        assert await ids("--tool-errors", "--state", "completed") == ["toolerr-1"]
        assert set(await ids("--agent", "report")) == {"pipe-ok", "pipe-bug"}
        assert await ids("--agent", "clerk") == ["clerk-1"]
        others = max(r["cost_usd"] for r in listed["runs"] if r["run_id"] != "clerk-1")
        threshold = f"{(others + rows['clerk-1']['cost_usd']) / 2:.9f}"
        assert await ids("--min-cost", threshold) == ["clerk-1"]
        # A time window, at the start of one of the runs (their own start times, no clock).
        cut = rows["pipe-ok"]["started"]
        since = await ids("--since", cut)
        before_cut = await ids("--until", cut)
        assert since == newest_first[: newest_first.index("pipe-ok") + 1]
        assert before_cut == newest_first[newest_first.index("pipe-ok") + 1:]
        assert set(await ids("--since", "1d")) == ALL and await ids("--until", "1d") == []
        # Pages: the last line names the next one, and the pages make up the whole list.
        pages, args = [], ["--limit", "4"]
        while True:
            page = await runs(*args)
            pages.append([r["run_id"] for r in page["runs"]])
            if not page["more"]:
                break
            args = ["--limit", "4", "--until", page["next_until"]]
        assert [len(p) for p in pages] == [4, 4, 2] and sum(pages, []) == newest_first, pages
        code, text, _ = await rewind(cli, env, "runs", "--limit", "2", "--state", "completed")
        assert text.splitlines()[-1].startswith("more runs started before ") and \
            "rewind runs --state completed --limit 2 --until " in text.splitlines()[-1], text
        # Usage errors: one line each.
        code, _, err = await rewind(cli, env, "runs", "--state", "lost")
        one_line_error(code, err, "--state", prefix="rewind runs: ")
        code, _, err = await rewind(cli, env, "runs", "--since", "yesterday")
        one_line_error(code, err, "'yesterday' is neither a duration", prefix="rewind runs: ")
        code, _, err = await rewind(cli, env, "runs", "--limit", "0")
        one_line_error(code, err, "--limit", prefix="rewind runs: ")
        code, _, err = await rewind(cli, env, "runs", "--since", "1h", "--until", "2h")
        one_line_error(code, err, "is not before --until", prefix="rewind: ")

    # -- Temporal down: the store alone ---------------------------------------------------
    server.kill()
    code, out, err = await rewind(cli, env, "runs", "--json")
    assert code == 0 and err.count("\n") == 1 and "Temporal is not reachable" in err and "store alone" in err, err
    listed = json.loads(out)
    assert listed["temporal"] is False
    down = {r["run_id"]: r for r in listed["runs"]}
    # stuck-1 never ran: nothing of it is in the store. The others say what their checkpoints can.
    assert set(down) == ALL - {"stuck-1"}
    assert [r for r in listed["runs"] if r["source"] != "store"] == []
    for state, runs_in in ENDED_IN_STORE.items():
        assert {r for r, row in down.items() if row["state"] == state} == runs_in
        assert set(await ids("--state", state)) == runs_in, state
    assert {r for r, row in down.items() if row["state"] == "unfinished"} == {"wait-1", "paused-1", "cancel-1"}
    # The same order, the same columns.
    assert [r["run_id"] for r in listed["runs"]] == [r for r in newest_first if r != "stuck-1"]
    for run_id, row in down.items():
        assert (row["agent"], row["steps"], row["cost_usd"]) == (rows[run_id]["agent"], rows[run_id]["steps"],
                                                                 rows[run_id]["cost_usd"]), run_id
    assert "this request is refused" in down["fail-400"]["reason"]
    assert {r["run_id"] for r in (await runs("--tool-errors"))["runs"]} == WITH_TOOL_ERRORS
    assert set(await ids("--agent", "report")) == {"pipe-ok", "pipe-bug"}
    assert await ids("--min-cost", threshold) == ["clerk-1"]
    assert await ids("--since", cut) == [r for r in since if r != "stuck-1"]
    assert await ids("--until", cut) == before_cut
    # States only Temporal knows: refused in one line, naming what to do.
    code, _, err = await rewind(cli, env, "runs", "--state", "waiting")
    one_line_error(code, err, "Temporal is not reachable", "--state waiting", "completed or failed", prefix="rewind: ")

    # Temporal back at the same address without these runs (a new database, as runs past the
    # namespace's retention): they are listed from the store, without a notice.
    fresh = DevServer.start(tmp_path / "fresh.db", port=server.port, ui_port=server.ui_port, headless=True,
                            fixed_ports_wait_s=30)
    try:
        code, out, err = await rewind(cli, env, "runs", "--json")
        assert code == 0 and err == "", err
        again = json.loads(out)
        assert again["temporal"] is True and again["runs"] == listed["runs"]
        assert set(await ids("--state", "failed")) == ENDED_IN_STORE["failed"]
        assert await ids("--state", "waiting") == [] and await ids("--state", "cancelled") == []
        assert await ids("--tool-errors", "--limit", "1") == ["pipe-bug"]
    finally:
        fresh.kill()


async def _waits(cli, env, run_id: str) -> bool:
    code, out, _ = await rewind(cli, env, "status", run_id, "--json")
    return code == 0 and bool(((json.loads(out).get("status") or {}).get("pending_approvals")))
