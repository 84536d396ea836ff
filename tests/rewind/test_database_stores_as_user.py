"""Checkpoints in a database, as a user configures it: `REWIND_STORE` only.

The worker and the CLI run as subprocesses in empty folders. A research run, a
status, a tree, a fork and a diff go through the database; without
`REWIND_PAYLOADS` the run's live data (transcript segments, idempotency
records) goes to the same database, and nothing to a local folder. A store
that cannot be opened stops the worker with one line naming REWIND_STORE.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from as_user import UserWorker, one_line_error, rewind, user_env

TASK = "Research these companies: Acme, Globex"


def _keys(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [k for (k,) in conn.execute("SELECT key FROM objects ORDER BY key")]


async def test_a_run_fork_and_diff_on_a_sqlite_store(temporal_server, tmp_path, model):
    db = tmp_path / "db" / "rewind.db"
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"sql-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"sqlite://{db}", OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url,
                   REWIND_DEMO_FAILURE_RATE="0")
    cli = tmp_path / "cli"
    cli.mkdir()
    run = f"sql-{uuid.uuid4().hex[:6]}"
    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--wait", "--json")
        assert code == 0, err + worker.log()[-3000:]
        assert json.loads(out)["status"]["state"] == "completed"
        code, out, err = await rewind(cli, env, "fork", run, "--step", "1", "--branch", "again", "--wait", "--json")
        assert code == 0, err
        assert json.loads(out)["status"]["state"] == "completed"
        code, out, err = await rewind(cli, env, "tree", run, "--json")
        assert code == 0, err
        tree = json.loads(out)
        assert set(tree["branches"]) == {"main", "again"}, tree
        code, out, err = await rewind(cli, env, "show", f"{run}:main:3", "--json")
        assert code == 0, err
        assert "saved to" in json.dumps(json.loads(out)["messages"][-1])
        code, out, err = await rewind(cli, env, "diff", run, "main", "again", "--json")
        assert code == 0, err
        code, out, err = await rewind(cli, env, "status", run, "--json")
        assert code == 0 and json.loads(out)["state"] == "completed", err
    keys = _keys(db)
    assert any(k.startswith(f"runs/{run}/branches/main/steps/") for k in keys), keys
    assert any(k.startswith(f"runs/{run}/branches/again/steps/") for k in keys), keys
    assert any(k.startswith("segments/") for k in keys), "the transcript segments are not in the database"
    assert any(k.startswith("idempotency/") for k in keys), "save_report's idempotency record is not in the database"
    # Nothing went to the local default folders.
    for folder in (tmp_path / "worker", cli):
        stray = [p for p in (folder / ".rewind").rglob("*") if p.is_file() and p.parent.name in ("checkpoints", "payloads")]
        assert not stray, stray


async def test_a_sqlite_store_that_cannot_be_opened_stops_the_worker_with_one_line(temporal_server, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"sql-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"sqlite://{blocker}/rewind.db")
    worker = UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent")
    with worker:
        code = await worker.wait_exit()
    one_line_error(code, worker.stderr(), "REWIND_STORE", f"sqlite://{blocker}/rewind.db")
    cli = tmp_path / "cli"
    cli.mkdir()
    code, out, err = await rewind(cli, env, "status", "nope", "--json")
    one_line_error(code, err, "REWIND_STORE")
