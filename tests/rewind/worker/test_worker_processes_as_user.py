"""`rewind worker --processes N`, as a user runs it: N processes polling as one worker.

The worker runs as a subprocess in its own folder, configured by environment; the
test looks at it from outside (its stdout, stderr, health, /proc, the runs'
histories in Temporal): the processes share the work and the health file, one
that dies is replaced, SIGTERM stops them all, SIGKILL of the supervisor takes
them with it, and a configuration error is still one line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

from as_user import UserWorker, one_line_error, rewind, rewind_json
from temporalio.client import Client

from workflows.vocabulary.ids import workflow_id_for


def _children(pid: int) -> set[int]:
    """The live (not zombie) processes whose parent is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


async def _announce(w: UserWorker, timeout_s: float = 120.0) -> dict:
    """The one JSON document `rewind worker --json` prints once it polls."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = [line for line in w.log_path.read_text().splitlines() if line.startswith("{")]
        if lines:
            return json.loads(lines[0])
        assert w.process.poll() is None, f"worker exited with {w.process.returncode}:\n{w.log()[-3000:]}"
        await asyncio.sleep(0.2)
    raise AssertionError(f"no announcement after {timeout_s:.0f}s:\n{w.log()[-3000:]}")


async def _until(check, what: str, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def _identities(address: str, run_ids: list[str]) -> set[str]:
    """Who ran the runs' activities: the worker identities (PID@HOST) in their histories."""
    client = await Client.connect(address)
    found = set()
    for run_id in run_ids:
        async for event in client.get_workflow_handle(workflow_id_for(run_id)).fetch_history_events():
            if event.HasField("activity_task_started_event_attributes"):
                found.add(event.activity_task_started_event_attributes.identity)
    return found


def _two_free_ports() -> int:
    """A port P with P+1 free as well (REWIND_METRICS_PORT for two processes)."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("0.0.0.0", port + 1))
                except OSError:
                    continue
        return port
    raise AssertionError("no two consecutive free ports")


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


async def _research(cli: Path, env: dict[str, str], run_id: str) -> dict:
    doc = await rewind_json(cli, env, "start", "--task", "Research these companies: Acme, Globex", "--run-id", run_id,
                            "--wait")
    assert doc["status"]["state"] == "completed", doc
    return doc


async def test_processes_share_the_work_are_replaced_and_stop_together(world, temporal_server):
    cli, wdir = world.folder("cli"), world.folder("w")
    env = world.env(cli)
    metrics_port = _two_free_ports()
    with UserWorker(wdir, world.env(wdir, REWIND_METRICS_PORT=str(metrics_port)), "--tool-modules",
                    "examples.research_agent", "--processes", "2", "--json") as w:
        doc = await _announce(w)
        supervisor, pids = doc["pid"], doc["processes"]
        assert supervisor == w.pid and len(set(pids)) == 2, doc
        assert _children(w.pid) == set(pids), (doc, _children(w.pid))
        assert "2 worker processes polling" in w.stderr(), w.stderr()
        health = await rewind_json(wdir, world.env(wdir), "health")
        assert health["healthy"] and health["pid"] == supervisor and health["processes"] == 2, health
        assert health["worker_pid"] in pids, health

        # Both processes take work from the shared queues.
        runs = [f"procs-{i}" for i in range(6)]
        await asyncio.gather(*(_research(cli, env, r) for r in runs))
        ran = {int(i.split("@")[0]) for i in await _identities(temporal_server.address, runs)}
        assert set(pids) <= ran, (pids, ran)
        # Each process serves its own metrics, process k at REWIND_METRICS_PORT + k.
        steps = [_metrics(metrics_port + k) for k in (0, 1)]
        assert all("rewind_steps" in text for text in steps), [text[:500] for text in steps]

        # One process dies: a replacement takes its slot; the group stays healthy and serves runs.
        os.kill(pids[1], signal.SIGKILL)
        await _until(lambda: len(_children(w.pid) - {pids[1]}) == 2 and pids[0] in _children(w.pid),
                     f"no replacement started:\n{w.log()[-3000:]}")
        assert f"worker process {pids[1]} (slot 1) exited with SIGKILL; starting a replacement" in w.stderr()
        await _research(cli, env, "procs-after-kill")
        health = await rewind_json(wdir, world.env(wdir), "health")
        assert health["healthy"], health

        # SIGTERM stops them all; the health file goes with them.
        children = _children(w.pid)
        w.process.terminate()
        assert await w.wait_exit(60) == 0, w.log()[-3000:]
        await _until(lambda: not any(_alive(p) for p in children), f"processes left after SIGTERM: {children}", 30)
        assert not list((wdir / ".rewind").glob("worker-health.*.json"))


async def test_a_killed_supervisor_takes_its_processes_with_it(world):
    """REWIND_WORKER_PROCESSES sets the count; SIGKILL of `rewind worker` is a crashed machine,
    whatever the count: nothing of it keeps polling."""
    wdir = world.folder("w")
    with UserWorker(wdir, world.env(wdir, REWIND_WORKER_PROCESSES="2"), "--tool-modules", "examples.research_agent",
                    "--json") as w:
        doc = await _announce(w)
        assert len(doc["processes"]) == 2, doc
        w.kill()
        await _until(lambda: not any(_alive(p) for p in doc["processes"]),
                     f"processes outlived their supervisor: {doc['processes']}", 30)
        code, out, err = await rewind(wdir, world.env(wdir), "health")
        assert code == 1 and f"worker process {doc['pid']} is gone" in out, out + err


async def test_the_default_is_a_process_per_core(world):
    wdir = world.folder("w")
    cores = len(os.sched_getaffinity(0))
    with UserWorker(wdir, world.env(wdir, REWIND_WORKER_PROCESSES=None), "--json") as w:
        doc = await _announce(w)
        if cores == 1:
            assert "processes" not in doc and doc["pid"] == w.pid, doc  # one process, no supervisor
        else:
            assert len(doc["processes"]) == cores and _children(w.pid) == set(doc["processes"]), doc
        w.stop()


async def test_a_configuration_error_is_one_line_with_any_count(world):
    wdir = world.folder("w")
    with UserWorker(wdir, world.env(wdir), "--tool-modules", "no_such_tools_module", "--processes", "3") as w:
        code = await w.wait_exit(120)
        one_line_error(code, w.stderr(), "no_such_tools_module", prefix="rewind: ")
        assert not _children(w.pid)
    code, out, err = await rewind(wdir, world.env(wdir), "worker", "--processes", "0")
    one_line_error(code, err, "--processes", "at least 1")
    code, out, err = await rewind(wdir, world.env(wdir, REWIND_WORKER_PROCESSES="many"), "worker")
    one_line_error(code, err, "REWIND_WORKER_PROCESSES", "not a whole number")
