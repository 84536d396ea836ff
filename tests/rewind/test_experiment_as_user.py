"""`rewind experiment` as a user runs it: the CLI and workers as subprocesses in
empty folders, env only, a real dev server and the scripted model over HTTP.

From step 1 of a finished run, variants that change the model, the prompt and
the sampling seed, each repeated: every branch runs once, no call before the
fork point runs again, and the table's figures are the branches' checkpoints.
The budget stops an experiment midway and `experiment continue` finishes it;
a CLI and a worker killed mid-experiment lose nothing; a scorer that raises is
retried, then reported for its branch.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from as_user import one_line_error, rewind, rewind_json, user_workers

TOOLS = '''
import json, os
from pathlib import Path

from activities.tools.registry import tool


@tool
async def lookup(term: str) -> str:
    """Read-only; every execution is written down (slowly when LOOKUP_SLOW_S is set)."""
    import asyncio

    with open(os.environ["LOOKUP_LOG"], "a") as f:
        f.write(json.dumps({"term": term, "pid": os.getpid()}) + "\\n")
    await asyncio.sleep(float(os.environ.get("LOOKUP_SLOW_S") or 0))
    return f"about {term}"
'''

SCORER = '''
import os
from pathlib import Path


def length(checkpoint):
    """The final answer's length; raises on branch ...-b-1 (a buggy scorer)."""
    marker = Path(os.environ["SCORER_LOG"])
    with marker.open("a") as f:
        f.write(checkpoint.branch_id + "\\n")
    if checkpoint.branch_id.endswith("-b-1"):
        raise RuntimeError("scorer bug")
    return len(checkpoint.messages[-1].get("content") or "")
