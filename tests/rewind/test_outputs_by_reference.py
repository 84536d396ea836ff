"""Large tool outputs by reference, as a user meets them: the worker and the CLI
as subprocesses, configured by environment only.

A read-only tool's large output is stored once in REWIND_PAYLOADS; Temporal
history names it; the model, the checkpoints and `rewind mirror` see it
whole; without the payload store `rewind mirror` says what is missing.
"""

from __future__ import annotations

import json
import shutil

from as_user import UserWorker, one_line_error, rewind, rewind_json

PAGES = '''
from activities.tools.registry import tool


@tool
async def page(n: int) -> str:
    """Read-only: a long page of text."""
    return f"PAGE-MARKER-{n} " + ("the quick brown fox jumps over the lazy dog " * 60)
'''


async def test_a_large_output_is_stored_once_and_seen_whole(world, client, tmp_path) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "pages.py").write_text(PAGES)
    name = "pages-" + world.queue
    world.model.add_script(name, [{"tool_calls": [{"name": "page", "arguments": {"n": i}}]} for i in range(3)]
                           + [{"content": "read three pages"}])
    env = world.env(cli)
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "pages") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, env, "start", "--task", "read pages", "--model", f"script:{name}",
                                 "--run-id", "pages-1", "--wait")
        assert done["status"]["state"] == "completed", done

    history = b"".join([e.SerializeToString() async for e in client.get_workflow_handle("pages-1").fetch_history_events()])
    assert b"PAGE-MARKER-" not in history and b"quick brown fox" not in history
    stored = list((tmp_path / "payloads" / "outputs").rglob("*.json"))
    assert len(stored) == 3 and all(b"PAGE-MARKER-" in p.read_bytes() for p in stored)
    # The model got the whole page, every time.
    sent = [m["content"] for r in world.model.requests() if r["model"] == f"script:{name}"
            for m in r["messages"] if m.get("role") == "tool"]
    assert any(s.startswith("PAGE-MARKER-2 ") and s.count("lazy dog") == 60 for s in sent), sent[-1:]
    # The checkpoint holds it whole, in the message and in the tool record.
    shown = await rewind_json(cli, env, "show", "pages-1:main:3")
    assert [m["content"][:14] for m in shown["messages"] if m["role"] == "tool"] == [f"PAGE-MARKER-{i} " for i in range(3)]
    assert all(r["tool_output"].startswith("PAGE-MARKER-") for r in shown["tool_call_cache"])

    # Rebuilt from history into an empty store: the same bytes as the live mirror's.
    rebuilt = tmp_path / "rebuilt"
    report = await rewind_json(cli, world.env(cli, REWIND_STORE=f"file://{rebuilt}"), "mirror", "pages-1")
    assert report["branches"][0]["written"] == 5  # steps 0..4
    live_dir = tmp_path / "store" / "runs" / "pages-1"
    files = sorted(p.relative_to(live_dir) for p in live_dir.rglob("*") if p.is_file())
    assert files and all((rebuilt / "runs" / "pages-1" / f).read_bytes() == (live_dir / f).read_bytes() for f in files)

    # Without the outputs, a rebuild is one line naming what is missing, and writes nothing.
    shutil.rmtree(tmp_path / "payloads" / "outputs")
    again = tmp_path / "again"
    code, out, err = await rewind(cli, world.env(cli, REWIND_STORE=f"file://{again}"), "mirror", "pages-1")
    one_line_error(code, err, "tool output", "missing from", "REWIND_PAYLOADS")
    assert not list(again.rglob("*.json"))


COUNTED_PAGES = '''
import os

from activities.tools.registry import tool


@tool
async def page(n: int) -> str:
    """Read-only: a long page of text; every execution leaves a line in runs.log."""
    with open(os.path.join(os.environ["PAGES_LOG"]), "a") as log:
        log.write(f"{n}\\n")
    return f"PAGE-MARKER-{n} " + ("the quick brown fox jumps over the lazy dog " * 60)
'''


async def test_a_completed_call_is_not_run_again_when_its_output_cannot_be_stored(world, client, tmp_path) -> None:
    """The payload store refuses the outputs (a file stands where their folder goes): each
    read-only call still runs once, its output goes into history instead, and the model
    and the checkpoints see it whole. (Found by the seeded soak: a read-only call ran again
    after every S3 outage that met its output's write.)"""
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "pages.py").write_text(COUNTED_PAGES)
    (tmp_path / "payloads").mkdir(exist_ok=True)
    (tmp_path / "payloads" / "outputs").write_text("not a folder")
    name = "pages-broken-" + world.queue
    world.model.add_script(name, [{"tool_calls": [{"name": "page", "arguments": {"n": i}}]} for i in range(2)]
                           + [{"content": "read two pages"}])
    runs_log = wdir / "runs.log"
    with UserWorker(wdir, world.env(wdir, PAGES_LOG=str(runs_log)), "--tool-modules", "pages") as worker:
        await worker.wait_ready()
        done = await rewind_json(cli, world.env(cli), "start", "--task", "read pages", "--model", f"script:{name}",
                                 "--run-id", "pages-2", "--wait")
        assert done["status"]["state"] == "completed", done
        assert "goes into Temporal's history instead" in worker.log(), worker.log()[-2000:]
    assert runs_log.read_text().split() == ["0", "1"]  # each call ran once
    history = b"".join([e.SerializeToString() async for e in client.get_workflow_handle("pages-2").fetch_history_events()])
    assert b"PAGE-MARKER-1" in history
    shown = await rewind_json(cli, world.env(cli), "show", "pages-2:main:2")
    assert [m["content"][:14] for m in shown["messages"] if m["role"] == "tool"] == [f"PAGE-MARKER-{i} " for i in range(2)]
    sent = [m["content"] for r in world.model.requests() if r["model"] == f"script:{name}"
            for m in r["messages"] if m.get("role") == "tool"]
    assert any(s.startswith("PAGE-MARKER-1 ") and s.count("lazy dog") == 60 for s in sent), sent[-1:]
