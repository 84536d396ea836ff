"""Pipelines as a user meets them: your own orchestration code (`@pipeline` in a tools
module) run as a durable run by `rewind worker`, started with `rewind start --pipeline`,
with the worker killed in the middle of a fan-out, structured outputs repaired, a
pipeline that reads the clock itself, and code that changed under a run. Tools count
their executions in files; the scripted model answers by call label."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

from as_user import UserWorker, empty_dir, one_line_error, rewind, rewind_json, user_env
from rewind.temporal.dev_server import free_port

RESEARCH = '''
import asyncio
import os
from pathlib import Path

from pydantic import BaseModel

from rewind import OutputInvalid, pipeline, tool

LOG = Path({log!r})
RELEASE = Path({release!r})
SLOW = {slow!r}


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool
async def search_company(company: str) -> str:
    """What the web says about one company."""
    count(f"start {{company}}")
    while company in SLOW and not RELEASE.exists():
        await asyncio.sleep(0.05)
    count(f"done {{company}}")
    return f"{{company}}: revenue up"


@tool(side_effects=True)
async def save_report(text: str) -> str:
    """Save the report (a side effect)."""
    count("save")
    return "saved"


class Verdict(BaseModel):
    ok: bool
    missing: list[str] = []


@pipeline
async def competitive_report(ctx, companies: list[str]) -> str:
    """Research companies in parallel, synthesize, validate, save."""
    plan = await ctx.llm("plan", system="You plan research.", user="Plan: " + ", ".join(companies))
    found = await asyncio.gather(*(ctx.tool("search_company", company=c) for c in companies))
    ctx.state["found"] = len(found)
    draft = await ctx.llm("synthesize", system="You write reports.", user=plan + "\\n" + "\\n".join(found))
    try:
        verdict = await ctx.llm("validate", user="Check: " + draft, output=Verdict, repairs={repairs})
        ctx.state["verdict"] = verdict.ok
    except OutputInvalid as exc:
        ctx.state["verdict"] = "invalid"
        return "no verdict: " + str(exc)
    await ctx.tool("save_report", text=draft)
    return draft
'''

SCRIPT = {
    "plan": [{"content": "search each company"}],
    "synthesize": [{"content": "DRAFT: all five grow"}],
    "validate": [{"content": '{"ok": true, "missing": []}'}],
}
COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Hooli"]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def write_module(folder: Path, tmp_path: Path, *, slow: tuple[str, ...] = (), repairs: int = 2,
                 source: str = RESEARCH) -> tuple[Path, Path]:
    log, release = tmp_path / f"calls-{uuid.uuid4().hex[:6]}.txt", tmp_path / f"release-{uuid.uuid4().hex[:6]}"
    (folder / "research.py").write_text(source.format(log=str(log), release=str(release), slow=list(slow),
                                                      repairs=repairs))
    return log, release


def script(model, by_label: dict) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    model.add_script(name, by_label)
    return f"script:{name}"


def labels_asked(model, name: str) -> list[str]:
    return [r.get("label") for r in model.requests() if r.get("model") == name and r.get("status") == 200]


async def tree_labels(cli: Path, env: dict, run_id: str) -> list[str]:
    """The labels of the run's main branch, step by step (`rewind tree --json`)."""
    tree = await rewind_json(cli, env, "tree", run_id)
    rows = tree["branches"]["main"]
    assert [r["step_index"] for r in rows] == list(range(len(rows))), rows
    return [r["step_label"] for r in rows]


