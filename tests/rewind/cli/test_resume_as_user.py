"""`rewind resume` as a user runs it after fixing a tool: runs made with the CLI and a
worker as subprocesses (env-only configuration, empty folders, a Temporal dev server of
this test's own, the scripted model over HTTP), every tool execution counted in a file.

    err-a    completes with a tool error: step 1 asks lookup(x) and fetch_page(b), which
             raises on every attempt (the bug); step 2 asks fetch_page(c) and save(a)
             (a read-only call and a side effect that succeed after the failed call)
    fail-b   the same shape (lookup(y), fetch_page(b); fetch_page(d), save(b)), then its
             provider refuses step 3 (a 400): the run fails
    fail-c   lookup(q), then the provider refuses step 2: fails, no tool error
    ok-d     lookup(z), then an answer: nothing to resume
    pipe-e   pipeline `digest`: lookup(e), fetch_page(b) (fails; the code goes on), fetch_page(e),
             save(e): completes with a tool error
    pipe-f   the same pipeline, whose code raises on the failed call: fails

The tool is fixed (the module edited, the worker restarted) and fail-b's provider recovers;
a --dry-run starts nothing; `rewind resume --tool-errors --since 1h --yes` resumes err-a,
fail-b and both pipelines; `--failed` resumes fail-c while its provider still refuses (that
resume fails too, and a second `--failed` skips it: already resumed), then `rewind resume
fail-c` once it answers. Every run then completes, the only executions added are the failed
calls' (fetch_page(b) once per run), and a second resume starts nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from as_user import one_line_error, rewind, rewind_json, until, user_workers
from rewind.temporal.dev_server import DevServer

TOOLS = '''
from pathlib import Path

from rewind import ToolCallFailed, pipeline, tool

BUGGY = True
CALLS = Path(__file__).with_name("calls.log")


def _count(name: str, arg: str) -> None:
    with CALLS.open("a") as f:
        f.write(f"{name}:{arg}\\n")


@tool(max_attempts=2)
async def fetch_page(page: str) -> str:
    """A page of the site (read-only)."""
    _count("fetch_page", page)
    if BUGGY and page == "b":
        raise RuntimeError(f"bug in fetch_page({page})")
    return f"page {page}"


@tool
async def lookup(term: str) -> str:
    """Facts about a term (read-only)."""
    _count("lookup", term)
    return f"about {term}"


@tool(side_effects=True)
async def save(name: str) -> str:
    """Save a report (a side effect)."""
    _count("save", name)
    return f"saved {name}"


@pipeline
async def digest(ctx, topic: str, careful: bool) -> str:
    facts = await ctx.tool("lookup", term=topic)
    try:
        page = await ctx.tool("fetch_page", page="b")
    except ToolCallFailed:
        if not careful:
            raise
        page = "no page"
    more = await ctx.tool("fetch_page", page=topic)
    await ctx.tool("save", name=topic)
    return f"{facts}; {page}; {more}"
'''


def _calls(*pairs: tuple[str, dict]) -> dict:
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def _shape(first: str, mid: str, name: str) -> list[dict]:
    return [_calls(("lookup", {"term": first}), ("fetch_page", {"page": "b"})),
            _calls(("fetch_page", {"page": mid}), ("save", {"name": name}))]


REFUSED = {"error": {"status": 400, "message": "provider outage: request refused"}}




def _counted(path: Path) -> Counter:
    return Counter(path.read_text().split()) if path.exists() else Counter()


async def test_resume_reruns_only_the_failed_calls_and_nothing_twice(world, tmp_path) -> None:
    server = DevServer.start(tmp_path / "temporal.db", headless=True)
    try:
        await _scenario(world, server)
    finally:
        server.kill()


async def _scenario(world, server: DevServer) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    names = {n: f"{n}-{world.queue}" for n in ("a", "b", "c", "d")}
    (wdir / "sitetools.py").write_text(TOOLS)
    world.model.add_script(names["a"], [*_shape("x", "c", "a"), {"content": "done a"}])
    world.model.add_script(names["b"], [*_shape("y", "d", "b"), REFUSED])
    world.model.add_script(names["c"], [_calls(("lookup", {"term": "q"})), REFUSED])
    world.model.add_script(names["d"], [_calls(("lookup", {"term": "z"})), {"content": "done d"}])
    env = world.env(cli, TEMPORAL_ADDRESS=server.address)
    wenv = world.env(wdir, TEMPORAL_ADDRESS=server.address)
    calls = wdir / "calls.log"

    async def states() -> dict[str, str]:
        return {r["run_id"]: r["state"] for r in (await rewind_json(cli, env, "runs"))["runs"]}

    async with user_workers() as workers:
        worker = workers(wdir, wenv, "--tool-modules", "sitetools")
        await worker.wait_ready()
        for run_id, script, exit_code in [("err-a", "a", 0), ("fail-b", "b", 1), ("fail-c", "c", 1), ("ok-d", "d", 0)]:
            code, out, err = await rewind(cli, env, "start", "--run-id", run_id, "--task", "read the site",
                                          "--model", f"script:{names[script]}", "--wait")
            assert code == exit_code, (run_id, code, out, err)
        for run_id, careful, exit_code in [("pipe-e", "true", 0), ("pipe-f", "false", 1)]:
            topic = run_id[-1]
            code, out, err = await rewind(cli, env, "start", "--run-id", run_id, "--pipeline", "digest", "--input",
                                          f'{{"topic": "{topic}", "careful": {careful}}}', "--wait")
            assert code == exit_code, (run_id, code, out, err)
        before = _counted(calls)

        def model_calls(script: str) -> int:
            return sum(1 for r in world.model.requests() if r.get("model") == f"script:{names[script]}")

        assert model_calls("a") == 3, world.model.requests()[-1]
        assert before == Counter({"fetch_page:b": 8, "lookup:x": 1, "fetch_page:c": 1, "save:a": 1, "lookup:y": 1,
                                  "fetch_page:d": 1, "save:b": 1, "lookup:q": 1, "lookup:z": 1, "lookup:e": 1,
                                  "fetch_page:e": 1, "save:e": 1, "lookup:f": 1}), before

        # Nothing is resumed without saying so, and a run that broke nothing is refused in one line.
        code, _, err = await rewind(cli, env, "resume", "--tool-errors", "--since", "1h")
        one_line_error(code, err, "4 run(s) to resume", "--yes")
        code, _, err = await rewind(cli, env, "resume", "ok-d")
        one_line_error(code, err, "completed", "nothing to resume")
        code, _, err = await rewind(cli, env, "resume", "ok-d", "--failed")
        one_line_error(code, err, "not both")
        code, _, err = await rewind(cli, env, "resume")
        one_line_error(code, err, "a RUN, or --failed / --tool-errors")
        code, _, err = await rewind(cli, env, "resume", "no-such-run")
        one_line_error(code, err, "no run 'no-such-run' with a branch 'main'", "`rewind runs`")

        # The fix: the module edited, the worker restarted; the provider answers again.
        await worker.stop_async()
        (wdir / "sitetools.py").write_text(TOOLS.replace("BUGGY = True", "BUGGY = False"))
        worker = workers(wdir, wenv, "--tool-modules", "sitetools")
        await worker.wait_ready()
        world.model.add_script(names["b"], [*_shape("y", "d", "b"), {"content": "done b"}])

        # --dry-run lists what would be resumed, from where, what runs again; it starts nothing.
        dry = await rewind_json(cli, env, "resume", "--tool-errors", "--since", "1h", "--dry-run")
        planned = {o["run_id"]: o for o in dry["outcomes"]}
        assert set(planned) == {"err-a", "fail-b", "pipe-e", "pipe-f"}, dry
        assert all(o["outcome"] == "would resume" for o in planned.values()), dry
        assert "from step 0" in planned["err-a"]["detail"] and "fetch_page" in planned["err-a"]["detail"], dry
        assert _counted(calls) == before and (await states())["err-a"] == "completed"

        # Every run with a tool error, then every failed one, resumed and waited for.
        report = await rewind_json(cli, env, "resume", "--tool-errors", "--since", "1h", "--yes", "--wait")
        outcomes = {o["run_id"]: o for o in report["outcomes"]}
        assert set(outcomes) == {"err-a", "fail-b", "pipe-e", "pipe-f"}, report
        for run_id, o in outcomes.items():
            assert (o["outcome"], o["revision"], o["ended"]) == ("resumed", "main.r1", "completed"), (run_id, report)
        # err-a's model call of step 1 (it asked for the failed call) is not made again; those of
        # steps 2 and 3 are, since the conversation now holds the page instead of the error.
        assert model_calls("a") == 5
        # fail-c's provider still refuses: its resume fails too, and a second --failed skips it.
        code, text, err = await rewind(cli, env, "resume", "--failed", "--since", "1h", "--yes", "--wait")
        assert code == 1, (text, err)
        assert text.splitlines()[0].split() == ["RUN", "OUTCOME", "DETAIL"], text
        lines = text.splitlines()
        assert len(lines) == 3 and lines[1].startswith("fail-c") and "resumed" in lines[1], text
        assert "failed at step 2; from step 1" in lines[1] and "provider outage" in lines[1], text
        assert lines[-1] == "1 resumed", text
        await until("fail-c failed again", lambda: _state_is(states, "fail-c", "failed"))
        code, text, err = await rewind(cli, env, "resume", "--failed", "--since", "1h", "--yes")
        assert code == 0 and "already resumed: main.r1 resumed main.r0" in text, (text, err)
        assert text.splitlines()[-1] == "1 already resumed", text
        # Recovered: a run asked for by name is resumed again (its newest revision, main.r1).
        world.model.add_script(names["c"], [_calls(("lookup", {"term": "q"})), {"content": "done c"}])
        code, text, err = await rewind(cli, env, "resume", "fail-c", "--wait")
        assert code == 0 and "resuming run fail-c in main.r2: main.r1 failed at step 2; from step 1" in text, (text, err)

        # Only the failed calls ran again: fetch_page(b) once per resumed run; no read-only call or
        # effect that had succeeded ran twice, and fail-c (its model call failed) ran no tool.
        # pipe-f's calls after the failed one never ran before: they run now, once.
        first_time = Counter({"fetch_page:f": 1, "save:f": 1})
        rerun = _counted(calls) - before - first_time
        assert rerun == Counter({"fetch_page:b": 4}), rerun
        assert await until("the resumed runs completed", lambda: _all_completed(states))
        for run_id, answer in (("err-a", "done a"), ("fail-b", "done b"), ("fail-c", "done c")):
            status = await rewind_json(cli, env, "status", run_id)
            assert (status["state"], status["status"]["final_answer"]) == ("completed", answer), status
        for run_id in ("pipe-e", "pipe-f"):
            result = (await rewind_json(cli, env, "status", run_id))["status"]["final_answer"]
            topic = run_id[-1]
            assert result == f"about {topic}; page b; page {topic}", (run_id, result)
        # The revision records what it resumed; the old steps are kept, invalidated.
        code, tree, _ = await rewind(cli, env, "tree", "err-a")
        assert code == 0 and "main.r1" in tree, tree
        assert "(resumed: " in tree and " again)" in tree, tree

        # A second resume does nothing: the runs no longer match, and nothing ran.
        for flag in ("--tool-errors", "--failed"):
            code, text, err = await rewind(cli, env, "resume", flag, "--since", "1h", "--yes")
            assert (code, text.strip()) == (0, "no runs to resume"), (flag, code, text, err)
        # One run asked for by name again: its newest revision ended well, nothing failed in it.
        code, _, err = await rewind(cli, env, "resume", "err-a")
        one_line_error(code, err, "nothing to resume")
        assert _counted(calls) - before - first_time == rerun


async def _state_is(states, run_id: str, state: str) -> bool:
    return (await states()).get(run_id) == state


async def _all_completed(states) -> bool:
    now = await states()
    return all(now.get(r) == "completed" for r in ("err-a", "fail-b", "fail-c", "ok-d", "pipe-e", "pipe-f"))
