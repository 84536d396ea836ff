"""Rewind configured for production, driven exactly as a user drives it.

Every process here is a subprocess a user could type: `rewind ...` and
`rewind worker ...` (tests/as_user.py), each in its own new, empty folder, configured ONLY through environment variables built from
scratch (PATH, HOME and the variables under test: nothing of the test
process's own AWS_* / OPENAI_* / REWIND_* leaks in), against real servers:
the session's Temporal dev server, moto's S3 server, the scripted model.
Each test has its own task queue.

What is pinned down:
  1. S3 for both stores, set through the environment only, end to end
     (start / status / tree / show), and where every kind of object lands;
     also the payload store derived from an s3:// REWIND_STORE; step objects
     gzip'd, or plain JSON with REWIND_STORE_COMPRESSION=none.
  2. An empty variable is an unset one, everywhere (as docker compose passes
     variables the shell does not set); OPENAI_BASE_URL= means OpenAI itself.
  3. A configuration error is one line on stderr naming the variable, both
     when a worker starts and at the first CLI command.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from as_user import empty_dir, one_line_error, rewind, rewind_json, user_env, user_workers
from botocore.exceptions import ClientError
from temporalio.client import Client, WorkflowExecutionStatus

from rewind.local.testing import LoggedProcess

TASK = "Research these companies: Acme, Globex"
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}

# -- driving Rewind as a user ---------------------------------------------------------


@pytest.fixture
async def workers():
    async with user_workers() as start:
        yield start


def s3_client(endpoint: str, **creds: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=creds.get("key", "testing"),
                        aws_secret_access_key=creds.get("secret", "testing"))


def new_bucket(endpoint: str) -> str:
    bucket = f"prod-{uuid.uuid4().hex[:10]}"
    s3_client(endpoint).create_bucket(Bucket=bucket)
    return bucket


def bucket_keys(endpoint: str, bucket: str) -> list[str]:
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def under(keys: list[str], prefix: str) -> list[str]:
    return [k for k in keys if k.startswith(prefix)]


def bucket_objects(endpoint: str, bucket: str, keys: list[str]) -> dict[str, bytes]:
    s3 = s3_client(endpoint)
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def queue() -> str:
    return f"prod-{uuid.uuid4().hex[:8]}"


def tool_records(checkpoint: dict, name: str) -> list[dict]:
    return [r for r in checkpoint["tool_call_cache"] if r["tool_name"] == name]


async def run_research(cli: Path, env: dict[str, str]) -> dict:
    """`rewind start --task TASK --wait --json`: the completed run's document."""
    doc = await rewind_json(cli, env, "start", "--task", TASK, "--wait")
    assert doc["status"]["state"] == "completed", doc
    return doc


# -- 1. S3 stores through the environment only ------------------------------------------