'''


def _scripts(world, tag: str) -> dict[str, str]:
    """A base run (lookup a, lookup b, answer), and per-model continuations after step 1."""
    base, a, b = f"base-{tag}", f"a-{tag}", f"b-{tag}"
    lookup = lambda term: {"tool_calls": [{"name": "lookup", "arguments": {"term": term}}]}  # noqa: E731
    world.model.add_script(base, [lookup("a"), lookup("b"), {"content": "base answer"}])
    # Model a: another lookup then an answer; with seed 2 the lookup is of "z" instead
    # (two repetitions that diverge in their tool calls, not in their answer).
    world.model.add_script(a, [lookup("a"), {**lookup("x"), "by_seed": {"2": lookup("z")}},
                               {"content": "The answer, from A."}])
    # Model b: answers at once, differently per seed.
    world.model.add_script(b, [lookup("a"), {"content": "B says yes", "by_seed": {"2": {"content": "B says no!"}}}])
    return {"base": base, "a": a, "b": b}


async def _finished_run(cli, env, model: str, run_id: str) -> None:
    done = await rewind_json(cli, env, "start", "--task", "compare", "--model", f"script:{model}",
                             "--run-id", run_id, "--wait")
    assert done["status"]["state"] == "completed", done


def _lookups(path: Path) -> list[str]:
    return [json.loads(line)["term"] for line in path.read_text().splitlines()] if path.exists() else []


async def test_three_variants_twice_each_compared_from_the_checkpoints(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    log = tmp_path / "lookups.jsonl"
    models = _scripts(world, world.queue)
    env = world.env(cli)
    run_id = "exp-" + world.queue
    prices = {f"script:{m}": {"input": 1.0, "output": 2.0} for m in models.values()}
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, LOOKUP_LOG=str(log), REWIND_PRICES=json.dumps(prices)),
                       "--tool-modules", "tools")
        await worker.wait_ready()
        await _finished_run(cli, env, models["base"], run_id)
        assert _lookups(log) == ["a", "b"]
        before = len(world.model.requests())
        (cli / "brief.txt").write_text("Answer in one word.")
        status = await rewind_json(
            cli, env, "experiment", run_id, "--step", "1", "--id", "t1",
            "--variant", f"a:model=script:{models['a']},seed=1",
            "--variant", f"b:model=script:{models['b']},seed=1",
            "--variant", f"brief:model=script:{models['a']},system_prompt=@brief.txt,tone=formal",
            "--repeat", "2", "--wait")
    assert status["state"] == "completed"
    branches = {b["branch"]: b for b in status["branches"]}
    assert sorted(branches) == sorted(f"exp-t1-{v}-{k}" for v in ("a", "b", "brief") for k in (1, 2))
    assert all(b["state"] == "completed" for b in branches.values())

    # Nothing before the fork point ran again: lookup "a" (step 1) once, in the base run.
    terms = _lookups(log)
    assert terms.count("a") == 1 and terms.count("b") == 1
    assert sorted(terms[2:]) == sorted(["x", "z", "x", "x"])  # a-1 x, a-2 z, brief-1 x, brief-2 x
    # Each branch called the model once per own step, no more.
    new = world.model.requests()[before:]
    assert len([r for r in new if r["status"] == 200]) == 2 * (2 + 1 + 2)  # own steps: a 2, b 1, brief 2

    reader = world.folder("reader")
    renv = world.env(reader)
    table = await rewind_json(reader, renv, "experiment", "show", "t1")
    rows = {r["variant"]: r for r in table["rows"]}
    for figures in table["branches"]:
        last = await rewind_json(reader, renv, "show", f"{run_id}:{figures['branch']}:{1 + figures['steps']}")
        own = last["ledger"]["branch"]
        assert figures["total_tokens"] == own["total_tokens"] > 0
        assert abs(figures["cost_usd"] - own["cost_usd"]) < 1e-12
        assert figures["final_answer"] == last["messages"][-1]["content"]
    for name, row in rows.items():
        mine = [f for f in table["branches"] if f["variant"] == name]
        assert row["total_tokens"]["mean"] == statistics.fmean(f["total_tokens"] for f in mine)
        assert row["steps"]["values"] == [f["steps"] for f in mine]
    # Agreement, computed per variant: a's repetitions diverge in their calls, not their answers;
    # b's in their answers; brief's (no seed) in nothing.
    assert (rows["a"]["distinct_tool_sequences"], rows["a"]["sequence_agreement"], rows["a"]["answer_agreement"]) == (2, 1, 2)
    assert (rows["b"]["distinct_tool_sequences"], rows["b"]["sequence_agreement"], rows["b"]["answer_agreement"]) == (1, 2, 1)
    assert (rows["brief"]["sequence_agreement"], rows["brief"]["answer_agreement"]) == (2, 2)
    assert rows["a"]["tool_calls"]["lookup"]["mean"] == 1.0  # its own lookup, not the inherited one
    assert rows["b"]["steps"]["mean"] == 1 and rows["a"]["steps"]["mean"] == 2
    assert rows["brief"]["settings"]["variables"] == {"tone": "formal"}
    assert rows["brief"]["settings"]["system_prompt"] == "Answer in one word."
    # The prompt reached the brief branches' model calls.
    brief_calls = [r for r in new if any(m.get("content") == "Answer in one word." for m in r["messages"])]
    assert len(brief_calls) == 4

    code, text, _ = await rewind(reader, renv, "experiment", "show", "t1", "--markdown")
    assert code == 0 and text.startswith("Experiment t1") and "| a | 2 |" in text
    code, text, _ = await rewind(reader, renv, "diff", run_id, "exp-t1-a-1", "exp-t1-b-1")
    assert code == 0
    # The run viewer groups the experiment's branches under one heading (a real page in Chromium).
    from test_viewer_in_browser import _attrs, _browse, _chromium

    code, _, err = await rewind(reader, renv, "view", run_id, "--out", "run.html")
    assert code == 0, err
    chromium = _chromium()
    if chromium is not None or os.environ.get("REWIND_TEST_REQUIRE_BROWSER") == "1":
        assert chromium is not None, "REWIND_TEST_REQUIRE_BROWSER=1 but chromium is not installed"
        dom = await _browse(chromium, (reader / "run.html").as_uri(), "--dump-dom", "--virtual-time-budget=5000")
        groups = _attrs(dom, "tr", "experiment-group")
        assert [g["data-experiment"] for g in groups] == ["t1"]
        assert dom.count("variant a #") == 2 and dom.count("variant brief #") == 2
    # Bad input: one line each.
    code, _, err = await rewind(reader, renv, "experiment", "show", "nope")
    one_line_error(code, err, "no experiment 'nope'", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "experiment", run_id, "--step", "1", "--variant", "bad name:model=x")
    one_line_error(code, err, "variant name", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "experiment", run_id, "--step", "99", "--variant", "a:model=x")
    one_line_error(code, err, prefix="rewind: ")


async def _until(cli, env, experiment_id: str, check, timeout_s: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        code, out, err = await rewind(cli, env, "experiment", "status", experiment_id, "--json")
        status = json.loads(out) if code == 0 else {"state": None, "branches": [], "error": err}
        if (code == 0 and check(status)) or time.monotonic() > deadline:
            return status
        await asyncio.sleep(0.3)


async def test_the_budget_stops_an_experiment_midway_and_continue_finishes_it(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    log = tmp_path / "lookups.jsonl"
    models = _scripts(world, world.queue)
    env = world.env(cli)
    run_id = "budget-" + world.queue
    prices = {f"script:{m}": {"input": 1000.0, "output": 1000.0} for m in models.values()}
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, LOOKUP_LOG=str(log), REWIND_PRICES=json.dumps(prices)),
                       "--tool-modules", "tools")
        await worker.wait_ready()
        await _finished_run(cli, env, models["base"], run_id)
        step1 = (await rewind_json(cli, env, "show", f"{run_id}:main:1"))["ledger"]["step"]["cost_usd"]
        assert step1 > 0
        before = len(world.model.requests())
        # Two branches of two own steps each, one at a time, and money for about three steps in all.
        code, out, err = await rewind(cli, env, "experiment", run_id, "--step", "1", "--id", "t2",
                                      "--variant", f"a:model=script:{models['a']}", "--repeat", "2",
                                      "--concurrency", "1", "--max-cost", f"{3.2 * step1:.9f}", "--wait", "--json")
        assert code == 3, (code, err)
        paused = json.loads(out)
        assert paused["state"] == "budget_exceeded"
        # Each branch paid its first own step and paused before its second (its share of the budget);
        # the second started when the first paused (a paused branch holds no place in --concurrency).
        assert [b["state"] for b in paused["branches"]] == ["budget_exceeded", "budget_exceeded"]
        assert all(b["final_step"] == 2 for b in paused["branches"])
        assert paused["spent_usd"] <= paused["max_cost_usd"] + 1e-12
        spent_then = len([r for r in world.model.requests()[before:] if r["status"] == 200])
        assert spent_then == 2  # stopped midway: one of each branch's two steps ran

        code, _, err = await rewind(cli, env, "experiment", "continue", "t2", "--max-cost", f"{step1 / 10:.9f}")
        one_line_error(code, err, "is no raise", prefix="rewind: ")
        done = await rewind_json(cli, env, "experiment", "continue", "t2", "--max-cost", "1000", "--wait")
        assert done["state"] == "completed", done
        assert all(b["state"] == "completed" for b in done["branches"])
    # Each own step called the model once: the paused branch went on, it did not start over.
    assert len([r for r in world.model.requests()[before:] if r["status"] == 200]) == 2 * 2
    assert _lookups(log).count("a") == 1


async def test_a_killed_cli_and_worker_lose_nothing_of_an_experiment(world, tmp_path) -> None:
    dirs = [world.folder(f"w{i}") for i in range(3)]
    cli = world.folder("cli")
    for d in dirs:
        (d / "tools.py").write_text(TOOLS)
    log = tmp_path / "lookups.jsonl"
    models = _scripts(world, world.queue)
    env = world.env(cli)
    run_id = "crash-" + world.queue
    async with user_workers() as start:
        fast = start(dirs[0], world.env(dirs[0], LOOKUP_LOG=str(log)), "--tool-modules", "tools")
        await fast.wait_ready()
        await _finished_run(cli, env, models["base"], run_id)
        await fast.stop_async()
        slow_env = {d: world.env(d, LOOKUP_LOG=str(log), LOOKUP_SLOW_S="2") for d in dirs[1:]}
        first = start(dirs[1], slow_env[dirs[1]], "--tool-modules", "tools")
        await first.wait_ready()
        waiting = await asyncio.create_subprocess_exec(
            str(Path(__import__("sys").executable).parent / "rewind"), "experiment", run_id, "--step", "1",
            "--id", "t3", "--variant", f"a:model=script:{models['a']}", "--repeat", "3", "--wait",
            cwd=cli, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        status = await _until(cli, env, "t3", lambda s: sum(b["state"] == "running" for b in s["branches"]) == 3)
        assert sum(b["state"] == "running" for b in status["branches"]) == 3, status
        await asyncio.sleep(0.5)  # the branches are in their slow lookups
        waiting.kill()
        await waiting.wait()
        first.kill()
        second = start(dirs[2], slow_env[dirs[2]], "--tool-modules", "tools")
        await second.wait_ready()
        done = await _until(cli, env, "t3", lambda s: s["state"] == "completed", timeout_s=150)
    assert done["state"] == "completed", done
    assert all(b["state"] == "completed" for b in done["branches"])
    table = await rewind_json(cli, env, "experiment", "show", "t3")
    assert [f["steps"] for f in table["branches"]] == [2, 2, 2]
    # Each branch is one workflow, started once; its own steps are stored once each.
    tree = await rewind_json(cli, env, "tree", run_id)
    for k in (1, 2, 3):
        rows = tree["branches"][f"exp-t3-a-{k}"]
        assert [r["step_index"] for r in rows] == [2, 3]
    assert _lookups(log).count("a") == 1  # before the fork point: never again


async def test_a_scorer_that_raises_is_retried_then_reported_for_its_branch(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    (wdir / "scoring.py").write_text(SCORER)
    log, scored = tmp_path / "lookups.jsonl", tmp_path / "scored.txt"
    models = _scripts(world, world.queue)
    env = world.env(cli)
    run_id = "score-" + world.queue
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, LOOKUP_LOG=str(log), SCORER_LOG=str(scored)), "--tool-modules", "tools")
        await worker.wait_ready()
        await _finished_run(cli, env, models["base"], run_id)
        done = await rewind_json(cli, env, "experiment", run_id, "--step", "1", "--id", "t4",
                                 "--variant", f"a:model=script:{models['a']}", "--variant",
                                 f"b:model=script:{models['b']},seed=1", "--repeat", "2",
                                 "--score", "scoring:length", "--wait")
        assert done["state"] == "completed"
        by = {b["branch"]: b for b in done["branches"]}
        assert by["exp-t4-b-1"]["score"] is None and "scorer bug" in by["exp-t4-b-1"]["score_error"]
        assert by["exp-t4-b-2"]["score"] == len("B says no!")
        assert by["exp-t4-a-1"]["score"] == by["exp-t4-a-2"]["score"] == len("The answer, from A.")
        calls = scored.read_text().split()
        assert calls.count("exp-t4-b-1") == 3 and calls.count("exp-t4-a-1") == 1  # retried, then given up
        # `show --score` with the same scorer reads the same scores; nothing is scored again.
        table = await rewind_json(cli, env, "experiment", "show", "t4", "--score", "scoring:length")
        rows = {r["variant"]: r for r in table["rows"]}
        assert rows["a"]["mean_score"] == len("The answer, from A.") and rows["b"]["score_errors"] == 1
        assert scored.read_text().split() == calls
        code, _, err = await rewind(cli, env, "experiment", "show", "t4", "--score", "no_module_colon")
        one_line_error(code, err, "must be module:function", prefix="rewind: ")
