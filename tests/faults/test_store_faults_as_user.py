"""Stores that misbehave, met the way a user meets them.

`rewind` and `rewind worker` run as subprocesses (`python -m rewind.cli`),
each in a new empty folder, configured only through environment variables
built from scratch, against the session's Temporal dev server and moto's S3
server. Between them and moto sits a small HTTP proxy (`S3Proxy`, after
fault_helpers.FlakyS3Proxy) that misbehaves on purpose:

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
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from aiohttp import web
from temporalio.client import Client

BIN = Path(sys.executable).parent
TASK = "Research these companies: Acme, Globex"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

# -- the misbehaving proxy ------------------------------------------------------------------

_S3_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


class S3Proxy:
    """An HTTP proxy in front of an S3 server.

    `strip_if_none_match`: PUTs reach S3 without their If-None-Match header (a
    server that ignores conditional writes). `fail_methods`: requests with
    these methods whose path contains `fail_match` get 503 without reaching S3.
    Both can be flipped while the proxy runs. `seen` counts (method, outcome).
    """

    def __init__(self, upstream: str, *, strip_if_none_match: bool = False,
                 fail_methods: set[str] | None = None, fail_match: str = "/idempotency/") -> None:
        self.upstream = upstream.rstrip("/")
        self.strip_if_none_match = strip_if_none_match
        self.fail_methods = set(fail_methods or ())
        self.fail_match = fail_match
        self.seen: Counter[tuple[str, str]] = Counter()
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self._session = aiohttp.ClientSession(auto_decompress=False)
        return self.url

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method in self.fail_methods and self.fail_match in request.path:
            self.seen[(request.method, "failed")] += 1
            return web.Response(status=503, content_type="application/xml", body=_S3_ERROR.format(
                code="ServiceUnavailable", message="injected: service unavailable").encode())
        headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", "content-length"}}
        if request.method == "PUT" and self.strip_if_none_match:
            stripped = {k for k in headers if k.lower() == "if-none-match"}
            if stripped:
                self.seen[("PUT", "stripped If-None-Match")] += 1
            for k in stripped:
                del headers[k]
        assert self._session is not None
        async with self._session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                         data=body, allow_redirects=False) as resp:
            data = await resp.read()
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP_BY_HOP}
            self.seen[(request.method, str(resp.status))] += 1
            return web.Response(status=resp.status, headers=out, body=data)


@pytest.fixture
async def proxies(moto_endpoint):
    started: list[S3Proxy] = []

    async def start(**options: Any) -> S3Proxy:
        proxy = S3Proxy(moto_endpoint, **options)
        await proxy.start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        await proxy.stop()


# -- driving Rewind as a user (every wait async: the proxy runs in this event loop) ------------


def user_env(home: Path, **variables: str) -> dict[str, str]:
    """An environment from scratch: PATH, HOME=`home`, LANG and `variables`."""
    return {"PATH": f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(home), "LANG": "C.UTF-8", **variables}


def empty_dir(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}"
    path.mkdir()
    return path


async def rewind(cwd: Path, env: dict[str, str], *args: str, timeout_s: float = 150.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rewind.cli", *args, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"rewind {' '.join(args)} still running after {timeout_s:.0f}s; stderr: {err.decode()[-2000:]}")
    return proc.returncode, out.decode(), err.decode()


async def rewind_json(cwd: Path, env: dict[str, str], *args: str) -> Any:
    code, out, err = await rewind(cwd, env, *args, "--json")
    assert code == 0, f"rewind {' '.join(args)} exited {code}: {err}"
    return json.loads(out)


class Worker:
    """`rewind worker ARGS` (or `python -m rewind.worker ARGS`) in its own folder;
    stdout and stderr kept apart."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str, module: bool = False) -> None:
        self.cwd = cwd
        self.out_path, self.err_path = cwd.parent / f"{cwd.name}.out", cwd.parent / f"{cwd.name}.err"
        command = ["-m", "rewind.worker"] if module else ["-m", "rewind.cli", "worker"]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen([sys.executable, *command, *args],
                                            cwd=cwd, env=env, stdout=out, stderr=err)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def log(self) -> str:
        return self.out_path.read_text(errors="replace") + self.stderr()

    async def ready(self, timeout_s: float = 90.0) -> None:
        health = self.cwd / ".rewind" / "worker-health.json"
        deadline = time.monotonic() + timeout_s
        while not health.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not polling after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    async def exit_code(self, timeout_s: float = 90.0) -> int:
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker still running after {timeout_s:.0f}s:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.05)
        return self.process.returncode

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                await self.exit_code(20)
            except AssertionError:
                self.process.kill()
                self.process.wait()


@pytest.fixture
async def workers():
    started: list[Worker] = []

    def start(cwd: Path, env: dict[str, str], *args: str, module: bool = False) -> Worker:
        w = Worker(cwd, env, *args, module=module)
        started.append(w)
        return w

    yield start
    for w in started:
        await w.stop()


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


# -- 4. a store that ignores conditional writes ------------------------------------------------


async def test_worker_refuses_a_store_that_ignores_conditional_writes(temporal_server, moto_endpoint, tmp_path,
                                                                      proxies, workers):
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(strip_if_none_match=True)
    variables = research_env(temporal_server, proxy.url, bucket)
    wdir = empty_dir(tmp_path, "worker")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    assert await worker.exit_code() != 0, worker.log()
    err = worker.stderr()
    assert err.count("\n") == 1 and err.startswith("rewind:") and "Traceback" not in err, err
    assert f"REWIND_STORE=s3://{bucket}/checkpoints" in err and "ignores conditional writes" in err, err
    assert proxy.seen[("PUT", "stripped If-None-Match")] >= 2, proxy.seen  # the probe's two writes, really unguarded
    assert not (wdir / ".rewind" / "worker-health.json").exists()
    assert not [k for k in bucket_keys(moto_endpoint, bucket) if "probes/" in k]  # the probe cleaned up

    # Control: the same worker (as `python -m rewind.worker`) against S3 itself, which
    # refuses the second write, starts.
    wdir = empty_dir(tmp_path, "worker")
    variables["AWS_ENDPOINT_URL"] = moto_endpoint
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent", module=True)
    await worker.ready()
    await worker.stop()
    assert worker.process.returncode == 0, worker.log()


# -- 5. side effects and the payload store ---------------------------------------------------


async def test_failed_record_write_does_not_fail_a_done_effect(temporal_server, moto_endpoint, tmp_path,
                                                               proxies, workers):
    """503 to every PUT of an idempotency record: save_report wrote its report, so the
    call is reported done (no error, the run completes, one report), and the worker
    log says the record could not be written."""
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(fail_methods={"PUT"})
    variables = research_env(temporal_server, proxy.url, bucket)
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.ready()
    env = user_env(cli, **variables)

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
    bucket = new_bucket(moto_endpoint)
    proxy = await proxies(fail_methods={"GET"})
    variables = research_env(temporal_server, proxy.url, bucket)
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.ready()
    env = user_env(cli, **variables)
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