async def test_s3_checkpoints_and_payloads_end_to_end(temporal_server, moto_endpoint, model, tmp_path, workers):
    """REWIND_STORE and REWIND_PAYLOADS on s3:// (one bucket, two prefixes), AWS_ENDPOINT_URL=moto:
    a worker and the CLI run the research agent; every kind of object is where it belongs."""
    bucket = new_bucket(moto_endpoint)
    variables = dict(
        TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue(),
        REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_PAYLOADS=f"s3://{bucket}/live",
        AWS_ENDPOINT_URL=moto_endpoint, AWS_DEFAULT_REGION="us-east-1", **CREDS,
        OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url, REWIND_DEMO_FAILURE_RATE="0",
    )
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.wait_ready()
    env = user_env(cli, **variables)

    doc = await run_research(cli, env)
    run = doc["run_id"]
    assert "saved to" in doc["final_answer"], doc["final_answer"]

    status, tree, shown = await asyncio.gather(
        rewind_json(cli, env, "status", run), rewind_json(cli, env, "tree", run),
        rewind_json(cli, env, "show", f"{run}:main:3"),
    )
    assert status["workflow_status"] == "completed" and status["state"] == "completed", status
    assert status["status"]["step"] == 3
    assert [row["step_index"] for row in tree["branches"]["main"]] == [0, 1, 2, 3], tree
    assert shown["checkpoint_id"] == f"{run}:main:3" and shown["status"] == "completed"
    [saved] = tool_records(shown, "save_report")
    assert saved["error"] is None and saved["idempotency_key"], saved

    keys = bucket_keys(moto_endpoint, bucket)
    steps = under(keys, f"checkpoints/runs/{run}/branches/main/steps/")
    assert len(steps) == 4, keys
    # Step objects are gzip'd JSON (REWIND_STORE_COMPRESSION's default): `gunzip -c` reads one.
    for key, data in bucket_objects(moto_endpoint, bucket, steps).items():
        assert data[:2] == b"\x1f\x8b" and json.loads(gzip.decompress(data))["format"] == "rewind.checkpoint/v3", key
    assert under(keys, "live/segments/"), f"no transcript segments under the payload prefix: {keys}"
    # The idempotency record of the one save_report call, in the payload store (never in REWIND_STORE).
    assert under(keys, "live/idempotency/") == [f"live/idempotency/{saved['idempotency_key']}.json"], keys
    assert not [k for k in under(keys, "checkpoints/") if "idempotency" in k or "segments" in k], keys
    # Nothing else: no probe left behind, nothing outside the two prefixes but the SDK's large payloads.
    assert all(k.startswith(("checkpoints/runs/", "live/segments/", "live/tools/", "live/idempotency/", "v0/")) for k in keys), keys
    # And nothing of the run's state on the worker's disk: it is all in S3.
    local = sorted(str(p.relative_to(wdir)) for p in wdir.rglob("*") if p.is_file())
    assert not [p for p in local if "checkpoints" in p or "payloads" in p], local


async def test_s3_store_derives_an_s3_payload_store(temporal_server, moto_endpoint, tmp_path, workers):
    """REWIND_STORE=s3://bucket/prefix and no REWIND_PAYLOADS: the live data goes to
    s3://bucket/rewind-payloads (shared by every worker), never to a local folder.
    (The worker is started as `python -m rewind.worker`; with REWIND_STORE_COMPRESSION=none
    its step objects are plain JSON, for whoever reads the bucket with plain tools.)"""
    bucket = new_bucket(moto_endpoint)
    variables = dict(
        TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue(),
        REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_STORE_COMPRESSION="none",
        AWS_ENDPOINT_URL=moto_endpoint, AWS_DEFAULT_REGION="us-east-1", **CREDS,
        REWIND_DEMO_FAILURE_RATE="0",  # no OPENAI_API_KEY: the worker's own offline model
    )
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent", module=True)
    await worker.wait_ready()
    env = user_env(cli, **variables)

    doc = await run_research(cli, env)
    run = doc["run_id"]
    shown = await rewind_json(cli, env, "show", f"{run}:main:3")
    [saved] = tool_records(shown, "save_report")
    assert saved["error"] is None, saved

    keys = bucket_keys(moto_endpoint, bucket)
    steps = under(keys, f"checkpoints/runs/{run}/branches/main/steps/")
    assert len(steps) == 4, keys
    for key, data in bucket_objects(moto_endpoint, bucket, steps).items():
        assert json.loads(data)["payload"]["checkpoint_id"].startswith(f"{run}:main:"), key  # plain JSON
    assert under(keys, "rewind-payloads/segments/"), keys
    assert under(keys, "rewind-payloads/idempotency/") == [f"rewind-payloads/idempotency/{saved['idempotency_key']}.json"], keys
    assert all(k.startswith(("checkpoints/runs/", "rewind-payloads/segments/", "rewind-payloads/tools/", "rewind-payloads/idempotency/", "v0/"))
               for k in keys), keys
    local = sorted(str(p.relative_to(wdir)) for p in wdir.rglob("*") if p.is_file())
    assert not [p for p in local if "checkpoints" in p or "payloads" in p], local


# -- 2. empty means unset ------------------------------------------------------------------