async def wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def wait_state(cli: Path, env: dict, run_id: str, states: tuple[str, ...], timeout_s: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        view = await rewind_json(cli, env, "status", run_id)
        # The run says "completed" while it writes its last checkpoints: wait for its workflow to end.
        if view["state"] in states and view["workflow_status"] != "running":
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {view['state']} after {timeout_s:.0f}s: {view}")
        await asyncio.sleep(0.25)


async def test_a_killed_worker_costs_no_completed_call_of_a_pipeline(world, tmp_path):
    folder = world.folder("research")
    log, release = write_module(folder, tmp_path, slow=("Umbrella", "Hooli"))
    env = world.env(folder, REWIND_SCRIPTS=None)
    model = script(world.model, SCRIPT)
    cli = world.folder("cli")
    cli_env = world.env(cli)
    first = UserWorker(folder / "w1", {**env, "PYTHONPATH": str(folder)}, "--tool-modules", "research")
    try:
        await first.wait_ready()
        started = await rewind_json(cli, cli_env, "start", "--pipeline", "competitive_report", "--input",
                                    json.dumps({"companies": COMPANIES}), "--model", model, "--run-id", "pipe-crash")
        assert started["run_id"] == "pipe-crash", started
        # Three searches done, two running: the machine dies.
        await wait_for(lambda: sum(x.startswith("done") for x in lines(log)) == 3
                       and sum(x.startswith("start") for x in lines(log)) == 5, "3 of 5 searches")
        # `rewind status` says which calls of the gather completed, at which step, and which run.
        view = await _until(cli, cli_env, "pipe-crash", lambda v: [c["state"] for c in v["status"]["pipeline_calls"]]
                            == ["completed"] * 3 + ["running"] * 2)
        assert [c["position"] for c in view["status"]["pipeline_calls"]] == [1, 2, 3, 4, 5], view
        code, out, err = await rewind(cli, cli_env, "status", "pipe-crash")
        assert code == 0, err
        ended = next(line for line in out.splitlines() if line.lstrip().startswith("ended"))
        assert re.fullmatch(r"\s+ended\s+call 1 search_company \(step \d\), call 2 search_company \(step \d\), "
                            r"call 3 search_company \(step \d\)", ended), out
        first.kill()
    finally:
        first.stop()
    release.touch()
    with UserWorker(folder / "w2", {**env, "PYTHONPATH": str(folder)}, "--tool-modules", "research") as second:
        await second.wait_ready()
        view = await wait_state(cli, cli_env, "pipe-crash", ("completed", "failed"))
    assert view["state"] == "completed", view
    assert view["status"]["final_answer"] == "DRAFT: all five grow"
    done = [x for x in lines(log) if x.startswith("done")]
    assert sorted(done) == sorted(f"done {c}" for c in COMPANIES), lines(log)  # each search completed once
    assert lines(log).count("save") == 1
    assert labels_asked(world.model, model) == ["plan", "synthesize", "validate"]  # no model call twice

    labels = await tree_labels(cli, cli_env, "pipe-crash")
    assert labels[0] == "start" and labels[-1] == "result", labels
    assert sorted(labels[1:-1]) == sorted(["plan", *["search_company"] * 5, "synthesize", "validate", "save_report"])
    validate_step = labels.index("validate")
    shown = await rewind_json(cli, cli_env, "show", f"pipe-crash:main:{validate_step}")
    assert shown["pipeline"]["label"] == "validate" and shown["pipeline"]["kind"] == "llm", shown["pipeline"]
    assert shown["pipeline"]["position"] == 7  # plan 0, five searches 1-5, synthesize 6, then this one
    assert shown["agent_variables"] == {"found": 5}  # as it was when the call completed
    saved = await rewind_json(cli, cli_env, "show", f"pipe-crash:main:{labels.index('save_report')}")
    assert saved["agent_variables"] == {"found": 5, "verdict": True}


async def test_structured_output_is_repaired_then_given_up_on_with_a_typed_error(world, tmp_path):
    folder = world.folder("research")
    bad_twice = {**SCRIPT, "validate": [{"content": "looks fine to me"}, {"content": '{"ok": "maybe"}'},
                                       {"content": '{"ok": true}'}]}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    for repairs, run_id in ((2, "pipe-repaired"), (1, "pipe-unrepaired")):
        log, release = write_module(folder, tmp_path, repairs=repairs)
        model = script(world.model, bad_twice)
        env = {**world.env(folder), "PYTHONPATH": str(folder)}
        with UserWorker(folder / f"w-{run_id}", env, "--tool-modules", "research") as worker:
            await worker.wait_ready()
            run = await rewind_json(cli, cli_env, "start", "--pipeline", "competitive_report", "--input",
                                    json.dumps({"companies": ["Acme"]}), "--model", model, "--run-id", run_id,
                                    "--wait")
        assert run["status"]["state"] == "completed", run
        labels = await tree_labels(cli, cli_env, run_id)
        if repairs == 2:
            assert run["status"]["final_answer"] == "DRAFT: all five grow"
            assert labels.count("validate") == 1 and "validate (repair 2)" in labels, labels
            repaired = await rewind_json(cli, cli_env, "show", f"{run_id}:main:{labels.index('validate (repair 1)')}")
            assert "ok: Input should be a valid boolean" in repaired["pipeline"]["invalid"], repaired["pipeline"]
            assert lines(log).count("save") == 1
        else:
            assert run["status"]["final_answer"].startswith("no verdict: model call 'validate': the answer is not "
                                                            "a valid Verdict after 1 repair(s)"), run
            assert "validate (repair 2)" not in labels and lines(log).count("save") == 0


CLOCK = '''
import time

from rewind import pipeline


@pipeline
async def stamped(ctx, note: str) -> str:
    started = time.time()
    return f"{note} at {started}"


@pipeline
async def reads_a_file(ctx, path: str) -> str:
    with open(path) as f:
        return f.read()


@pipeline
async def returns_a_set(ctx) -> str:
    return {1, 2}


@pipeline
async def keeps_an_object(ctx) -> str:
    ctx.state["when"] = object()
    return await ctx.llm("hello", user="hi")
'''


async def finished(cli: Path, env: dict, *args: str) -> dict:
    """`rewind start ... --wait --json` of a run that ends (exit 1 when it failed): its document."""
    code, out, err = await rewind(cli, env, *args, "--wait", "--json")
    assert code in (0, 1) and out.strip(), (code, out, err)
    return json.loads(out)


async def test_a_pipeline_that_reads_the_clock_or_a_file_itself_fails_with_the_fix(world, tmp_path):
    folder = world.folder("clock")
    (folder / "clocked.py").write_text(CLOCK)
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "clocked") as worker:
        await worker.wait_ready()
        run = await finished(cli, cli_env, "start", "--pipeline", "stamped", "--input", '{"note": "hi"}',
                             "--run-id", "pipe-clock")
        assert run["state"] == "failed", run
        error = run["error"]
        assert "pipeline stamped called time.time in stamped (clocked.py:9)" in error, error
        assert "use ctx.now()" in error
        # Resumed, it fails again: its new revision's failure is a step after the start it continues from.
        code, out, err = await rewind(cli, cli_env, "resume", "pipe-clock", "--wait")
        assert code == 1 and "called time.time" in err, out + err
        tree = await rewind_json(cli, cli_env, "tree", "pipe-clock")
        revision = [b for b in tree["branches"] if b != "main"]
        assert [(r["step_index"], r["step_label"]) for r in tree["branches"][revision[0]]] == [(1, "failed")], tree
        run = await finished(cli, cli_env, "start", "--pipeline", "reads_a_file", "--input",
                             json.dumps({"path": str(folder / "clocked.py")}), "--run-id", "pipe-file")
        assert run["state"] == "failed", run
        assert "pipeline reads_a_file called open in reads_a_file (clocked.py:15)" in run["error"], run
        # A pipeline that is not there, and input that does not fit: one line each, before any call.
        run = await finished(cli, cli_env, "start", "--pipeline", "stamped", "--input", '{"note": 3}',
                             "--run-id", "pipe-bad-input")
        assert "the input of pipeline 'stamped' is invalid: note: Input should be a valid string" in run["error"], run
        code, out, err = await rewind(cli, cli_env, "start", "--pipeline", "stamped", "--input", "{not json")
        one_line_error(code, err, "--input")
        # What is not JSON cannot be a run's answer or state: the run fails, saying so.
        run = await finished(cli, cli_env, "start", "--pipeline", "returns_a_set", "--run-id", "pipe-set")
        assert run["state"] == "failed" and "the pipeline returned a set, which is not JSON" in run["error"], run
        run = await finished(cli, cli_env, "start", "--pipeline", "keeps_an_object", "--run-id", "pipe-object")
        assert run["state"] == "failed" and "ctx.state holds a value that is not JSON" in run["error"], run


