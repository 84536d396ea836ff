"""Checkpoints in a database, as a user configures it: `REWIND_STORE` only.

The worker and the CLI run as subprocesses in empty folders. A research run, a
status, a tree, a fork and a diff go through the database (a SQLite file, a
real PostgreSQL server); without `REWIND_PAYLOADS` the run's live data
(transcript segments, idempotency records) goes to the same database, and
nothing to a local folder. A store that cannot be opened (a file in the way,
a server that is down) stops the worker with one line naming REWIND_STORE; a
PostgreSQL server killed mid-run costs nothing: the run goes on, the mirror
retries, and once the server is back every checkpoint is there.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from as_user import UserWorker, one_line_error, rewind, user_env

from rewind.local.servers import free_port

TASK = "Research these companies: Acme, Globex"


def _sqlite_keys(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [k for (k,) in conn.execute("SELECT key FROM objects ORDER BY key")]


def _postgres_keys(server_url: str, schema: str) -> list[str]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        return [k for (k,) in conn.execute(f'SELECT key FROM "{schema}".objects ORDER BY key')]


def _dynamodb_keys(endpoint: str, table: str) -> list[str]:
    import boto3

    dynamo = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    pages = dynamo.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    return sorted(i["sk"]["S"] for page in pages for i in page.get("Items", []) if "#" in i["pk"]["S"])


def _aws(endpoint: str) -> dict[str, str]:
    """What a user of a DynamoDB-compatible endpoint exports (moto's server here)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(params=["sqlite", "postgres", "dynamodb"])
def database(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    """(REWIND_STORE, a function listing every key stored there, the environment it needs)."""
    if request.param == "sqlite":
        db = tmp_path / "db" / "rewind.db"
        return f"sqlite://{db}", lambda: _sqlite_keys(db), {}
    if request.param == "dynamodb":
        endpoint = request.getfixturevalue("moto_endpoint")
        table = f"rewind-{uuid.uuid4().hex[:8]}"  # created by the worker on first use
        return f"dynamodb://{table}", lambda: _dynamodb_keys(endpoint, table), _aws(endpoint)
    server_url = request.getfixturevalue("postgres_url")
    schema = f"user_{uuid.uuid4().hex[:8]}"
    return f"{server_url}?schema={schema}", lambda: _postgres_keys(server_url, schema), {}


async def test_a_run_fork_and_diff_on_a_database_store(temporal_server, tmp_path, model, database):
    store_url, stored_keys, extra = database
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"sql-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=store_url, OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url,
                   REWIND_DEMO_FAILURE_RATE="0", **extra)
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
    keys = stored_keys()
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


async def test_a_postgres_server_that_is_down_stops_the_worker_with_one_line(temporal_server, tmp_path):
    url = f"postgresql://rewind@127.0.0.1:{free_port()}/rewind"
    # A server that does not answer may be starting: without REWIND_STARTUP_WAIT_S=0 the worker
    # would wait for it (tests/faults/test_store_faults_as_user.py).
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"sql-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=url, REWIND_STARTUP_WAIT_S="0")
    worker = UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent")
    with worker:
        code = await worker.wait_exit()
    one_line_error(code, worker.stderr(), "REWIND_STORE", "cannot reach PostgreSQL store", url.split("://")[1])
    # A wrong password is named the same way, and never shown.
    env["REWIND_STORE"] = "postgresql://rewind:s3cret-pw@127.0.0.1:1/rewind"
    code, out, err = await rewind(tmp_path, env, "status", "nope")
    one_line_error(code, err, "REWIND_STORE")
    assert "s3cret-pw" not in err


async def test_a_dynamodb_endpoint_that_is_down_stops_the_worker_with_one_line(temporal_server, tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"ddb-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE="dynamodb://rewind-checkpoints", REWIND_STARTUP_WAIT_S="0", **_aws(endpoint))
    worker = UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent")
    with worker:
        code = await worker.wait_exit()
    one_line_error(code, worker.stderr(), "REWIND_STORE", "cannot reach DynamoDB store dynamodb://rewind-checkpoints",
                   endpoint)
    env["REWIND_STORE"] = "dynamodb://"
    code, out, err = await rewind(tmp_path, env, "status", "nope")
    one_line_error(code, err, "REWIND_STORE", "names no table")
    # The common guess of a region in the URL: the query named, and the variable that says it.
    env["REWIND_STORE"] = "dynamodb://rewind-checkpoints?region=us-east-1"
    code, out, err = await rewind(tmp_path, env, "tree", "nope")
    one_line_error(code, err, "REWIND_STORE", "?region=us-east-1", "reads no query", "AWS_REGION=us-east-1")
    assert "invalid" not in err, err


async def test_a_postgres_server_killed_mid_run_loses_nothing(temporal_server, tmp_path):
    from rewind.local.servers import PostgresServer

    server = await asyncio.to_thread(PostgresServer.start)
    try:
        schema = "midrun"
        url = f"{server.url}?schema={schema}"
        # The live data stays in a folder: only the checkpoint store goes down. The offline model
        # takes 1.5 s per call, so the run is still going when the server dies.
        env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address,
                       REWIND_TASK_QUEUE=f"sql-{uuid.uuid4().hex[:8]}", REWIND_STORE=url,
                       REWIND_PAYLOADS=f"file://{tmp_path / 'payloads'}", REWIND_DEMO_FAILURE_RATE="0",
                       REWIND_SCRIPTED_LATENCY_MS="1500")
        cli = tmp_path / "cli"
        cli.mkdir()
        run = f"pgdown-{uuid.uuid4().hex[:6]}"
        with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
            await worker.wait_ready()
            code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--json")
            assert code == 0, err
            deadline = time.monotonic() + 60
            while not any("/steps/" in k for k in _postgres_keys(server.url, schema)):
                assert time.monotonic() < deadline, worker.log()[-3000:]
                await asyncio.sleep(0.1)
            await asyncio.to_thread(server.kill)
            down_at = time.monotonic()
            # The run goes on without its store; the mirror falls behind and says why.
            behind = None
            while time.monotonic() - down_at < 30 and behind is None:
                code, out, err = await rewind(cli, {**env, "REWIND_STORE": f"file://{tmp_path / 'elsewhere'}"},
                                              "status", run, "--json")
                if code == 0:
                    status = json.loads(out)["status"]
                    if status["mirror_pending"] and status["step"] >= 2:
                        behind = status
                await asyncio.sleep(0.5)
            assert behind is not None, "the run did not go on, or its mirror did not fall behind, with the store down"
            await asyncio.to_thread(server.start_again)
            deadline = time.monotonic() + 90
            while True:
                code, out, err = await rewind(cli, env, "status", run, "--json")
                if code == 0 and json.loads(out)["state"] == "completed" and not json.loads(out)["status"]["mirror_pending"]:
                    break
                assert time.monotonic() < deadline, (out, err, worker.log()[-3000:])
                await asyncio.sleep(0.5)
            steps = [k for k in _postgres_keys(server.url, schema) if "/steps/" in k]
            assert steps == [f"runs/{run}/branches/main/steps/{i:08d}.json" for i in range(4)], steps
            code, out, err = await rewind(cli, env, "mirror", run, "--json")
            assert code == 0, err
            (report,) = json.loads(out)["branches"]
            assert report["checkpoints"] == 4 and report["written"] == 0, report  # the live mirror caught up
    finally:
        await asyncio.to_thread(server.remove)
