"""The compose topology, walked as processes: two workers, a run, a SIGKILL, the CLI.

Everything comes from docker-compose.yml (the worker's command, environment, health
check, stop grace period; the bucket; the namespace step) and from the README's
Deployment section (the host's CLI environment); see conftest.py for the stand-ins.
The workers and the CLI each run in their own empty directory: nothing may depend on
a local folder shared between them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, WorkflowExecutionStatus

import compose_topology as ct
from deploy_stack import Proc, Processes, Stack
from rewind.settings.config import Settings
from rewind.local.testing import descendants

TASK = "Research these companies: Acme, Globex, Initech"
COMPANIES = ["Acme", "Globex", "Initech"]
TECH_PROMPT = "Emphasize technical analysis"
# What a worker may leave in its own directory: its health file (REWIND_HOME defaults to
# .rewind in the working directory), the announcement of its event hub (REWIND_EVENTS=local,
# docs/streaming.md: how a reader on its machine finds its live events) and the outbox of the
# research agent's save_report tool (the tool's own local side effect). Nothing of the run's state.
ALLOWED_WORKER_FILES = re.compile(r"\.rewind/(worker-health\.[^/]+\.json|\.worker-health\.[^/]+\.json\.\d+\.tmp"
                                  r"|live/hub-\d+-[0-9a-f]+\.json|outbox/idem-[0-9a-f]+\.md)")


class Cli:
    """`rewind ...` as the host runs it: its own empty directory, the README's exports."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.calls: list[str] = []

    async def __call__(self, *args: str, timeout_s: float = 120.0) -> tuple[int, str, str]:
        argv = ct.resolve_executable(["rewind", *args], self.env)
        proc = await asyncio.create_subprocess_exec(*argv, cwd=self.cwd, env=self.env, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out_b, err_b = await asyncio.wait_for(proc.communicate(), timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.communicate()
            raise AssertionError(f"`rewind {' '.join(args)}` did not finish in {timeout_s:.0f}s") from None
        out, err = out_b.decode(), err_b.decode()
        self.calls.append(f"$ rewind {' '.join(args)}  -> exit {proc.returncode}\n{out[-1500:]}{err[-1500:]}")
        assert "Traceback" not in err, f"`rewind {' '.join(args)}` printed a traceback:\n{err}"
        return proc.returncode or 0, out, err

    async def json(self, *args: str, expect: int = 0, timeout_s: float = 120.0) -> Any:
        code, out, err = await self(*args, "--json", timeout_s=timeout_s)
        assert code == expect, f"`rewind {' '.join(args)} --json` exited {code}, not {expect}:\n{err}\n{out[-2000:]}"
        return json.loads(out)


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def _event_time(event: Any) -> float:
    return event.event_time.ToDatetime(tzinfo=timezone.utc).timestamp()


def _attributes(event: Any) -> Any:
    return getattr(event, event.WhichOneof("attributes"))


def _s3_url(url: str) -> tuple[str, str]:
    assert url.startswith("s3://"), url
    bucket, _, prefix = url[len("s3://"):].partition("/")
    return bucket, prefix.strip("/") + "/" if prefix.strip("/") else ""


async def _wait_healthy(worker: Proc, check: list[str], timeout_s: float) -> None:
    """The compose health check, in the worker's directory and environment, until it passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.alive(), f"{worker.name} exited with {worker.process.returncode}:\n{worker.log()}"
        if list((worker.cwd / ".rewind").glob("worker-health.*.json")):
            code, out = await worker.healthcheck(check)
            if code == 0:
                return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{worker.name} not healthy within its compose health check's start period and retries ({timeout_s:.0f}s):\n{worker.log()}")


async def _until_held(stack: Stack, handle: Any, timeout_s: float) -> None:
    """Until the gate holds the run's save_report call; fails early, with the reason, if
    the run ends or its model calls keep failing (e.g. a model endpoint that is not there)."""
    deadline = time.monotonic() + timeout_s
    while not stack.gate.held.is_set():
        desc = await handle.describe()
        assert desc.status == WorkflowExecutionStatus.RUNNING, f"the run ended ({desc.status.name}) before its save_report call"
        for p in desc.raw_description.pending_activities:
            assert not (p.activity_type.name == "call_llm" and p.attempt >= 3), (
                f"model calls keep failing (attempt {p.attempt}): {p.last_failure.message}")
        assert time.monotonic() < deadline, f"the run did not reach its save_report call within {timeout_s:.0f}s: {desc.raw_description}"
        await asyncio.to_thread(stack.gate.held.wait, 0.5)


async def test_compose_topology_survives_a_killed_worker(stack: Stack, processes: Processes, new_dir) -> None:
    services = stack.services
    worker_service = services["worker"]
    check = ct.healthcheck_argv(worker_service, "worker")
    # Compose calls a container unhealthy once the start period and `retries` failed checks passed.
    health = worker_service["healthcheck"]
    healthy_within = ct.duration_s(health["start_period"]) + int(health["retries"]) * ct.duration_s(health["interval"])
    grace = ct.duration_s(worker_service.get("stop_grace_period", "10s"))

    # -- two workers, each in its own empty directory, with the service's environment only --
    workers: list[Proc] = []
    for i in (1, 2):
        cwd = new_dir(f"worker-{i}")
        env = stack.worker_env(home=cwd)
        assert set(env) == set(ct.environment(worker_service, "worker")) | {"PATH", "HOME"}
        workers.append(processes.start(f"worker-{i}", worker_service["command"], cwd, env))
    assert all(w.argv[0] == "rewind" and Path(ct.resolve_executable(w.argv, w.env)[0]).parent == ct.VENV_BIN for w in workers)
    await asyncio.gather(*(_wait_healthy(w, check, healthy_within) for w in workers))

    # -- the CLI: a third empty directory, with what the README tells the host to export --
    readme_env = ct.readme_host_environment()
    cli_env = ct.rewrite_hosts(readme_env, stack.published_hosts)
    # The README's host settings, as the product reads them, reach the same Temporal,
    # task queue and stores as the workers' compose settings.
    worker_env = workers[0].env
    worker_settings, cli_settings = Settings.from_env(worker_env), Settings.from_env(cli_env)
    for name in ("temporal_address", "namespace", "task_queue", "store_url", "payload_url", "s3_endpoint_url", "aws_region"):
        assert getattr(cli_settings, name) == getattr(worker_settings, name), (
            f"the host's CLI (README exports) and the workers (docker-compose.yml) disagree on {name}: "
            f"{getattr(cli_settings, name)!r} != {getattr(worker_settings, name)!r}")
    cli_dir = new_dir("cli")
    cli = Cli(cli_dir, {**cli_env, "PATH": f"{ct.VENV_BIN}{os.pathsep}{ct.SYSTEM_PATH}", "HOME": str(cli_dir)})

    # moto does not check credentials: check that the workers carry MinIO's root user.
    assert {"aws_access_key_id": worker_env.get("AWS_ACCESS_KEY_ID"), "aws_secret_access_key": worker_env.get("AWS_SECRET_ACCESS_KEY")} \
        == stack.s3_credentials, "the workers' S3 credentials are not MinIO's root user (minio-init's alias)"
    store_bucket, store_prefix = _s3_url(worker_settings.store_url)
    payload_bucket, payload_prefix = _s3_url(worker_settings.payload_url)
    assert {store_bucket, payload_bucket} <= set(stack.buckets), "the stores' buckets are not created by minio-init"

    client = await Client.connect(worker_settings.temporal_address, namespace=worker_settings.namespace)
    ns = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=worker_settings.namespace))
    retention_days = ns.config.workflow_execution_retention_ttl.ToTimedelta().days
    init_script = "\n".join(ct.command_script(services["temporal-namespace-init"]))
    assert f"--retention {retention_days}d" in init_script, f"namespace retention is {retention_days} days"

    try:
        # -- a research run; held at its side effect (the report) to kill its worker there --
        run_id = f"deploy-{uuid.uuid4().hex[:8]}"
        # The one side-effecting call of the run first looks up its idempotency record in
        # REWIND_PAYLOADS: hold that request, so the run waits at a known point (step 2).
        stack.gate.close(f"/{payload_bucket}/{payload_prefix}idempotency/")
        started = await cli.json("start", "--task", TASK, "--run-id", run_id)
        assert started["run_id"] == run_id
        handle = client.get_workflow_handle(started["workflow_id"])

        await _until_held(stack, handle, 90.0)
        # Wait until nothing but that held call is in flight and no workflow task is
        # pending: the workflow then sits in one worker's cache (the sticky holder).
        deadline = time.monotonic() + 4.0  # < the tool's 5 s heartbeat timeout
        while True:
            raw = (await handle.describe()).raw_description
            pending = list(raw.pending_activities)
            if len(pending) == 1 and not raw.HasField("pending_workflow_task"):
                assert pending[0].activity_type.name == "run_tool", pending
                break
            assert time.monotonic() < deadline, f"run {run_id} did not settle at its save_report call: {raw}"
            await asyncio.sleep(0.02)
        history = await handle.fetch_history()
        holder_identity = [_attributes(e).identity for e in history.events
                           if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED][-1]
        # A worker is `rewind worker`: one process, or (one per CPU by default) a supervisor
        # whose processes poll under their own pids.
        by_pid = {str(pid): w for w in workers for pid in {w.pid} | descendants(w.pid)}
        holder = by_pid.get(holder_identity.split("@")[0])
        assert holder is not None, f"the run is held by {holder_identity}, none of our workers {list(by_pid)}"
        survivor = next(w for w in workers if w is not holder)
        save_report_on = "holder" if pending[0].last_worker_identity == holder_identity else "survivor"

        killed_at = time.time()
        holder.sigkill()
        stack.gate.open()
        kill_dt = datetime.fromtimestamp(killed_at, timezone.utc).isoformat()

        # The compose health check: unhealthy for the killed worker, healthy for the other;
        # and the run's status from the host while its worker is dead (the run cannot end
        # before Temporal gives up on the dead worker, ~5 s; all three run at once).
        (dead_code, dead_out), (live_code, live_out), live = await asyncio.gather(
            holder.healthcheck(check), survivor.healthcheck(check), cli.json("status", run_id))
        assert dead_code != 0 and "gone" in dead_out, f"health check of the SIGKILLed worker: exit {dead_code}: {dead_out}"
        assert live_code == 0, f"health check of the surviving worker: exit {live_code}: {live_out}"
        assert live["status"]["step"] >= 1 and (live["state"] == "running" or live["workflow_status"] == "completed"), live

        # -- the other worker finishes the run -------------------------------------------
        deadline = time.monotonic() + 90
        while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
            assert time.monotonic() < deadline, f"run {run_id} not finished 90s after the SIGKILL of {holder.name}"
            await asyncio.sleep(0.5)
        done = await cli.json("status", run_id)
        assert done["workflow_status"] == "completed" and done["state"] == "completed", done
        answer = done["status"]["final_answer"]
        assert "saved to" in answer, answer

        # Exactly one report, across both workers' outboxes, named by its idempotency key.
        reports = [p for w in workers for p in (w.cwd / ".rewind" / "outbox").glob("*.md")]
        assert len(reports) == 1, f"expected one report across both workers, found {reports}"
        report = reports[0]
        assert report.name in answer and all(c in report.read_text() for c in COMPANIES), (answer, report.read_text()[:500])

        # Completed calls were not repeated: 3 model calls, 3 searches + 1 report, each scheduled once.
        history = await handle.fetch_history()
        events = list(history.events)
        scheduled = {e.event_id: _attributes(e).activity_type.name for e in events
                     if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
        names = list(scheduled.values())
        assert names.count("call_llm") == 3 and names.count("run_tool") == 4, names

        # Takeover: SIGKILL -> the surviving worker's first workflow task / activity of the run.
        survivor_pids = {str(pid) for pid in {survivor.pid} | descendants(survivor.pid)}
        survivor_identities = {_attributes(e).identity for e in events
                               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
                               and _attributes(e).identity.split("@")[0] in survivor_pids}
        assert survivor_identities, f"no workflow task of the run on the survivor's processes {survivor_pids}"
        after = [e for e in events if _event_time(e) > killed_at
                 and getattr(_attributes(e), "identity", "") in survivor_identities]
        first_task = min((_event_time(e) for e in after if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED), default=None)
        activities = sorted((_event_time(e), scheduled[_attributes(e).scheduled_event_id]) for e in after
                            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED)
        model_calls = [t for t, name in activities if name == "call_llm"]
        assert first_task is not None and activities and model_calls, f"no work on the survivor after the kill ({kill_dt})"
        takeover = {
            "workflow_task_s": round(first_task - killed_at, 2),
            "first_activity_s": round(activities[0][0] - killed_at, 2),
            "first_activity": activities[0][1],
            "next_model_call_s": round(model_calls[0] - killed_at, 2),
            "save_report_was_running_on": save_report_on,
        }
        print(f"\nTAKEOVER after SIGKILL of {holder.name} (pid {holder.pid}) at step {live['status']['step']} (status from {live['source']}): {json.dumps(takeover)}")
        assert takeover["next_model_call_s"] < 30, takeover

        # -- the CLI on the finished run: tree, fork, diff, rollback ------------------------
        code, out, err = await cli("tree", run_id)
        assert code == 0 and "final answer" in out, err + out
        tree = await cli.json("tree", run_id)
        assert [r["step_index"] for r in tree["branches"]["main"]] == [0, 1, 2, 3], tree

        fork = await cli.json("fork", run_id, "--step", "1", "--branch", "technical",
                              "--system-prompt", TECH_PROMPT, "--wait")
        assert fork["branch"] == "technical" and fork["fork_point"] == f"{run_id}:main:1", fork
        assert fork["status"]["state"] == "completed" and "technical" in fork["final_answer"], fork

        diff = await cli.json("diff", run_id, "main", "technical")
        assert diff["fork_point"]["step_index"] == 1 and not diff["same_final_answer"], diff

        rollback = await cli.json("rollback", run_id, "--step", "1", "--wait")
        # A finished branch rolled back in place continues as its next revision, main.r1.
        assert rollback["branch"] == "main" and rollback["step"] == 1, rollback
        assert rollback["status"]["branch_id"] == "main.r1" and rollback["status"]["state"] == "completed", rollback
        assert rollback["invalidated"] == [f"{run_id}:main:2", f"{run_id}:main:3"], rollback
        assert [e["tool_name"] for e in rollback["side_effects"]] == ["save_report"], rollback
        tree = await cli.json("tree", run_id)
        assert {"main", "technical", "main.r1"} <= set(tree["branches"]), tree["branches"].keys()

        # Reports: main's and the fork's, each once. The rolled-back continuation asked for
        # main's report again (same content): the effect of its lineage was reused, not repeated.
        reports_after = [p for w in workers for p in (w.cwd / ".rewind" / "outbox").glob("*.md")]
        assert len(reports_after) == 2 and report in reports_after, reports_after

        # -- every worker gone: a finished run's status still works --------------------------
        assert survivor.stop(grace) == 0, f"{survivor.name} did not stop cleanly on SIGTERM:\n{survivor.log()}"
        code, out = await survivor.healthcheck(check)
        assert code != 0, f"health check after the worker stopped: exit {code}: {out}"
        final = await cli.json("status", run_id)
        assert final["state"] == "completed" and "saved to" in final["status"]["final_answer"], final
        code, out, err = await cli("status", run_id)
        assert code == 0 and "completed" in out, err + out

        # -- nothing depends on a local folder: the run's state is in S3 ---------------------
        s3 = stack.s3()
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=store_bucket, Prefix=store_prefix)
                for o in page.get("Contents", [])]
        # Besides the run: only a starting worker's write check (stores/contract.py, verify_store),
        # which a worker stopped in the middle of it leaves behind; never anything of a run.
        probes = f"{store_prefix}probes/"
        assert all(k.removeprefix(probes).removesuffix(".json").isalnum() for k in keys if k.startswith(probes)), keys
        keys = [k for k in keys if not k.startswith(probes)]
        runs = f"{store_prefix}runs/{run_id}/branches/"
        steps = {}
        for key in keys:
            assert key.startswith(runs), f"unexpected object in the checkpoint store: {key}"
            branch, kind, name = key[len(runs):].split("/")
            if kind == "steps":
                steps.setdefault(branch, []).append(int(name.removesuffix(".json")))
        assert steps == {"main": [0, 1, 2, 3], "technical": [2, 3], "main.r1": [2, 3]}, steps
        assert any(k.startswith(f"{runs}main/invalidations/") for k in keys), keys
        payload_keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=payload_bucket, Prefix=payload_prefix)
                        for o in page.get("Contents", [])]
        assert any(k.startswith(f"{payload_prefix}segments/") for k in payload_keys), payload_keys
        # One idempotency record per report, and one report per record.
        records = sorted(k for k in payload_keys if k.startswith(f"{payload_prefix}idempotency/"))
        assert records == sorted(f"{payload_prefix}idempotency/{p.stem}.json" for p in reports_after), (records, reports_after)

        for w in workers:
            unexpected = [f for f in _files(w.cwd) if not ALLOWED_WORKER_FILES.fullmatch(f)]
            assert not unexpected, f"{w.name} wrote files of its own into its directory: {unexpected}"
        assert _files(cli_dir) == [], f"the CLI wrote into its directory: {_files(cli_dir)}"
    except BaseException:
        stack.gate.open()
        print("\n===== CLI calls =====\n" + "\n".join(cli.calls))
        raise

