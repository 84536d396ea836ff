"""`rewind view` as a user runs it: a real run (the CLI and a worker as subprocesses, a
fork, a rollback), its page written from the checkpoint store alone, then loaded in
headless Chromium, whose DOM after the page's script ran is what is checked.

Chromium is the Debian package (/usr/bin/chromium); nothing is downloaded. Without
it the browser part is skipped, unless REWIND_TEST_REQUIRE_BROWSER=1 (CI), which
makes a missing browser a failure. With REWIND_TEST_ARTIFACTS=DIR the screenshot
is also saved as DIR/viewer.png (how docs/viewer.png is made).
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from as_user import one_line_error, rewind, rewind_json, user_env, user_workers

TOOLS = '''
from activities.tools.registry import tool


@tool
async def lookup(term: str) -> str:
    """Read-only: what is known about a term."""
    return f"about {term}"


@tool(side_effects=True)
async def publish(text: str) -> str:
    """Side-effecting: publishes a text once per idempotency key."""
    return f"published {text}"
'''
# A tool output (and an argument) that would run script, were the page to treat it as markup.
EVIL = '</script><script>document.body.setAttribute("data-pwned","1")</script><img src=x onerror="document.title=1">'
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--virtual-time-budget=5000"]


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


async def _browse(chromium: str, url: str, *flags: str) -> str:
    """Chromium's stdout for `url` (with a profile of its own, removed after)."""
    profile = tempfile.mkdtemp(prefix="rewind-view-profile-")
    try:
        proc = await asyncio.create_subprocess_exec(
            chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", *flags, url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {err.decode()[-2000:]}"
    return out.decode()


def _attrs(dom: str, tag: str, cls: str) -> list[dict[str, str]]:
    """The attributes of every `<tag class="cls ...">` element of a dumped DOM."""
    found = []
    for m in re.finditer(rf'<{tag}\s([^>]*)>', dom):
        attrs = {k: html.unescape(v) for k, v in re.findall(r'([\w:-]+)="([^"]*)"', m.group(1))}
        if cls in attrs.get("class", "").split():
            found.append(attrs)
    return found


async def test_a_real_run_with_a_fork_and_a_rollback_in_headless_chromium(world, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    name = "view-" + world.queue
    world.model.add_script(name, [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "Acme"}}, {"name": "lookup", "arguments": {"term": EVIL}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "Acme"}}, {"name": "publish", "arguments": {"text": "hello"}}]},
        {"content": "done"},
    ])
    env = world.env(cli)
    async with user_workers() as start:
        prices = json.dumps({"script:": {"input": 2.5, "output": 10.0}})  # USD per million tokens: costs to chart
        worker = start(wdir, world.env(wdir, REWIND_PRICES=prices), "--tool-modules", "tools")
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", "look things up", "--model", f"script:{name}",
                                      "--run-id", "v-1", "--wait")
        assert code == 0, out + err
        code, out, err = await rewind(cli, env, "fork", "v-1", "--step", "1", "--branch", "b",
                                      "--system-prompt", "Be brief.", "--wait")
        assert code == 0, out + err
        code, out, err = await rewind(cli, env, "rollback", "v-1", "--step", "1", "--wait")
        assert code == 0, out + err
        tree = await rewind_json(cli, env, "tree", "v-1")
        expected_diff = await rewind_json(cli, env, "diff", "v-1", "main", "b")
        await worker.stop_async()  # from here on, the store alone

    checkpoints = [row for rows in tree["branches"].values() for row in rows]
    invalidated = [row["checkpoint_id"] for row in checkpoints if row["status"] == "invalidated"]
    assert sorted(tree["branches"]) == ["b", "main", "main.r1"] and invalidated == ["v-1:main:2", "v-1:main:3"]

    # The page: RUN.html in the working folder by default; --out - the same bytes on stdout.
    summary = await rewind_json(cli, env, "view", "v-1")
    page = cli / "v-1.html"
    assert summary == {"run": "v-1", "out": str(page), "bytes": page.stat().st_size, "branches": 3,
                       "steps": len(checkpoints)}
    code, out, err = await rewind(cli, env, "view", "v-1", "--out", "-")
    assert code == 0 and out.encode() == page.read_bytes(), err
    code, out, err = await rewind(cli, env, "view", "v-1", "--out", str(tmp_path / "other.html"))
    assert code == 0 and out.startswith(f"wrote {tmp_path / 'other.html'} (") and "3 branch(es), 8 checkpoint(s)" in out, out + err

    # Bad input: one line each, no traceback.
    code, _, err = await rewind(cli, env, "view", "../v-1")
    one_line_error(code, err, "run id", prefix="rewind: ")
    code, _, err = await rewind(cli, env, "view", "nope")
    one_line_error(code, err, "no checkpoints for run 'nope'", prefix="rewind: ")
    code, _, err = await rewind(cli, env, "view", "v-1", "--out", "-", "--json")
    one_line_error(code, err, "choose one", prefix="rewind: ")
    code, _, err = await rewind(cli, env, "view", "v-1", "--out", str(tmp_path / "no-such-folder" / "x.html"))
    one_line_error(code, err, "cannot write", prefix="rewind: ")
    down = world.env(cli, REWIND_STORE="s3://gone/cp", AWS_ENDPOINT_URL="http://127.0.0.1:9",
                     AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
    code, _, err = await rewind(cli, down, "view", "v-1")
    one_line_error(code, err, "REWIND_STORE", prefix="rewind: ")

    chromium = _chromium()
    if chromium is None:
        if os.environ.get("REWIND_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("REWIND_TEST_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium); "
                    "REWIND_TEST_REQUIRE_BROWSER=1 makes this a failure")

    # The page after its script ran, deep-linked to the step with the hostile tool output and to a diff.
    url = page.as_uri() + "#step=main.r1:1&diff=main..b"
    dom = await _browse(chromium, url, "--dump-dom")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-ready="1"' in body, dom[-3000:]
    assert f'data-branches="3"' in body and f'data-checkpoints="{len(checkpoints)}"' in body
    assert "data-pwned" not in body and "<title>rewind view: v-1</title>" in dom
    assert {a["data-branch"] for a in _attrs(dom, "div", "lane-label")} == {"main", "main.r1", "b"}
    nodes = _attrs(dom, "circle", "node")
    assert sorted(n["data-id"] for n in nodes) == sorted(row["checkpoint_id"] for row in checkpoints)
    assert sorted(n["data-id"] for n in nodes if "st-invalidated" in n["class"]) == invalidated
    edges = {(e["class"], e["data-from"], e["data-to"]) for e in _attrs(dom, "path", "edge")}
    assert edges == {("edge fork", "v-1:main:1", "v-1:b:2"), ("edge rollback", "v-1:main:1", "v-1:main.r1:2")}
    # The step: its tool calls with their outcome, arguments and result, shown as text.
    assert '<code id="detail-id">v-1:main:1</code>' in dom
    calls = _attrs(dom, "div", "call")
    assert [c["data-outcome"] for c in calls] == ["ok", "ok"]
    escaped = html.escape(f"about {EVIL}", quote=False)
    assert escaped in dom and f"about {EVIL}" not in dom
    # The comparison: what `rewind diff v-1 main b` says.
    diff_part = dom[dom.index('id="diff-view"'):]
    assert re.search(r'<p id="diff-title">diff of run v-1: <strong>main</strong> vs <strong>b</strong></p>', diff_part)
    fp = expected_diff["fork_point"]
    assert f'fork point: step {fp["step_index"]} ({fp["step_label"]}) <code>{fp["checkpoint_id"]}</code>' in diff_part
    for side in ("a", "b"):
        assert f'<code>{expected_diff[side]["head_checkpoint_id"]}</code>' in diff_part
        for row in expected_diff[side]["steps"]:
            assert f'>{row["step_index"]}</a> {html.escape(row["step_label"], quote=False)}' in diff_part
    assert ('<tr data-row="system prompt" class="differs">' in diff_part) == (
        expected_diff["a"]["system_prompt"] != expected_diff["b"]["system_prompt"]) is True
    assert diff_part.count("<pre>done</pre>") == 2  # both final answers
    # Spent after the fork point, and in all as the tree counts, as `rewind diff` says them.
    spent = expected_diff["a"]["tokens"]["total"]
    assert re.search(rf'<tr data-row="tokens">.*?<td>{spent} \(\d+ in / \d+ out\) after the fork point</td>', diff_part)
    in_all = expected_diff["a"]["tokens_in_all"]["total"]
    assert re.search(rf'<tr data-row="in all">.*?<td>{in_all} tokens, ', diff_part), diff_part[:3000]

    # Opened without a link, the page shows the newest head of main: its revision after the
    # rollback, not the invalidated steps the rollback replaced.
    plain = await _browse(chromium, page.as_uri(), "--dump-dom")
    head = max((row for row in tree["branches"]["main.r1"]), key=lambda row: row["step_index"])
    assert f'<code id="detail-id">{head["checkpoint_id"]}</code>' in plain, plain[-3000:]
    # Ledger rows step, branch, total and the same columns in the ledger's order on every step.
    columns = re.search(r'<table class="ledger">(.*?)</table>', plain, re.S)
    assert columns is not None and columns.group(1).index(">step<") < columns.group(1).index(">total<")

    # A picture of it, for a person (and for the README when REWIND_TEST_ARTIFACTS is set).
    shot = tmp_path / "viewer.png"
    await _browse(chromium, page.as_uri() + "#step=main.r1:2&diff=main..b", f"--screenshot={shot}", "--window-size=1400,900")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    artifacts = os.environ.get("REWIND_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(artifacts) / "viewer.png")



async def _long_run(root: Path, steps: int, fork_at: int, fork_steps: int) -> int:
    """A run written with the store API, as the mirror writes one: `main` of `steps` steps and
    a fork `f` of `fork_steps` from step `fork_at`. Returns how many checkpoints it has."""
    from datetime import datetime, timedelta, timezone

    from checkpoint_bridge.stores import FileObjectStore
    from checkpoint_bridge.projection.projector import record_parts
    from checkpoint_bridge.checkpoints.store import CheckpointStore
    from workflows.vocabulary.contracts import StepRecord, ToolCallLog

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def record(branch: str, step: int, parent: str | None) -> StepRecord:
        call = f"call_{branch}_{step}"
        messages = ([{"role": "user", "content": "walk"}] if step == 0 else
                    [{"role": "assistant", "content": None, "tool_calls": [
                        {"id": call, "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": call, "content": f"page {step} of {branch}"}])
        calls = [] if step == 0 else [ToolCallLog(step=step, tool_call_id=call, tool_name="read", arguments={},
                                                  output=f"page {step} of {branch}", called_at=t0)]
        return StepRecord(run_id="long-1", branch_id=branch, step_index=step, parent_id=parent,
                          step_label=f"read {step}", new_messages=messages, new_tool_calls=calls,
                          created_at=t0 + timedelta(seconds=step), model="gpt-4o-mini",
                          llm_tokens_used=10 * step, prompt_tokens=8 * step, completion_tokens=2 * step)

    async with CheckpointStore(FileObjectStore(root)) as store:
        for step in range(steps):
            await store.save_step(record_parts(record("main", step, f"long-1:main:{step - 1}" if step else None)))
        for step in range(fork_at + 1, fork_at + 1 + fork_steps):
            parent = f"long-1:{'main' if step == fork_at + 1 else 'f'}:{step - 1}"
            await store.save_step(record_parts(record("f", step, parent)))
    return steps + fork_steps


async def test_a_long_run_builds_only_what_is_on_screen(tmp_path) -> None:
    chromium = _chromium()
    if chromium is None:
        if os.environ.get("REWIND_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("REWIND_TEST_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    total = await _long_run(tmp_path / "store", steps=1000, fork_at=700, fork_steps=200)
    folder = tmp_path / "user"
    folder.mkdir()
    env = user_env(folder, REWIND_STORE=f"file://{tmp_path / 'store'}")
    summary = await rewind_json(folder, env, "view", "long-1")
    assert (summary["branches"], summary["steps"]) == (2, total)
    dom = await _browse(chromium, Path(summary["out"]).as_uri() + "#step=f:850", "--dump-dom", "--window-size=1400,900")
    assert 'data-ready="1"' in dom and f'data-checkpoints="{total}"' in dom
    # The step the link names, its node drawn and selected in the tree, its row in the list...
    assert '<code id="detail-id">long-1:f:850</code>' in dom
    nodes = _attrs(dom, "circle", "node")
    assert any(n["data-id"] == "long-1:f:850" and "selected" in n["class"].split() for n in nodes)
    rows = _attrs(dom, "div", "row")
    assert any(r["data-id"] == "long-1:f:850" and "selected" in r["class"].split() for r in rows)
    # ...but only what is on screen: a window of the tree and of the list, the step's own messages.
    assert 0 < len(nodes) < 400 and 0 < len(rows) < 60, (len(nodes), len(rows))
    assert len(_attrs(dom, "div", "msg")) == 2
    edges = {(e["class"], e["data-from"], e["data-to"]) for e in _attrs(dom, "path", "edge")}
    assert edges == {("edge fork", "long-1:main:700", "long-1:f:701")}
