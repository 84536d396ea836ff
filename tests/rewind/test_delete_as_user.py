"""Deleting runs as a user meets it: `rewind server`, the worker and the CLI as
subprocesses in empty folders, configured by environment only, on a dev server
of the test's own (its database files in the test folder) and real stores (a
local folder, or S3 on moto).

A run whose task and tool outputs carry a unique canary (a page big enough to be
stored by reference, a side effect with an idempotency record, a task big
enough to be kept outside history), with a fork and a rollback, is deleted;
then every object of the checkpoint store and the payload store is read back
and the dev server's .db, -wal and -shm files are scanned as bytes: no byte of
the canary is left. A second run that shares nothing with it is intact.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import boto3
import pytest
from as_user import BIN, UserWorker, one_line_error, user_env
from helpers import unpacked

from rewind.local.testing import LoggedProcess

TOOLS = '''
from activities.tools.registry import tool

CANARY = "{canary}"


@tool
async def fetch(page: int) -> str:
    """Read-only: a long page (stored by reference: over 512 bytes)."""
    return f"{{CANARY}} page {{page}} " + "lorem ipsum dolor " * 120


@tool
async def note(text: str) -> str:
    """Read-only: a short answer."""
    return f"noted {{text}}"


@tool(side_effects=True)
async def publish(text: str) -> str:
    """A side effect: its result is recorded under its idempotency key."""
    return f"published {{text}} " + "#" * 1500


@tool(side_effects=True, needs_approval=True)
async def launch(target: str) -> str:
    """Waits for a person's approval."""
    return f"launched {{target}}"
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def cli(cwd: Path, env: dict[str, str], *args: str, stdin: int | None = subprocess.DEVNULL,
              timeout_s: float = 240.0) -> tuple[int, str, str]:
    """`rewind ARGS...` with stdin from /dev/null (no terminal) unless given: (code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(str(BIN / "rewind"), *args, cwd=cwd, env=env, stdin=stdin,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"rewind {' '.join(args)} did not finish in {timeout_s:.0f}s: {err.decode()[-2000:]}")
    return proc.returncode or 0, out.decode(), err.decode()


async def cli_json(cwd: Path, env: dict[str, str], *args: str) -> dict:
    code, out, err = await cli(cwd, env, *args, "--json")
    assert code == 0, f"rewind {' '.join(args)} exited {code}: {err}"
    return json.loads(out)


class Server(LoggedProcess):
    """`rewind server` in `cwd`: the dev server on `cwd/.rewind/temporal.db`."""

    def __init__(self, cwd: Path, env: dict[str, str], port: int) -> None:
        self.db = cwd / ".rewind" / "temporal.db"
        super().__init__([str(BIN / "rewind"), "server", "--port", str(port), "--ui-port", str(_free_port())],
                         cwd.parent / f"{cwd.name}-server.log", env=env, cwd=cwd)

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "Temporal dev server on" not in self.log():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"rewind server did not start:\n{self.log()[-3000:]}")
            await asyncio.sleep(0.1)

    def files(self) -> dict[str, bytes]:
        """The database files as bytes: .db, -wal, -shm (the ones that exist)."""
        out = {}
        for suffix in ("", "-wal", "-shm"):
            path = self.db.with_name(self.db.name + suffix)
            if path.exists():
                out[path.name] = path.read_bytes()
        return out


class Stores:
    """Where the test's checkpoints and payloads live, and every byte of them read back."""

    def __init__(self, kind: str, tmp_path: Path, endpoint: str | None) -> None:
        self.kind = kind
        if kind == "s3":
            self.s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            self.bucket = f"rewind-delete-{uuid.uuid4().hex[:10]}"
            self.s3.create_bucket(Bucket=self.bucket)
            self.env = {"REWIND_STORE": f"s3://{self.bucket}/checkpoints", "REWIND_PAYLOADS": f"s3://{self.bucket}/payloads",
                        "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}
        else:
            self.root = tmp_path / "data"
            self.env = {"REWIND_STORE": f"file://{self.root / 'checkpoints'}",
                        "REWIND_PAYLOADS": f"file://{self.root / 'payloads'}"}

    def objects(self) -> dict[str, bytes]:
        """Every object of both stores (S3: the whole bucket, which also holds the SDK's v0/ payloads),
        gzip'd objects (step objects, packs) unpacked, so that a pattern search sees their content."""
        if self.kind == "s3":
            pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
            keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
            found = {k: self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}
        else:
            found = {p.relative_to(self.root).as_posix(): p.read_bytes() for p in self.root.rglob("*") if p.is_file()}
        return {k: unpacked(v) for k, v in found.items()}

    def keys(self, part: str) -> list[str]:
        return sorted(k for k in self.objects() if part in k)


def _with(found: dict[str, bytes], needle: bytes) -> list[str]:
    return sorted(name for name, data in found.items() if needle in data)


async def _until(check, what: str, timeout_s: float = 90.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


@pytest.fixture
def stack(tmp_path, model):
    """Folders, the environment every process gets, and the test's own dev server (started by `start`)."""
    started: list[LoggedProcess] = []

    class Stack:
        queue = f"del-{uuid.uuid4().hex[:8]}"
        port = _free_port()
        canary = f"CANARY-{uuid.uuid4().hex}"

        def folder(self, name: str) -> Path:
            path = tmp_path / name
            path.mkdir(exist_ok=True)
            return path

        def env(self, home: Path, stores: Stores, **extra: str) -> dict[str, str]:
            return user_env(home, TEMPORAL_ADDRESS=f"127.0.0.1:{self.port}", REWIND_TASK_QUEUE=self.queue,
                            OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url,
                            # Payloads over 1 KiB are kept outside history (in REWIND_PAYLOADS).
                            REWIND_PAYLOAD_THRESHOLD="1024", **stores.env, **extra)

        async def server(self, cwd: Path, stores: Stores) -> Server:
            server = Server(cwd, self.env(cwd, stores), self.port)
            started.append(server)
            await server.wait_ready()
            return server

        def worker(self, cwd: Path, stores: Stores) -> UserWorker:
            (cwd / "deltools.py").write_text(TOOLS.format(canary=self.canary))
            worker = UserWorker(cwd, self.env(cwd, stores), "--tool-modules", "deltools")
            started.append(worker)
            return worker

    yield Stack()
    for proc in reversed(started):
        proc.stop()


@pytest.mark.parametrize("kind", ["s3", "file"])
async def test_a_deleted_run_leaves_no_byte_anywhere_and_the_other_run_is_intact(kind, stack, model, tmp_path,
                                                                                 request) -> None:
    stores = Stores(kind, tmp_path, request.getfixturevalue("moto_endpoint") if kind == "s3" else None)
    home, wdir = stack.folder("cli"), stack.folder("w")
    env = stack.env(home, stores)
    canary = stack.canary
    server = await stack.server(home, stores)
    secret_run, other_run = f"secret-{kind}", f"other-{kind}"
    model.add_script("canary", [
        {"tool_calls": [{"name": "fetch", "arguments": {"page": 1}}]},
        {"tool_calls": [{"name": "publish", "arguments": {"text": f"{canary} report"}}]},
        {"tool_calls": [{"name": "fetch", "arguments": {"page": 2}}]},
        {"content": f"summary: {canary}"},
    ])
    model.add_script("forked", [{"content": "unused"}, {"content": "unused"},
                                {"tool_calls": [{"name": "launch", "arguments": {"target": f"{canary} moon"}}]},
                                {"content": "launched"}])
    model.add_script("plain", [
        {"tool_calls": [{"name": "note", "arguments": {"text": "OTHER-MARKER"}}]},
        {"content": "OTHER-MARKER done"},
    ])
    worker = stack.worker(wdir, stores)
    await worker.wait_ready()
    long_task = f"Read the pages and publish a report. {canary} " + "context " * 200  # over 1 KiB: kept outside history
    done = await cli_json(home, env, "start", "--task", long_task, "--model", "script:canary", "--run-id", secret_run,
                          "--wait")
    assert done["status"]["state"] == "completed", done
    # The fork waits for approval of a call that names the canary: `rewind status` asks the worker,
    # whose answer (over 1 KiB) is stored outside history and named by no history at all.
    await cli_json(home, env, "fork", secret_run, "--step", "2", "--branch", "alt", "--model", "script:forked")
    call = await _waiting_call(home, env, secret_run, "alt")
    asked = await cli_json(home, env, "status", secret_run, "--branch", "alt")
    assert canary in json.dumps(asked["status"]["pending_approvals"])
    await cli_json(home, env, "approve", secret_run, call, "--branch", "alt", "--by", "test")
    await _until(lambda: _is(home, env, secret_run, "completed", "alt"), "the fork's completion")
    rolled = await cli_json(home, env, "rollback", secret_run, "--step", "1", "--wait")
    assert rolled["status"]["state"] == "completed", rolled
    other = await cli_json(home, env, "start", "--task", "note the OTHER-MARKER", "--model", "script:plain",
                           "--run-id", other_run, "--wait")
    assert other["status"]["state"] == "completed", other
    # Let the last mirror writes land (they follow the runs' ends).
    await _until(lambda: _mirrored(home, env, other_run, 2), "the other run's last checkpoint")
    await _until(lambda: _mirrored(home, env, secret_run, 4, "main.r1"), "the rollback's last checkpoint")

    needle = canary.encode()
    before = stores.objects()
    assert _with(before, needle), "the canary must be in the stores before the deletion (or the test proves nothing)"
    # In every kind of object: checkpoints, transcript segments, tool outputs by reference, the side
    # effect's idempotency record and the Temporal payloads kept outside history (the long task).
    kinds_with_canary = {_kind(k) for k in _with(before, needle)}
    assert kinds_with_canary == {"runs", "segments", "outputs", "idempotency", "v0" if kind == "s3" else "temporal"}
    assert any(needle in data for data in server.files().values()), "the canary must be in the database files first"
    other_objects = {k: v for k, v in before.items() if f"runs/{other_run}/" in k}
    other_tree = await cli_json(home, env, "tree", other_run)
    other_step = await cli_json(home, env, "export", f"{other_run}:main:2", "--out", "-")

    report = await cli_json(home, env, "delete", secret_run, "--yes")
    (erased,) = report["runs"]
    assert erased["run_id"] == secret_run and not report["dry_run"]
    assert sorted(erased["workflows"]) == sorted([secret_run, f"{secret_run}--alt", f"{secret_run}--main.r1"])
    assert erased["temporal_executions"] >= 3 and erased["checkpoints"] > 0
    assert erased["transcript_segments"] > 0 and erased["tool_outputs"] >= 2 and erased["idempotency_records"] >= 1
    assert erased["temporal_payloads"] >= 1
    assert report["database"] and "write-ahead log" in report["database"]

    # Every object of both stores, read back: no byte of the canary, nothing of the run left.
    after = stores.objects()
    assert _with(after, needle) == [], _with(after, needle)[:5]
    assert not [k for k in after if f"runs/{secret_run}/" in k]
    # The dev server's files as bytes, while it runs: `rewind delete` emptied the log into the zeroed file.
    files = server.files()
    assert {name: needle in data for name, data in files.items()} == {name: False for name in files}
    assert any(b"OTHER-MARKER" in data for data in files.values()), "the other run is still in the database"

    # The other run: its objects byte for byte, its checkpoints, its history (a rebuild matches the store).
    assert {k: after.get(k) for k in other_objects} == other_objects
    assert await cli_json(home, env, "tree", other_run) == other_tree
    assert await cli_json(home, env, "export", f"{other_run}:main:2", "--out", "-") == other_step
    status = await cli_json(home, env, "status", other_run)
    assert status["state"] == "completed" and status["workflow_status"] == "completed"
    rebuilt = tmp_path / "rebuilt"
    rebuilt_env = {**env, "REWIND_STORE": f"file://{rebuilt}"}
    mirrored = await cli_json(home, rebuilt_env, "mirror", other_run)
    assert mirrored["branches"][0]["written"] == 3
    live = {k.split(f"runs/{other_run}/", 1)[1]: v for k, v in other_objects.items() if "/steps/" in k}
    assert {p.relative_to(rebuilt / "runs" / other_run).as_posix(): unpacked(p.read_bytes())
            for p in (rebuilt / "runs" / other_run).rglob("*.json")} == live

    # The deleted run is unknown everywhere now.
    code, _, err = await cli(home, env, "status", secret_run)
    one_line_error(code, err, secret_run, prefix="rewind: ")
    code, _, err = await cli(home, env, "delete", secret_run, "--yes")
    one_line_error(code, err, f"no run {secret_run!r}", prefix="rewind: ")

    # Stopped, the server leaves no log behind, and the file still holds no canary.
    await worker.stop_async()
    server.stop()
    assert all(needle not in data for data in server.files().values())


async def _mirrored(home: Path, env: dict[str, str], run_id: str, step: int, branch: str = "main") -> bool:
    code, out, _ = await cli(home, env, "tree", run_id, "--json")
    if code != 0:
        return False
    return any(c["step_index"] == step for c in json.loads(out)["branches"].get(branch, []))


def _kind(key: str) -> str:
    """What a stored object is: `runs` (checkpoints), `segments`, `outputs`, `idempotency`,
    `temporal` (a local folder's Temporal payloads) or `v0` (the S3 driver's)."""
    parts = key.split("/")
    return parts[1] if parts[0] in ("checkpoints", "payloads") else parts[0]


async def _waiting_call(home: Path, env: dict[str, str], run_id: str, branch: str = "main") -> str:
    async def check():
        status = (await cli_json(home, env, "status", run_id, "--branch", branch)).get("status") or {}
        return (status.get("pending_approvals") or [{}])[0].get("tool_call_id")
    return await _until(check, f"run {run_id} waiting for approval")


async def _state(home: Path, env: dict[str, str], run_id: str, branch: str = "main") -> str:
    return (await cli_json(home, env, "status", run_id, "--branch", branch))["state"]


async def test_running_runs_shared_content_gc_and_faults(stack, model, tmp_path) -> None:
    stores = Stores("file", tmp_path, None)
    home, wdir = stack.folder("cli"), stack.folder("w")
    env = stack.env(home, stores)
    await stack.server(home, stores)
    # Two runs with the same task and the same first call: they share their first transcript
    # segments and the page they fetched (content-addressed, stored once).
    model.add_script("short", [{"tool_calls": [{"name": "fetch", "arguments": {"page": 7}}]}, {"content": "read it"}])
    model.add_script("gated", [{"tool_calls": [{"name": "fetch", "arguments": {"page": 7}}]},
                               {"tool_calls": [{"name": "launch", "arguments": {"target": "moon"}}]},
                               {"content": "launched"}])
    model.add_script("solo", [{"tool_calls": [{"name": "note", "arguments": {"text": "solo"}}]}, {"content": "ok"}])
    worker = stack.worker(wdir, stores)
    await worker.wait_ready()
    same_task = "Read page seven"
    finished = await cli_json(home, env, "start", "--task", same_task, "--model", "script:short", "--run-id", "done-1", "--wait")
    assert finished["status"]["state"] == "completed"
    await cli_json(home, env, "start", "--task", same_task, "--model", "script:gated", "--run-id", "gate-1")
    call = await _waiting_call(home, env, "gate-1")

    # A run that waits is refused without --force, in one line naming it; nothing changes.
    before = stores.objects()
    code, _, err = await cli(home, env, "delete", "gate-1", "--yes")
    one_line_error(code, err, "gate-1", "still running", "--force", prefix="rewind: ")
    assert stores.objects() == before and await _state(home, env, "gate-1") == "waiting_for_approval"
    # No terminal and no --yes: refused before anything is read.
    code, _, err = await cli(home, env, "delete", "done-1")
    one_line_error(code, err, "--yes", "no terminal", prefix="rewind: ")
    # On a terminal it shows what it would remove and asks; "n" keeps everything.
    primary, secondary = os.openpty()
    try:
        os.write(primary, b"n\n")
        code, out, err = await cli(home, env, "delete", "done-1", stdin=secondary)
    finally:
        os.close(secondary)
        os.close(primary)
    assert code == 3 and "run done-1 (finished" in err and "delete run done-1 everywhere? [y/N]" in err, err
    assert "nothing deleted" in err and stores.objects() == before
    # Unknown runs and unusable stores: one line, nothing deleted.
    code, _, err = await cli(home, env, "delete", "never-was", "--yes")
    one_line_error(code, err, "no run 'never-was'", prefix="rewind: ")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = await cli(home, {**env, "REWIND_STORE": f"file://{blocker}"}, "delete", "done-1", "--yes")
    one_line_error(code, err, "REWIND_STORE", prefix="rewind: ")
    assert stores.objects() == before

    # Deleting the finished run keeps what the waiting one shares with it. A fresh worker has
    # nothing cached: when the waiting run goes on, it reads its transcript from the store.
    await worker.stop_async()
    report = await cli_json(home, env, "delete", "done-1", "--yes")
    (erased,) = report["runs"]
    assert erased["kept_shared"] >= 2 and erased["checkpoints"] > 0, erased
    worker = stack.worker(stack.folder("w2"), stores)
    await worker.wait_ready()
    await cli_json(home, env, "approve", "gate-1", call, "--by", "test")
    await _until(lambda: _is(home, env, "gate-1", "completed"), "the waiting run's completion")
    last = await cli_json(home, env, "show", "gate-1:main:3")
    assert any("lorem ipsum" in (m.get("content") or "") for m in last["messages"] if m["role"] == "tool")
    assert stores.keys("payloads/tools/"), "tool schemas describe the tools, not a run: they stay"

    # A deletion that stops part way says what it removed and what is left; run again, it finishes.
    solo = await cli_json(home, env, "start", "--task", "SOLO-MARKER only", "--model", "script:solo", "--run-id", "part-1",
                          "--wait")
    assert solo["status"]["state"] == "completed"
    await _until(lambda: _mirrored(home, env, "part-1", 2), "part-1's last checkpoint")
    (segment,) = [k for k in _with(stores.objects(), b"SOLO-MARKER") if _kind(k) == "segments"][:1]
    path = stores.root / segment
    path.unlink()
    path.mkdir()  # a key the store cannot delete (as a refused DeleteObject would be)
    (path / "inside").write_text("x")
    code, _, err = await cli(home, env, "delete", "part-1", "--yes")
    one_line_error(code, err, "stopped at the payload store", "Removed so far", "again", prefix="rewind: ")
    assert stores.keys("runs/part-1/") and await _state(home, env, "part-1") == "completed"  # nothing after it went
    shutil.rmtree(path)
    again = await cli_json(home, env, "delete", "part-1", "--yes")
    assert again["runs"][0]["checkpoints"] > 0 and not stores.keys("runs/part-1/")
    assert not _with(stores.objects(), b"SOLO-MARKER")

    # gc: only finished runs older than the cut-off; --dry-run deletes nothing.
    model.add_script("hold", [{"tool_calls": [{"name": "launch", "arguments": {"target": "mars"}}]}, {"content": "x"}])
    await cli_json(home, env, "start", "--task", "wait for me", "--model", "script:hold", "--run-id", "hold-1")
    await _waiting_call(home, env, "hold-1")
    young = await cli_json(home, env, "gc", "--older-than", "1h", "--dry-run")
    assert young == {**young, "dry_run": True, "runs": []}
    assert (await cli_json(home, env, "gc", "--older-than", "1h", "--yes"))["runs"] == []
    await asyncio.sleep(1.5)  # gate-1's newest checkpoint is now more than 1 s old
    before = stores.objects()
    listed = await cli_json(home, env, "gc", "--older-than", "1s", "--dry-run")
    assert [r["run_id"] for r in listed["runs"]] == ["gate-1"] and listed["dry_run"], listed
    code, text, _ = await cli(home, env, "gc", "--older-than", "1s", "--dry-run")
    assert code == 0 and "run gate-1 (finished" in text and "would remove" in text
    assert stores.objects() == before and await _state(home, env, "gate-1") == "completed"
    code, _, err = await cli(home, env, "gc", "--older-than", "soon", "--yes")
    one_line_error(code, err, "--older-than", "30d", prefix="rewind: ")
    gone = await cli_json(home, env, "gc", "--older-than", "1s", "--yes")
    assert [r["run_id"] for r in gone["runs"]] == ["gate-1"] and not gone["dry_run"]
    assert not stores.keys("runs/gate-1/") and await _state(home, env, "hold-1") == "waiting_for_approval"

    # --force stops the waiting run first, then deletes it.
    forced = await cli_json(home, env, "delete", "hold-1", "--yes", "--force")
    assert forced["runs"][0]["stopped"] == ["hold-1"] and forced["runs"][0]["temporal_executions"] >= 1
    code, _, err = await cli(home, env, "status", "hold-1")
    one_line_error(code, err, "hold-1", prefix="rewind: ")
    assert not stores.keys("runs/") and not stores.keys("idempotency/")


async def _is(home: Path, env: dict[str, str], run_id: str, state: str, branch: str = "main") -> bool:
    return await _state(home, env, run_id, branch) == state