CHANGING = '''
import asyncio
from pathlib import Path

from rewind import pipeline, tool

RELEASE = Path({release!r})


@tool
async def wait_here(n: int) -> int:
    """Waits until released."""
    while not RELEASE.exists():
        await asyncio.sleep(0.05)
    return n


@tool(side_effects=True)
async def notify(who: str) -> str:
    """Tells someone (a side effect, counted)."""
    with open(str(RELEASE) + ".notified", "a") as f:
        f.write(who + "\\n")
    return "told " + who


@pipeline
async def changing(ctx) -> str:
    await ctx.tool("notify", who="ann")
    first = await ctx.llm("{label}", user="hello")
    await ctx.tool("wait_here", n=1)
    {extra}
    return first
'''


async def test_code_changed_under_a_run_stops_it_at_the_first_call_that_differs(world, tmp_path):
    cli = world.folder("cli")
    cli_env = world.env(cli)
    for run_id, label_after, extra, expect in (
        ("pipe-added", "outline", "await ctx.llm('extra', user='more')", "completed"),
        ("pipe-changed", "summary", "", "failed"),
    ):
        folder = world.folder(run_id)
        release = tmp_path / f"release-{run_id}"
        model = script(world.model, {"outline": [{"content": "o"}], "summary": [{"content": "s"}],
                                     "extra": [{"content": "x"}]})
        source = CHANGING.replace("{release!r}", repr(str(release)))
        (folder / "changing.py").write_text(source.replace("{label}", "outline").replace("{extra}", ""))
        env = {**world.env(folder), "PYTHONPATH": str(folder)}
        first = UserWorker(folder / "w1", env, "--tool-modules", "changing")
        try:
            await first.wait_ready()
            await rewind_json(cli, cli_env, "start", "--pipeline", "changing", "--input", "{}", "--model", model,
                              "--run-id", run_id)
            await wait_for(lambda: "outline" in labels_asked(world.model, model), "the first model call")
            await asyncio.sleep(1.0)  # the tool call is scheduled and waits
            first.kill()
        finally:
            first.stop()
        # A new deploy: the label of the recorded model call changed, or a call was added after the record.
        (folder / "changing.py").write_text(source.replace("{label}", label_after).replace("{extra}", extra))
        release.touch()
        with UserWorker(folder / "w2", env, "--tool-modules", "changing") as second:
            await second.wait_ready()
            view = await wait_state(cli, cli_env, run_id, ("completed", "failed"))
        assert view["state"] == expect, view
        if expect == "completed":
            assert labels_asked(world.model, model) == ["outline", "extra"]
        else:
            said = view["code_change"] or ""
            assert "call 1 is llm call 'outline'" in said and "the code now makes llm call 'summary'" in said, view
            assert f"`rewind fork {run_id} --step 1 --branch NAME` continues from the last step before it" in said
            code, out, err = await rewind(cli, cli_env, "status", run_id)
            assert "the pipeline's code changed under the run: call 1" in out, out
            listed = await rewind_json(cli, cli_env, "runs", "--state", "failed")
            (row,) = [r for r in listed["runs"] if r["run_id"] == run_id]
            assert row["reason"].startswith("the pipeline's code changed under the run: call 1"), row
            assert labels_asked(world.model, model) == ["outline"]  # the changed call was not answered
            # The documented way onto the new code: a fork from before the change; notify is not sent again.
            with UserWorker(folder / "w3", env, "--tool-modules", "changing") as third:
                await third.wait_ready()
                forked = await rewind_json(cli, cli_env, "fork", run_id, "--step", "1", "--branch", "new-code",
                                           "--wait")
            assert forked["status"]["state"] == "completed" and forked["status"]["final_answer"] == "s", forked
            assert labels_asked(world.model, model) == ["outline", "summary"]
        notified = Path(str(release) + ".notified").read_text().splitlines()
        assert notified == ["ann"], notified  # the side effect ran once, whatever the code did after


