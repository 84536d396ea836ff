"""Redis as the hot tier in front of the checkpoint store, as a user configures it:
`REWIND_HOT_STORE=redis://...` beside `REWIND_STORE`, nothing else.

The worker and the CLI run as subprocesses in empty folders against real servers
(Debian's redis-server and PostgreSQL on private ports, moto's S3 server). A run's
checkpoints reach the durable store and stay hot for the TTL; `rewind status`
says how far the durable store is behind; Redis down mid-run, or lost with
checkpoints it had not yet passed on, costs no checkpoint; Redis down at start
stops the worker with one line; Redis alone is refused unless allowed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import boto3
import psycopg
import pytest
import redis
from as_user import UserWorker, one_line_error, rewind, user_env

from rewind.local.servers import PostgresServer, RedisServer, free_port

TASK = "Research these companies: Acme, Globex"
LAST_STEP = 3  # the research agent on two companies: start, search both, save the report, its answer


def _aws(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing"}


def _steps(keys: list[str], run: str, branch: str = "main") -> list[str]:
    return sorted(k for k in keys if k.startswith(f"runs/{run}/branches/{branch}/steps/"))


async def _status(cli: Path, env: dict[str, str], run: str) -> dict:
    code, out, err = await rewind(cli, env, "status", run, "--json")
    assert code == 0, err
    return json.loads(out)


async def _until(check, what: str, timeout_s: float = 90.0, log=lambda: "") -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}\n{log()[-3000:]}"
        await asyncio.sleep(0.3)


async def test_a_run_through_redis_reaches_s3_and_status_shows_the_lag(temporal_server, tmp_path, model,
                                                                         moto_endpoint, redis_url):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"hot-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"hot-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_HOT_STORE=redis_url, OPENAI_API_KEY="test-key",
                   OPENAI_BASE_URL=model.base_url, REWIND_DEMO_FAILURE_RATE="0", **_aws(moto_endpoint))
    cli = tmp_path / "cli"
    cli.mkdir()
    run = f"hot-{uuid.uuid4().hex[:6]}"

    def in_s3() -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="checkpoints/")
        return sorted(i["Key"].removeprefix("checkpoints/") for p in pages for i in p.get("Contents", []))

    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--wait", "--json")
        assert code == 0, err + worker.log()[-3000:]
        assert json.loads(out)["status"]["state"] == "completed"
        # A fork written by the CLI process goes through Redis too (its close passes it on).
        code, out, err = await rewind(cli, env, "fork", run, "--step", "1", "--branch", "again", "--wait", "--json")
        assert code == 0, err

        async def caught_up() -> dict | None:
            view = await _status(cli, env, run)
            hot = view["hot_tier"]
            assert hot is not None and hot["durable"] == f"s3://{bucket}/checkpoints", view
            return view if hot["pending"] == 0 else None

        await _until(caught_up, "the durable store did not catch up with Redis", log=worker.log)
        code, out, err = await rewind(cli, env, "status", run)
        assert code == 0, err
        assert f"hot tier     every object is in s3://{bucket}/checkpoints" in out, out
        code, out, err = await rewind(cli, env, "show", f"{run}:again:3", "--json")
        assert code == 0, err
    stored = in_s3()
    assert _steps(stored, run) == [f"runs/{run}/branches/main/steps/{i:08d}.json" for i in range(4)], stored
    assert _steps(stored, run, "again"), stored
    # The hot copies are there, each with its TTL (a day) now that S3 has it: nothing pending lives forever.
    with redis.Redis.from_url(redis_url) as client:
        hot = [k for k in client.scan_iter(match=f"rw{{*}}:o:runs/{run}/*")]
        assert len(hot) >= 4, hot
        ttls = [client.ttl(k) for k in hot]
        assert all(0 < t <= 24 * 3600 for t in ttls), ttls


@pytest.mark.parametrize("worker_dies", [False, True], ids=["worker-lives", "worker-killed"])
async def test_redis_lost_before_flushing_loses_no_checkpoint(temporal_server, tmp_path, worker_dies):
    """PostgreSQL (the durable store) goes down, so the run's new checkpoints wait in Redis, and
    status says so; then Redis dies and comes back empty (no persistence) with them. The worker
    that wrote them writes them again from memory; if that worker was killed too (after a model
    call that carried a step's record completed: that checkpoint is in Redis alone), the next
    worker's write finds the parent missing and rebuilds it from Temporal history. Either way,
    once PostgreSQL is back every checkpoint is there, and `rewind mirror` finds nothing to add."""
    pg = await asyncio.to_thread(PostgresServer.start)
    hot = await asyncio.to_thread(RedisServer.start)
    try:
        schema = "hot"
        env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address,
                       REWIND_TASK_QUEUE=f"hot-{uuid.uuid4().hex[:8]}", REWIND_STORE=f"{pg.url}?schema={schema}",
                       REWIND_PAYLOADS=f"file://{tmp_path / 'payloads'}", REWIND_HOT_STORE=hot.url,
                       REWIND_DEMO_FAILURE_RATE="0", REWIND_SCRIPTED_LATENCY_MS="2000")
        cli = tmp_path / "cli"
        cli.mkdir()
        run = f"lost-{uuid.uuid4().hex[:6]}"

        def durable_steps() -> list[str]:
            with psycopg.connect(pg.url, autocommit=True) as conn:
                return _steps([k for (k,) in conn.execute(f'SELECT key FROM "{schema}".objects')], run)

        first = UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent")
        with first:
            await first.wait_ready()
            code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--json")
            assert code == 0, err

            async def first_durable() -> bool:
                return bool(await asyncio.to_thread(durable_steps))

            await _until(first_durable, "the first checkpoint did not reach PostgreSQL", log=first.log)
            await asyncio.to_thread(pg.kill)

            async def waiting_in_redis() -> dict | None:
                view = await _status(cli, env, run)
                return view if (view["hot_tier"] or {}).get("run_pending") else None

            view = await _until(waiting_in_redis, "no checkpoint waited in Redis with PostgreSQL down", log=first.log)
            assert view["state"] == "running", view
            code, out, err = await rewind(cli, env, "status", run)
            assert "object(s) of this run not yet in postgresql://" in out, out
            if worker_dies:
                # Killed once the second model call has answered: the step it carried (1) is in
                # Redis alone and its carrier completed, so nothing writes it again from a retry;
                # the third call (on the next worker) carries step 2, whose parent is then missing.
                async def second_call_answered() -> bool:
                    # Completed as Temporal knows it (the run's ledger counts it), not only answered by
                    # the model: a completion the server never got is retried and writes step 1 itself.
                    view = await _status(cli, env, run)
                    return view["status"]["ledger"]["model_calls"] >= 2

                await _until(second_call_answered, "the run's second model call did not answer", log=first.log)
                first.kill()
            await asyncio.to_thread(hot.restart)  # everything Redis held is gone
            await asyncio.to_thread(pg.start_again)
            second = UserWorker(tmp_path / "worker2", env, "--tool-modules", "examples.research_agent")
            with second:
                await second.wait_ready()

                async def done() -> dict | None:
                    view = await _status(cli, env, run)
                    caught_up = not view["status"]["mirror_pending"] and not (view["hot_tier"] or {}).get("pending")
                    # The worker that lived writes again what Redis lost of its writes, once PostgreSQL answers.
                    rewritten = worker_dies or "were written again" in first.log()
                    return view if view["state"] == "completed" and caught_up and rewritten else None

                await _until(done, "the run did not complete with every checkpoint stored", timeout_s=150,
                             log=lambda: first.log() + second.log())
                log = first.log() + second.log()
        steps = await asyncio.to_thread(durable_steps)
        assert steps == [f"runs/{run}/branches/main/steps/{i:08d}.json" for i in range(LAST_STEP + 1)], steps
        if worker_dies:
            assert "rebuilt" in log and "from Temporal history" in log, log[-3000:]
        else:
            assert "lost its data" in log and "were written again" in log, log[-3000:]
        code, out, err = await rewind(cli, env, "mirror", run, "--json")
        assert code == 0, err
        assert '"written": 0' in out and '"written": 1' not in out, out
        code, out, err = await rewind(cli, env, "show", f"{run}:main:3", "--json")
        assert code == 0, err
    finally:
        await asyncio.to_thread(hot.remove)
        await asyncio.to_thread(pg.remove)


async def test_redis_down_mid_run_sends_writes_to_the_durable_store(temporal_server, tmp_path):
    hot = await asyncio.to_thread(RedisServer.start)
    try:
        durable = tmp_path / "checkpoints"
        env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address,
                       REWIND_TASK_QUEUE=f"hot-{uuid.uuid4().hex[:8]}", REWIND_STORE=f"file://{durable}",
                       REWIND_HOT_STORE=hot.url, REWIND_DEMO_FAILURE_RATE="0", REWIND_SCRIPTED_LATENCY_MS="1500")
        cli = tmp_path / "cli"
        cli.mkdir()
        run = f"down-{uuid.uuid4().hex[:6]}"
        with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
            await worker.wait_ready()
            code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--json")
            assert code == 0, err

            async def started() -> bool:
                return (await _status(cli, env, run))["status"]["step"] >= 1

            await _until(started, "the run did not get to step 1", log=worker.log)
            await asyncio.to_thread(hot.kill)

            async def done() -> dict | None:
                view = await _status(cli, env, run)
                return view if view["state"] == "completed" and not view["status"]["mirror_pending"] else None

            view = await _until(done, "the run did not complete with Redis down", timeout_s=120, log=worker.log)
            assert view["hot_tier"]["error"], view
            code, out, err = await rewind(cli, env, "status", run)
            assert "hot tier     unreachable" in out and f"go to file://{durable}" in out, out
            assert "writes go to" in worker.log(), worker.log()[-3000:]
        steps = sorted(p.relative_to(durable).as_posix() for p in durable.rglob("*.json") if "/steps/" in p.as_posix())
        # Those written before Redis died reached the folder from the flusher, the others directly.
        assert _steps(steps, run) == [f"runs/{run}/branches/main/steps/{i:08d}.json" for i in range(4)], steps
    finally:
        await asyncio.to_thread(hot.remove)


async def test_redis_down_at_start_and_redis_alone_are_one_line_each(temporal_server, tmp_path, redis_url):
    down = f"redis://127.0.0.1:{free_port()}/0"
    # REWIND_STARTUP_WAIT_S=0: a Redis that does not answer may be starting, and is waited for otherwise.
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"hot-{uuid.uuid4().hex[:8]}",
                   REWIND_HOT_STORE=down, REWIND_STARTUP_WAIT_S="0")
    worker = UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent")
    with worker:
        code = await worker.wait_exit()
    one_line_error(code, worker.stderr(), "REWIND_HOT_STORE", down, "check that the server runs")
    # Not Redis at all.
    code, out, err = await rewind(tmp_path, {**env, "REWIND_HOT_STORE": "s3://bucket/x"}, "status", "nope")
    one_line_error(code, err, "REWIND_HOT_STORE", "not a redis:// or rediss:// URL")
    # Redis as the only store: refused with the reason, unless allowed.
    alone = {**env, "REWIND_STORE": redis_url, "REWIND_HOT_STORE": None}
    alone = {k: v for k, v in alone.items() if v is not None}
    code, out, err = await rewind(tmp_path, alone, "status", "nope")
    one_line_error(code, err, "REWIND_STORE", "no durability promise", "REWIND_ALLOW_REDIS_STORE=1")
    code, out, err = await rewind(tmp_path, {**alone, "REWIND_STORE": "file://x", "REWIND_PAYLOADS": redis_url},
                                  "status", "nope")
    one_line_error(code, err, "REWIND_PAYLOADS", "side effects once")


async def test_redis_alone_when_allowed_runs_the_demo(temporal_server, tmp_path, redis_url):
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"hot-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"{redis_url}?namespace=alone-{uuid.uuid4().hex[:6]}", REWIND_ALLOW_REDIS_STORE="1",
                   REWIND_DEMO_FAILURE_RATE="0")
    cli = tmp_path / "cli"
    cli.mkdir()
    run = f"alone-{uuid.uuid4().hex[:6]}"
    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--wait", "--json")
        assert code == 0, err + worker.log()[-3000:]
        code, out, err = await rewind(cli, env, "show", f"{run}:main:3", "--json")
        assert code == 0, err
    # Nothing went to a local folder: the payloads follow the store into Redis.
    stray = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent.name in ("checkpoints", "payloads")]
    assert not stray, stray
