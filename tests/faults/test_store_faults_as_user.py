"""Stores that misbehave, met the way a user meets them.

`rewind` and `rewind worker` run as subprocesses (tests/as_user.py), each in
a new empty folder, configured only through environment variables built from
scratch, against the session's Temporal dev server and moto's S3 server.
Between them and moto sits a small HTTP proxy (`MisbehavingS3Proxy`, a
fault_helpers.S3Proxy like FlakyS3Proxy) that misbehaves on purpose:

  4. it strips `If-None-Match` from PUTs, so S3 silently overwrites: a worker
     must refuse to start on such a store (checkpoints could be overwritten);
  5. it answers 503 to the idempotency records of side-effecting tools: a
     failed record write after the effect must not turn `save_report`'s done
     effect into a failure; a failed record read must fail the attempt before
     the tool runs, and Temporal retries it.

Idempotency records live in the payload store (REWIND_PAYLOADS), never in
the checkpoint store (REWIND_STORE); the tests check where they land.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web
from as_user import UserWorker, empty_dir, one_line_error, rewind, rewind_json, user_env, user_workers
from fault_helpers import S3Proxy, wait_until
from temporalio.client import Client

TASK = "Research these companies: Acme, Globex"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

# -- the misbehaving proxy ------------------------------------------------------------------


class MisbehavingS3Proxy(S3Proxy):
    """`strip_if_none_match`: PUTs reach S3 without their If-None-Match header (a
    server that ignores conditional writes). `fail_methods`: requests with
    these methods whose path contains `fail_match` get 503 without reaching S3.
    Both can be flipped while the proxy runs. `seen` counts (method, outcome).
    """

    def __init__(self, upstream: str, *, strip_if_none_match: bool = False,
                 fail_methods: set[str] | None = None, fail_match: str = "/idempotency/") -> None:
        super().__init__(upstream)
        self.strip_if_none_match = strip_if_none_match
        self.fail_methods = set(fail_methods or ())
        self.fail_match = fail_match
        self.seen: Counter[tuple[str, str]] = Counter()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method in self.fail_methods and self.fail_match in request.path:
            self.seen[(request.method, "failed")] += 1
            return self._error(503, "ServiceUnavailable", "injected: service unavailable")
        strip = request.method == "PUT" and self.strip_if_none_match and "If-None-Match" in request.headers
        if strip:
            self.seen[("PUT", "stripped If-None-Match")] += 1
        status, headers, data = await self._forward(request, body, frozenset({"if-none-match"} if strip else ()))
        self.seen[(request.method, str(status))] += 1
        return web.Response(status=status, headers=headers, body=data)


@pytest.fixture
async def proxies(moto_endpoint):
    started: list[MisbehavingS3Proxy] = []

    async def start(**options: Any) -> MisbehavingS3Proxy:
        proxy = MisbehavingS3Proxy(moto_endpoint, **options)
        await proxy.start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()


@pytest.fixture
async def workers():
    """Every wait async (as_user's): the proxy runs in this event loop."""
    async with user_workers() as start:
        yield start


def new_bucket(endpoint: str) -> str:
    bucket = f"faults-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return bucket


def bucket_keys(endpoint: str, bucket: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def reports(worker_dir: Path) -> list[Path]:
    return sorted((worker_dir / ".rewind" / "outbox").glob("*.md"))


def research_env(temporal_server: Any, s3_endpoint: str, bucket: str) -> dict[str, str]:
    """Both stores in one bucket (checkpoints/, live/), the worker's own offline model."""
    return dict(
        TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"faults-{uuid.uuid4().hex[:8]}",
        REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_PAYLOADS=f"s3://{bucket}/live",
        AWS_ENDPOINT_URL=s3_endpoint, **CREDS, REWIND_DEMO_FAILURE_RATE="0",
    )


async def save_report_record(cli: Path, env: dict[str, str], run: str) -> dict:
    """The save_report tool record of the step that called it (step 2 of the research agent)."""
    shown = await rewind_json(cli, env, "show", f"{run}:main:2")
    [record] = [r for r in shown["tool_call_cache"] if r["tool_name"] == "save_report"]
    return record


async def polling_behind_proxy(temporal_server: Any, moto_endpoint: str, tmp_path: Path, proxies: Any, workers: Any,
                               **proxy_options: Any) -> tuple[str, MisbehavingS3Proxy, Path, Path, UserWorker, dict[str, str]]:
    """A new bucket, a proxy in front of moto, and a research worker polling through it:
    (bucket, proxy, worker folder, CLI folder, worker, the CLI's environment)."""
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(**proxy_options)
    variables = research_env(temporal_server, proxy.url, bucket)
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.wait_ready()
    return bucket, proxy, wdir, cli, worker, user_env(cli, **variables)


# -- 4. a store that ignores conditional writes ------------------------------------------------


async def test_worker_refuses_a_store_that_ignores_conditional_writes(temporal_server, moto_endpoint, tmp_path,
                                                                      proxies, workers):
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(strip_if_none_match=True)
    variables = research_env(temporal_server, proxy.url, bucket)
    wdir = empty_dir(tmp_path, "worker")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    code = await worker.wait_exit()
    assert code != 0, worker.log()
    one_line_error(code, worker.stderr(), f"REWIND_STORE=s3://{bucket}/checkpoints", "ignores conditional writes",
                   prefix="rewind:")
    assert proxy.seen[("PUT", "stripped If-None-Match")] >= 2, proxy.seen  # the probe's two writes, really unguarded
    assert not list((wdir / ".rewind").glob("worker-health.*.json"))
    assert not [k for k in bucket_keys(moto_endpoint, bucket) if "probes/" in k]  # the probe cleaned up

    # Control: the same worker (as `python -m rewind.worker`) against S3 itself, which
    # refuses the second write, starts.
    wdir = empty_dir(tmp_path, "worker")
    variables["AWS_ENDPOINT_URL"] = moto_endpoint
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent", module=True)
    await worker.wait_ready()
    await worker.stop_async()
    assert worker.process.returncode == 0, worker.log()


# -- 5. side effects and the payload store ---------------------------------------------------


async def test_failed_record_write_does_not_fail_a_done_effect(temporal_server, moto_endpoint, tmp_path,
                                                               proxies, workers):
    """503 to every PUT of an idempotency record: save_report wrote its report, so the
    call is reported done (no error, the run completes, one report), and the worker
    log says the record could not be written."""
    bucket, proxy, wdir, cli, worker, env = await polling_behind_proxy(
        temporal_server, moto_endpoint, tmp_path, proxies, workers, fail_methods={"PUT"})

    doc = await rewind_json(cli, env, "start", "--task", TASK, "--wait")
    assert doc["status"]["state"] == "completed", doc
    assert doc["final_answer"].startswith("Saved the report") and "saved to" in doc["final_answer"], doc
    assert proxy.seen[("PUT", "failed")] >= 1, proxy.seen  # the record write really failed
    record = await save_report_record(cli, env, doc["run_id"])
    assert record["error"] is None and "saved to" in record["tool_output"], record
    assert len(reports(wdir)) == 1, reports(wdir)
    assert "could not be written" in worker.log(), worker.log()[-3000:]
    keys = bucket_keys(moto_endpoint, bucket)
    assert not [k for k in keys if "idempotency/" in k], keys  # no record anywhere
    assert [k for k in keys if k.startswith("live/segments/")], keys


async def test_unreadable_record_fails_the_attempt_before_the_tool_runs(temporal_server, moto_endpoint, tmp_path,
                                                                        proxies, workers):
    """503 to every GET of an idempotency record: save_report's attempt fails before the
    tool runs (no report yet) and Temporal retries it; once the store answers again the
    run completes with exactly one report, and the record is in the payload store."""
    bucket, proxy, wdir, cli, _, env = await polling_behind_proxy(
        temporal_server, moto_endpoint, tmp_path, proxies, workers, fail_methods={"GET"})
    run = f"unreadable-{uuid.uuid4().hex[:8]}"
    waiting = asyncio.create_task(rewind(cli, env, "start", "--task", TASK, "--run-id", run, "--wait", "--json"))

    # Watch Temporal until save_report's first attempt has failed and the retry is scheduled.
    client = await Client.connect(temporal_server.address)
    handle = client.get_workflow_handle(run)
    deadline = time.monotonic() + 120
    retried = None
    while retried is None:
        assert not waiting.done(), await waiting
        assert time.monotonic() < deadline, "save_report's failed attempt never showed up in Temporal"
        try:
            desc = await handle.describe()
        except Exception:  # not started yet
            await asyncio.sleep(0.1)
            continue
        for p in desc.raw_description.pending_activities:
            if p.attempt >= 2 and "cannot read the idempotency record" in p.last_failure.message:
                retried = p
        await asyncio.sleep(0.05)
    assert "the tool did not run" in retried.last_failure.message, retried.last_failure.message
    assert proxy.seen[("GET", "failed")] >= 1, proxy.seen
    assert reports(wdir) == [], "save_report ran although its record could not be read"
    proxy.fail_methods.clear()  # the store heals

    code, out, err = await waiting
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"]["state"] == "completed", doc
    assert doc["final_answer"].startswith("Saved the report"), doc["final_answer"]
    record = await save_report_record(cli, env, run)
    assert record["error"] is None, record
    assert len(reports(wdir)) == 1, reports(wdir)
    keys = bucket_keys(moto_endpoint, bucket)
    # The record is in the payload store (REWIND_PAYLOADS), never in the checkpoint store.
    assert [k for k in keys if k.startswith("live/idempotency/")] == [f"live/idempotency/{record['idempotency_key']}.json"], keys
    assert not [k for k in keys if k.startswith("checkpoints/") and "idempotency" in k], keys


# -- 6. a store that is down while a worker starts ---------------------------------------------


async def test_a_worker_started_while_the_store_is_down_waits_for_it(temporal_server, moto_endpoint, tmp_path,
                                                                     proxies, workers):
    """S3 answers 503 to everything while a worker starts (a deploy during an outage): the
    worker says once that it waits (naming the store and REWIND_STARTUP_WAIT_S), polls as
    soon as S3 answers, and a run completes on it. With REWIND_STARTUP_WAIT_S=0 the same
    start is one line and exit 1, as a store that is down always was."""
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(fail_methods={"GET", "PUT", "HEAD", "DELETE", "POST"}, fail_match="/")
    variables = research_env(temporal_server, proxy.url, bucket)

    wdir = empty_dir(tmp_path, "impatient")
    worker = workers(wdir, user_env(wdir, **variables, REWIND_STARTUP_WAIT_S="0"), "--tool-modules",
                     "examples.research_agent")
    code = await worker.wait_exit()
    one_line_error(code, worker.stderr(), f"REWIND_STORE=s3://{bucket}/checkpoints", "503", prefix="rewind:")

    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await wait_until(lambda: "REWIND_STARTUP_WAIT_S" in worker.stderr(), "the worker saying that it waits")
    said = worker.stderr()
    assert f"REWIND_STORE=s3://{bucket}/checkpoints" in said and "waiting up to" in said, said
    assert worker.process.poll() is None, worker.log()
    await asyncio.sleep(2.0)  # still down: it keeps waiting, says it once, polls nothing
    assert worker.process.poll() is None, worker.log()
    assert worker.stderr().count("REWIND_STARTUP_WAIT_S") == 1, worker.stderr()
    assert not list((wdir / ".rewind").glob("worker-health.*.json"))

    proxy.fail_methods.clear()  # S3 is back
    await worker.wait_ready()
    assert "it answers now" in worker.stderr(), worker.stderr()
    run = f"late-store-{uuid.uuid4().hex[:8]}"
    code, out, err = await rewind(cli, user_env(cli, **variables), "start", "--task", TASK, "--run-id", run,
                                  "--wait", "--json")
    assert code == 0, err
    assert json.loads(out)["status"]["state"] == "completed", out


async def test_a_store_that_refuses_stops_a_starting_worker_at_once(temporal_server, moto_endpoint, tmp_path, workers):
    """A store that answers 'no' (here: no such bucket) is not waited for, whatever
    REWIND_STARTUP_WAIT_S says: waiting cannot fix it."""
    variables = research_env(temporal_server, moto_endpoint, "no-such-bucket-here")
    wdir = empty_dir(tmp_path, "worker")
    worker = workers(wdir, user_env(wdir, **variables, REWIND_STARTUP_WAIT_S="600"), "--tool-modules",
                     "examples.research_agent")
    code = await worker.wait_exit(timeout_s=60)
    one_line_error(code, worker.stderr(), "REWIND_STORE=s3://no-such-bucket-here/checkpoints", "does not exist",
                   prefix="rewind:")