async def test_a_fork_answers_every_call_before_its_point_from_the_record(world, tmp_path):
    folder = world.folder("research")
    log, _ = write_module(folder, tmp_path)
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, SCRIPT)
    other = script(world.model, {"synthesize": [{"content": "DRAFT: a shorter one"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "research") as worker:
        await worker.wait_ready()
        run = await rewind_json(cli, cli_env, "start", "--pipeline", "competitive_report", "--input",
                                json.dumps({"companies": COMPANIES}), "--model", model, "--run-id", "pipe-fork",
                                "--wait")
        assert run["status"]["state"] == "completed", run
        labels = await tree_labels(cli, cli_env, "pipe-fork")
        before = len(lines(log))
        # From the last search on: synthesize with another prompt and model, a state key set there.
        point = max(i for i, label in enumerate(labels) if label == "search_company")
        forked = await rewind_json(cli, cli_env, "fork", "pipe-fork", "--step", str(point), "--branch", "brief",
                                   "--prompt", "synthesize=Be brief.", "--model", f"synthesize={other}",
                                   "--set", "reviewer=ann", "--wait")
        assert forked["status"]["state"] == "completed", forked
        assert forked["status"]["final_answer"] == "DRAFT: a shorter one"
    # 0 calls before the fork point ran again: no search, no plan; the report was saved once.
    assert len(lines(log)) == before + 1 and lines(log)[-1] == "save", lines(log)
    asked = [r for r in world.model.requests() if r.get("model") in (model, other) and r.get("status") == 200]
    assert [r["label"] for r in asked] == ["plan", "synthesize", "validate", "synthesize", "validate"], asked
    new_synthesize = asked[3]
    assert new_synthesize["model"] == other and new_synthesize["messages"][0] == {"role": "system",
                                                                                 "content": "Be brief."}
    tree = await rewind_json(cli, cli_env, "tree", "pipe-fork")
    brief = [r["step_label"] for r in tree["branches"]["brief"]]
    assert brief == ["synthesize", "validate", "save_report", "result"], brief
    first = tree["branches"]["brief"][0]
    shown = await rewind_json(cli, cli_env, "show", f"pipe-fork:brief:{first['step_index']}")
    assert shown["agent_variables"] == {"found": 5, "reviewer": "ann"}, shown["agent_variables"]
    assert shown["pipeline"]["position"] == 6 and shown["model"] == other
    # The fork's report is a new effect (another text): it ran, once, on the branch.
    assert lines(log).count("save") == 2
    # The diff lines the two branches up by call: the two drafts and verdicts side by side.
    diffed = await rewind_json(cli, cli_env, "diff", "pipe-fork", "main", "brief")
    by_label = {(c["label"], c["position"]): c for c in diffed["calls"]}
    assert by_label[("synthesize", 6)]["a"] == "DRAFT: all five grow"
    assert by_label[("synthesize", 6)]["b"] == "DRAFT: a shorter one"
    assert by_label[("validate", 7)]["a"] == by_label[("validate", 7)]["b"] == '{"ok": true, "missing": []}'
    assert by_label[("synthesize", 6)]["b_prompt"] == "Be brief." != by_label[("synthesize", 6)]["a_prompt"]
    assert by_label[("synthesize", 6)]["a_model"] == model and by_label[("synthesize", 6)]["b_model"] == other
    assert by_label[("validate", 7)]["a_prompt"] == by_label[("validate", 7)]["b_prompt"]
    assert diffed["a"]["system_prompt"] is None and diffed["b"]["system_prompt"] is None
    code, text, err = await rewind(cli, cli_env, "diff", "pipe-fork", "main", "brief")
    assert code == 0 and "call 6 synthesize (llm)" in text and "DRAFT: a shorter one" in text, text
    # What the fork changed by label shows with the call it changed, and only there.
    call_6 = text.split("call 6 synthesize (llm)")[1].split("call 7 ")[0]
    assert call_6.splitlines()[1].startswith("model") and other in call_6.splitlines()[1], text
    assert any(line.startswith("prompt") and "Be brief." in line for line in call_6.splitlines()), text
    call_7 = text.split("call 7 validate (llm)")[1].split("call 8 ")[0]
    assert not any(line.startswith(("prompt", "model")) for line in call_7.splitlines()), text
    assert "system prompt" not in text, text
    # Each tool call row names the step that recorded it (no model message names a pipeline's call).
    save_rows = [line for line in text.splitlines() if "save_report(" in line]
    assert save_rows and all(not line.split("save_report(")[0].rstrip().endswith("?") for line in save_rows), text

    # An experiment over the pipeline's labels: each variant a fork from the same point (dry-run effects).
    with UserWorker(folder / "w2", env, "--tool-modules", "research") as worker:
        await worker.wait_ready()
        # `rewind redo` of a read-only search runs that search again (not from the run's cache), and
        # nothing else: every other call keeps its recorded answer.
        company = (await rewind_json(cli, cli_env, "show", f"pipe-fork:main:{point}"))["tool_call_cache"][-1]["tool_input"]["company"]
        searched = [line for line in lines(log) if line.startswith("start ")]
        redone = await rewind_json(cli, cli_env, "redo", "pipe-fork", "--step", str(point), "--branch", "again",
                                   "--wait")
        assert redone["status"]["state"] == "completed", redone
        assert [line for line in lines(log) if line.startswith("start ")] == [*searched, f"start {company}"], lines(log)
        assert lines(log).count("save") == 2
        status = await rewind_json(cli, cli_env, "experiment", "pipe-fork", "--step", str(point), "--id", "pe",
                                   "--variant", f"short:prompt.synthesize=Be brief.,model.synthesize={other}",
                                   "--variant", "same:", "--wait")
    assert status["state"] == "completed", status
    answers = {b["branch"]: b for b in status["branches"]}
    table = await rewind_json(cli, cli_env, "experiment", "show", "pe")
    finals = {f["variant"]: f["final_answer"] for f in table["branches"]}
    assert finals == {"short": "DRAFT: a shorter one", "same": "DRAFT: all five grow"}, (finals, answers)
    # The fork's save and the redone search; the experiment's effects were dry runs and it re-ran nothing.
    assert lines(log).count("save") == 2 and len(lines(log)) == before + 3


def _readme_blocks(section: str, language: str) -> list[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index(f"\n## {section}\n")
    end = readme.find("\n## ", start + 1)
    return re.findall(rf"```{language}\n(.*?)```", readme[start:end], re.S)


async def test_the_readme_pipeline_as_pasted(tmp_path):
    """README.md, "Your own orchestration code": reports.py, the script and `rewind dev` in one
    shell, the commands from a second one, each line as pasted."""
    (module,) = _readme_blocks("Your own orchestration code", "python")
    setup, commands = _readme_blocks("Your own orchestration code", "bash")
    folder = empty_dir(tmp_path, "reports")
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0")
    assert module.splitlines()[0] == "# reports.py"
    (folder / "reports.py").write_text(module)
    before, dev_line = setup.rstrip().rsplit("\n", 1)
    assert dev_line.startswith("rewind dev ")
    subprocess.run(["bash", "-c", before], cwd=folder, env=env, check=True)
    log = tmp_path / "dev.log"
    with open(log, "wb") as out:
        dev = subprocess.Popen(["bash", "-c", "exec " + dev_line], cwd=folder, env=env, stdout=out,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        await wait_for(lambda: "Ctrl-C stops the worker and the server" in log.read_text(errors="replace")
                       or dev.poll() is not None, "rewind dev", timeout_s=120)
        assert dev.poll() is None, log.read_text()
        # The banner's next command starts the module's pipeline, not the agent loop.
        assert "rewind start --pipeline report --input '{...}' --model script:report" in log.read_text(), log.read_text()
        said = []
        for line in commands.splitlines():
            if line.strip():
                done = await asyncio.to_thread(subprocess.run, ["bash", "-c", line], cwd=folder, env=env,
                                               capture_output=True, text=True, timeout=180)
                assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
                said.append(done.stdout)
        assert "Acme and Globex both grow." in said[0], said[0]
        assert "search_company" in said[1] and "synthesize" in said[1] and "save_report" in said[1], said[1]
        assert "completed" in said[2], said[2]
        tree = await rewind_json(folder, env, "tree", "report-1")
        assert [r["step_label"] for r in tree["branches"]["brief"]] == ["synthesize", "save_report", "result"]
    finally:
        if dev.poll() is None:
            dev.send_signal(signal.SIGINT)
        code = await asyncio.to_thread(dev.wait, 60)
    assert code == 0, log.read_text()[-3000:]


OPERATIONS = '''
import asyncio
from pathlib import Path

from rewind import ToolCallFailed, pipeline, subagent, tool

LOG = Path({log!r})


def count(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")


@tool(side_effects=True, needs_approval=True)
async def wire_money(amount: int) -> str:
    """Wire money (a person approves each call)."""
    count(f"wire {{amount}}")
    return f"wired {{amount}}"


@tool
async def lookup(company: str) -> str:
    """Facts about one company."""
    count(f"lookup {{company}}")
    return f"{{company}} grows"


research_company = subagent(name="research_company", description="Research one company.",
                            system_prompt="Research the company with lookup.", tools=["lookup"],
                            model={researcher!r}, max_steps=4)


@pipeline
async def pay(ctx, amount: int) -> str:
    quote = await ctx.llm("quote", user=f"Quote a transfer of {{amount}}.")
    ctx.state["quote"] = quote
    await ctx.llm("check", user="Check the quote: " + quote)
    try:
        return await ctx.tool("wire_money", amount=amount)
    except ToolCallFailed as exc:
        return f"not paid: {{exc}}"


@pipeline
async def fanout(ctx, companies: list[str]) -> str:
    found = await asyncio.gather(*(ctx.agent("research_company", f"Research {{c}}") for c in companies),
                                 return_exceptions=True)
    ctx.state["failed"] = [c for c, f in zip(companies, found) if isinstance(f, Exception)]
    return "; ".join(f if isinstance(f, str) else f"{{c}}: failed" for c, f in zip(companies, found))


@pipeline
async def profile(ctx, company: str) -> str:
    facts = await ctx.tool("lookup", company=company)
    return await ctx.llm("profile", user=f"Profile {{company}}: {{facts}}")


@pipeline
async def portfolio(ctx, companies: list[str]) -> str:
    found = await asyncio.gather(*(ctx.pipeline("profile", company=c) for c in companies))
    for wrong in (lambda: ctx.pipeline("profile", size=3), lambda: ctx.tool("profile", company="X"),
                  lambda: ctx.pipeline("lookup", company="X")):
        try:
            await wrong()
        except ToolCallFailed as exc:
            ctx.state.setdefault("refused", []).append(str(exc))
    return await ctx.llm("summary", user=" | ".join(found))
'''

FIVE = ["Acme", "Globex", "Initech", "Umbrella", "Broken"]


async def test_approvals_budgets_and_sub_agents_in_a_pipeline(world, tmp_path):
    folder = world.folder("ops")
    log = tmp_path / "ops.txt"
    researcher = f"s-{uuid.uuid4().hex[:8]}"  # a list script: a sub-agent runs the loop, whose calls have no label
    world.model.add_script(researcher, [
        {"tool_calls": [{"name": "lookup", "arguments": {"company": "X"}}],
         "by_user": {"Broken": {"error": {"status": 400, "message": "this model refuses Broken"}}}},
        {"content": "a profile"}])
    good = f"s-{uuid.uuid4().hex[:8]}"
    world.model.add_script(good, [{"content": "a profile after all"}])
    (folder / "ops.py").write_text(OPERATIONS.format(log=str(log), researcher=f"script:{researcher}"))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, {"quote": [{"content": "100 EUR"}], "check": [{"content": "fine"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "ops") as worker:
        await worker.wait_ready()
        # A budget of one step pauses the pipeline before its second call; `rewind continue` goes on.
        await rewind_json(cli, cli_env, "start", "--pipeline", "pay", "--input", '{"amount": 100}', "--model", model,
                          "--run-id", "pipe-pay", "--max-steps", "1")
        view = await _until(cli, cli_env, "pipe-pay", lambda v: v["state"] == "budget_exceeded")
        assert "max_steps" in view["status"]["budget_reason"], view
        assert labels_asked(world.model, model) == ["quote"]
        await rewind_json(cli, cli_env, "continue", "pipe-pay", "--max-steps", "10")
        # The side effect waits for a person; `rewind pending` lists it, `rewind approve` lets it run.
        view = await _until(cli, cli_env, "pipe-pay", lambda v: bool((v["status"] or {}).get("pending_approvals")))
        waiting = view["status"]["pending_approvals"][0]
        assert waiting["tool_name"] == "wire_money" and waiting["arguments"] == {"amount": 100}, waiting
        deadline = time.monotonic() + 30  # visibility lists a run a moment after it changes
        while not any(p["run_id"] == "pipe-pay" for p in (await rewind_json(cli, cli_env, "pending"))["waiting"]):
            assert time.monotonic() < deadline, "rewind pending never listed the pipeline's waiting call"
            await asyncio.sleep(0.5)
        await rewind_json(cli, cli_env, "approve", "pipe-pay", waiting["tool_call_id"], "--by", "ann")
        view = await wait_state(cli, cli_env, "pipe-pay", ("completed", "failed"))
        assert view["status"]["final_answer"] == "wired 100", view
        assert lines(log).count("wire 100") == 1

        # Five sub-agents at once, one of which fails; the pipeline handles it; a redo runs that one again.
        run = await rewind_json(cli, cli_env, "start", "--pipeline", "fanout", "--input",
                                json.dumps({"companies": FIVE}), "--model", model, "--run-id", "pipe-fan", "--wait")
        assert run["status"]["state"] == "completed", run
        assert run["status"]["final_answer"].endswith("Broken: failed"), run
        labels = await tree_labels(cli, cli_env, "pipe-fan")
        assert labels.count("research_company") == 5, labels
        rows = (await rewind_json(cli, cli_env, "tree", "pipe-fan"))["branches"]["main"]
        failed_step = None
        for row in rows:
            if row["step_label"] == "research_company":
                shown = await rewind_json(cli, cli_env, "show", row["checkpoint_id"])
                if shown["tool_call_cache"][-1].get("error"):
                    failed_step = row["step_index"]
        assert failed_step is not None
        lookups = len(lines(log))
        redone = await rewind_json(cli, cli_env, "redo", "pipe-fan", "--step", str(failed_step), "--model",
                                   f"script:{good}", "--wait")
        assert redone["status"]["state"] == "completed", redone
        assert "Broken: failed" not in redone["status"]["final_answer"], redone
        assert redone["status"]["final_answer"].count("a profile") == 5, redone
        assert len(lines(log)) == lookups  # the four that succeeded were not run again
        redo_rows = (await rewind_json(cli, cli_env, "tree", "pipe-fan"))["branches"]["redo-" + str(failed_step)]
        assert [r["step_label"] for r in redo_rows if not r["branch_id"].startswith("pipe")][:1] == \
            ["research_company"], redo_rows


async def test_a_pipeline_runs_another_as_a_durable_child_run(world, tmp_path):
    """ctx.pipeline: each child is a run of its own branch, its calls its own steps; the caller
    records its answer, a fork of the caller answers it from the record (no child runs again)."""
    folder = world.folder("children")
    log = tmp_path / "children.txt"
    (folder / "ops.py").write_text(OPERATIONS.format(log=str(log), researcher="script:none"))
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    model = script(world.model, {"profile": [{"content": "a profile"}], "summary": [{"content": "two profiles"}]})
    other = script(world.model, {"summary": [{"content": "another summary"}]})
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "ops") as worker:
        await worker.wait_ready()
        run = await rewind_json(cli, cli_env, "start", "--pipeline", "portfolio", "--input",
                                json.dumps({"companies": ["Acme", "Globex"]}), "--model", model, "--run-id",
                                "pipe-kids", "--wait")
        assert run["status"]["state"] == "completed", run
        assert run["status"]["final_answer"] == "two profiles", run
        assert sorted(lines(log)) == ["lookup Acme", "lookup Globex"]
        tree = await rewind_json(cli, cli_env, "tree", "pipe-kids")
        main = [r["step_label"] for r in tree["branches"]["main"]]
        assert main == ["start", "profile", "profile", "profile", "summary", "result"], main  # the third: refused
        children = {b: [r["step_label"] for r in rows] for b, rows in tree["branches"].items() if b != "main"}
        assert sorted(children.values()) == [["failed"], *[["start", "lookup", "profile", "result"]] * 2], children
        last = await rewind_json(cli, cli_env, "show", tree["branches"]["main"][-1]["checkpoint_id"])
        refused = last["agent_variables"]["refused"]
        assert "the input of pipeline 'profile' is invalid" in refused[0], refused
        assert "'profile' is a pipeline: call it with ctx.pipeline('profile', ...)" in refused[1], refused
        assert "'lookup' is a tool: call it with ctx.tool('lookup', ...)" in refused[2], refused
        # A fork after the children, with another model for the summary: no child runs again.
        fork = await rewind_json(cli, cli_env, "fork", "pipe-kids", "--step", "3", "--branch", "other",
                                 "--model", f"summary={other}", "--wait")
        assert fork["status"]["state"] == "completed" and fork["status"]["final_answer"] == "another summary", fork
        assert sorted(lines(log)) == ["lookup Acme", "lookup Globex"]
        assert labels_asked(world.model, model).count("profile") == 2


async def _until(cli: Path, env: dict, run_id: str, predicate, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        view = await rewind_json(cli, env, "status", run_id)
        if predicate(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id}: still {view['state']} after {timeout_s:.0f}s: {view}")
        await asyncio.sleep(0.25)


async def test_the_example_pipelines_as_a_user_runs_them(tmp_path):
    """`rewind demo --pipeline` (examples/competitive_report.py, offline, in an empty folder), then
    the research agent written as a pipeline with its own loop, on a worker of the example module."""
    folder = empty_dir(tmp_path, "demo")
    port = free_port()
    env = user_env(folder, TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_SCRIPTED_LATENCY_MS="0",
                   REWIND_DEMO_FAILURE_RATE="0.2", REWIND_DEMO_SEARCH_LATENCY_S="0")
    code, out, err = await rewind(folder, env, "demo", "--pipeline", timeout_s=240)
    assert code == 0, err[-3000:]
    assert "finished: completed" in out and "final answer:\n# Competitive report" in out, out[-3000:]
    run_id = re.search(r"inspect it with `rewind tree (\S+)`", out).group(1)  # type: ignore[union-attr]
    # The fork it suggests needs the stack, which stops with the demo: it says how to keep it.
    assert f"rewind fork {run_id} --step 6" in out and "run it again with --keep" in out, out[-3000:]
    labels = await tree_labels(folder, env, run_id)
    # plan, five searches, a draft the verdict sends back to research, the re-search, a draft it accepts.
    assert labels[:2] == ["start", "plan"] and labels[2:7] == ["search_company"] * 5, labels
    assert labels[7:] == ["synthesize", "validate", "search_company", "synthesize", "validate", "format",
                          "save_report", "result"], labels
    reports = list((folder / ".rewind" / "outbox").glob("*.md"))
    assert len(reports) == 1, reports  # saved once


async def test_an_agent_loop_of_your_own_as_a_pipeline(world, tmp_path):
    cli = world.folder("cli")
    env = world.env(cli, REWIND_OUTBOX=str(tmp_path / "outbox"))
    repo = str(Path(__file__).resolve().parents[2])
    with UserWorker(world.folder("loop-worker"), {**env, "PYTHONPATH": repo},
                    "--tool-modules", "examples.competitive_report") as worker:
        await worker.wait_ready()
        run = await rewind_json(cli, env, "start", "--pipeline", "research_loop", "--input",
                                json.dumps({"task": "Research these companies: Acme, Globex"}), "--run-id",
                                "pipe-loop", "--wait")
    assert run["status"]["state"] == "completed", run
    assert run["status"]["final_answer"].startswith("Saved the report"), run
    labels = await tree_labels(cli, env, "pipe-loop")
    assert labels == ["start", "think", "search_company", "search_company", "think", "save_report", "think",
                      "result"], labels
    assert len(list((tmp_path / "outbox").glob("*.md"))) == 1


async def test_a_run_without_a_script_on_the_scripted_model_says_so_when_its_structured_output_fails(world, tmp_path):
    """Only the scripted model configured, no `--model script:NAME`: the model answers with its demo
    agent's turns, and the structured output that cannot fit them says why, and what to do."""
    folder = world.folder("noscript")
    write_module(folder, tmp_path, repairs=0)
    env = {**world.env(folder), "PYTHONPATH": str(folder)}
    cli = world.folder("cli")
    cli_env = world.env(cli)
    with UserWorker(folder / "w", env, "--tool-modules", "research") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, cli_env, "start", "--pipeline", "competitive_report", "--input",
                                 json.dumps({"companies": ["Acme"]}), "--wait")
    answer = done["status"]["final_answer"]
    assert answer.startswith("no verdict: model call 'validate'"), answer
    assert "has no script for model" in answer and "--model script:NAME" in answer, answer