# What `docker compose` passes for variables the shell does not set: every one empty.
EMPTY = {name: "" for name in (
    "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "REWIND_MODEL",
    "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
    "REWIND_TOOL_MODULES", "REWIND_TOOLS", "TEMPORAL_NAMESPACE", "REWIND_HOME", "REWIND_LOG_LEVEL",
    "REWIND_STICKY_TIMEOUT_S", "REWIND_PAYLOAD_THRESHOLD", "REWIND_SECRET_ENV", "REWIND_REDACT_PATTERNS",
    "REWIND_ENCRYPTION_KEYS", "REWIND_REQUIRE_ENCRYPTION", "REWIND_PRICES", "REWIND_MAX_TOOL_OUTPUT_BYTES",
    "REWIND_MAX_ARG_CHARS", "REWIND_SCRIPTS", "REWIND_SCRIPTED_LATENCY_MS", "REWIND_SCRIPTED_TOKENS_PER_S",
    "REWIND_HEALTH_FILE",
    "REWIND_DEBUG", "REWIND_OUTBOX", "REWIND_DEMO_SEARCH_LATENCY_S", "REWIND_STORE_COMPRESSION",
)}


@pytest.mark.parametrize("region", ["AWS_REGION", "no region"])
async def test_empty_variables_are_unset(temporal_server, moto_endpoint, tmp_path, workers, region):
    """Worker and CLI with every optional variable empty (S3 stores on moto): the worker
    serves the scripted offline model, loads --tool-modules, and the run completes
    without a single failed tool call."""
    bucket = new_bucket(moto_endpoint)
    variables = dict(
        EMPTY, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue(),
        REWIND_STORE=f"s3://{bucket}/checkpoints", REWIND_PAYLOADS=f"s3://{bucket}/live",
        AWS_ENDPOINT_URL=moto_endpoint, **CREDS, REWIND_DEMO_FAILURE_RATE="0",
        **({"AWS_REGION": "us-east-1"} if region == "AWS_REGION" else {}),
    )
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.wait_ready()
    assert "scripted offline model" in worker.log()
    env = user_env(cli, **variables)

    doc = await run_research(cli, env)
    assert "0 without data" in doc["final_answer"], doc["final_answer"]
    assert doc["status"]["model"] == "gpt-4o-mini"  # REWIND_MODEL= is the default model
    shown = await rewind_json(cli, env, "show", f"{doc['run_id']}:main:3")
    records = shown["tool_call_cache"]
    assert sorted(r["tool_name"] for r in records) == ["save_report", "search_company", "search_company"]
    assert [r for r in records if r["error"]] == [], records
    # The outbox is REWIND_HOME's default (REWIND_HOME= and REWIND_OUTBOX= are unset).
    assert len(list((wdir / ".rewind" / "outbox").glob("*.md"))) == 1


async def test_empty_base_url_means_openai(temporal_server, tmp_path, workers):
    """OPENAI_API_KEY=x and OPENAI_BASE_URL= : model calls go to https://api.openai.com/v1
    (unreachable here), and `rewind status` shows call_llm retrying with that URL."""
    variables = dict(
        EMPTY, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue(),
        REWIND_STORE="", REWIND_PAYLOADS="",  # each process: the default folders under its own .rewind
        OPENAI_API_KEY="x",
    )
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    await worker.wait_ready()
    env = user_env(cli, **variables)
    code, out, err = await rewind(cli, env, "start", "--task", TASK, "--json")
    assert code == 0, err
    run = json.loads(out)["run_id"]
    handle = (await Client.connect(temporal_server.address)).get_workflow_handle(run)
    try:
        deadline = time.monotonic() + 90
        while True:
            view = await rewind_json(cli, env, "status", run)
            failing = [p["last_failure"] for p in view["pending"] if p["activity"] == "call_llm" and p.get("last_failure")]
            if failing or view["workflow_status"] != "running":
                break
            assert time.monotonic() < deadline, f"no failing call_llm shown: {view}"
            await asyncio.sleep(0.5)
        if not failing:  # a machine that reaches OpenAI: key "x" is refused at once, and the run says where
            failing = [view["failure"] or ""]
        assert "https://api.openai.com/v1" in failing[0], view
    finally:
        if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            await handle.terminate("test done: it would retry against OpenAI for minutes")


# -- 3. configuration errors are one line ------------------------------------------------------


@pytest.fixture(scope="module")
def auth_moto(tmp_path_factory) -> Any:
    """A moto S3 server that enforces credentials, with one existing bucket.

    moto in server mode checks signatures once INITIAL_NO_AUTH_ACTION_COUNT
    actions have been served; with 1 the bucket is created, then every request
    with unknown keys is refused (403 InvalidAccessKeyId)."""
    port = free_port()
    folder = tmp_path_factory.mktemp("auth-moto")
    moto = LoggedProcess([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                         folder / "moto.log", cwd=folder, env=user_env(folder, INITIAL_NO_AUTH_ACTION_COUNT="1"))
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert moto.process.poll() is None and time.monotonic() < deadline, moto.log()
            time.sleep(0.1)
        bucket = "guarded"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        with pytest.raises(ClientError) as refused:
            s3_client(endpoint).list_objects_v2(Bucket=bucket)
        # It really checks credentials: unknown keys are refused as AWS refuses them.
        assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId", refused.value.response
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        yield endpoint, bucket
    finally:
        moto.stop()


def _broken(kind: str, moto_endpoint: str, auth_moto: tuple[str, str]) -> tuple[dict[str, str], list[str]]:
    """Variables of one misconfiguration, and what its one line must say."""
    if kind == "closed port":
        # Nothing answering may be a store still starting: a worker waits for it unless told not
        # to (tests/faults/test_store_faults_as_user.py tests the wait).
        return {"REWIND_STORE": "s3://rewind/x", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
                "REWIND_STARTUP_WAIT_S": "0"}, ["REWIND_STORE=s3://rewind/x", "cannot reach"]
    if kind == "no bucket":
        return {"REWIND_STORE": "s3://no-such-bucket-here/x", "AWS_ENDPOINT_URL": moto_endpoint}, \
            ["REWIND_STORE=s3://no-such-bucket-here/x", "does not exist"]
    if kind == "bad credentials":
        endpoint, bucket = auth_moto
        return {"REWIND_STORE": f"s3://{bucket}/x", "AWS_ENDPOINT_URL": endpoint}, \
            [f"REWIND_STORE=s3://{bucket}/x", "refused", "credentials"]
    name, value = kind.split("=", 1)
    return {name: value}, [name, repr(value)]


MALFORMED = ["REWIND_PAYLOAD_THRESHOLD=abc", "REWIND_STICKY_TIMEOUT_S=-1", "REWIND_LOG_LEVEL=LOUD",
             "REWIND_STORE_COMPRESSION=zstd"]


@pytest.mark.parametrize("kind", ["closed port", "no bucket", "bad credentials", *MALFORMED])
async def test_configuration_errors_are_one_line(temporal_server, moto_endpoint, auth_moto, tmp_path, workers, kind):
    """The worker exits 1 before polling, and `rewind tree x` / `rewind start --task t` /
    `rewind status x` exit 1: each with exactly one line on stderr naming the variable
    (a malformed value: the worker and one of the commands)."""
    broken, needles = _broken(kind, moto_endpoint, auth_moto)
    variables = dict(TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=queue(),
                     AWS_DEFAULT_REGION="us-east-1", **CREDS, **broken)
    if kind == "bad credentials":
        variables.update(AWS_ACCESS_KEY_ID="AKIANOTAREALKEY00000", AWS_SECRET_ACCESS_KEY="not-a-real-secret")
    wdir = empty_dir(tmp_path, "worker")
    worker = workers(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
    commands = [("tree", "x"), ("start", "--task", "t"), ("status", "x")]
    if "=" in kind:  # refused while reading the settings, the same for every command: one each
        commands = [commands[MALFORMED.index(kind) % len(commands)]]
    folders = [empty_dir(tmp_path, f"cli-{args[0]}") for args in commands]
    results = await asyncio.gather(*(rewind(cwd, user_env(cwd, **variables), *args)
                                     for cwd, args in zip(folders, commands)))
    for args, (code, out, err) in zip(commands, results):
        assert code == 1, f"rewind {' '.join(args)}: exit {code}, stdout {out!r}, stderr {err!r}"
        one_line_error(code, err, *needles, prefix="rewind:")
    assert await worker.wait_exit() == 1, worker.log()
    one_line_error(1, worker.stderr(), *needles, prefix="rewind:")
    assert not list((wdir / ".rewind").glob("worker-health.*.json"))
