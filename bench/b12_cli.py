"""12. How fast the `rewind` command answers.

Whole-process time of the commands people run dozens of times a day, each a
new Python process started the way the console script starts it, against
`python -c "import asyncio, json"` (the floor of any Python CLI on this
machine) measured in the same rounds. The store is a local folder holding a
finished 3-step run; `status` and `pending` talk to a dev server.

Set REWIND_BENCH_BEFORE=/path/to/another/checkout to time that checkout's
commands in the same rounds (PYTHONPATH points each process at its tree), for
a before/after table of a change. Each tree reads a run of its own, made by its
own worker and `rewind start` in a store folder of its own: an older checkout
cannot read a newer storage format (it says so), and should not have to.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import REPO, Section, WorkerProcess, blob_script, log, median, wait_polling
from rewind.settings.config import Settings

BASELINE = ("python -c 'import asyncio, json'", [sys.executable, "-c", "import asyncio, json"])
# The console script's own code: `from rewind.cli.main import main; sys.exit(main())`.
ENTRY = "import sys; from rewind.cli.main import main; sys.exit(main())"
# (command, target ratio to the baseline)
TARGETS = {"--version": 2.0, "--help": 2.0, "tree": 3.0, "show": 3.0, "status": 4.0, "pending": 4.0}


def _commands(run_id: str) -> list[tuple[str, list[str]]]:
    return [("--version", ["--version"]), ("--help", ["--help"]), ("tree", ["tree", run_id]),
            ("show", ["show", f"{run_id}:main:2", "--json"]), ("status", ["status", run_id]), ("pending", ["pending"])]


async def _finished_run(suite, server, model, tree: Path, env: dict[str, str], home: Path, run_id: str,  # type: ignore[no-untyped-def]
                        script: str) -> None:
    """`run_id`, a finished 3-step run in `env`'s store, made by `tree`'s own worker and CLI."""
    settings = Settings.from_env({**env, "REWIND_HOME": str(suite.tmp / f"cli-worker-home-{tree.name}")})
    worker = WorkerProcess(settings, model, suite.tmp / f"cli-worker-{tree.name}.log", repo=tree,
                           extra_env={"REWIND_STORE": env["REWIND_STORE"], "REWIND_PAYLOADS": env["REWIND_PAYLOADS"]})
    try:
        client = await suite.client(server)
        await wait_polling(client, env["REWIND_TASK_QUEUE"], worker)
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", ENTRY, "start", "--task", "bench the CLI",
                                                        "--model", script, "--run-id", run_id, "--wait"],
                                       env=env, cwd=home, capture_output=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"rewind start ({tree}) exited {done.returncode}: {done.stderr.decode()[-500:]}")
        # The mirror writes the last checkpoint just after the run ends.
        for _ in range(200):
            shown = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", ENTRY, "show", f"{run_id}:main:2"],
                                            env=env, cwd=home, capture_output=True, timeout=60)
            if shown.returncode == 0:
                return
            await asyncio.sleep(0.05)
        raise RuntimeError(f"{run_id}:main:2 never reached {env['REWIND_STORE']} ({tree}): {shown.stderr.decode()[-300:]}")
    finally:
        worker.stop()


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{argv[3:]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    rounds = 5 if suite.quick else 15
    sec = Section("cli", "12. CLI response time",
                  f"Whole-process time of each command (a new process, as the console script runs it), median of "
                  f"{rounds} rounds; every round times the baseline `python -c \"import asyncio, json\"` and each "
                  "command once, interleaved. Local folder store with a finished 3-step run; `status` and `pending` "
                  "ask a dev server.")
    server = suite.start_temporal("cli")
    model = suite.model(0)
    name, _ = blob_script(model, 3, 64)
    home = suite.tmp / "cli-home"
    home.mkdir(exist_ok=True)
    trees = [("this tree", REPO)]
    before = os.environ.get("REWIND_BENCH_BEFORE")
    if before:
        trees.insert(0, ("before", Path(before).resolve()))
    # One run per tree (one Temporal server: the workflow ids must differ).
    run_ids = {tree: f"bench-cli-{'this' if tree == REPO else 'before'}" for _, tree in trees}

    def env_for(tree: Path) -> dict[str, str]:
        own = suite.tmp / f"cli-{'this' if tree == REPO else 'before'}"
        return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                "PYTHONPATH": str(tree), "TEMPORAL_ADDRESS": server.address,
                "REWIND_TASK_QUEUE": f"cli-{'this' if tree == REPO else 'before'}",
                "REWIND_STORE": f"file://{own / 'store'}", "REWIND_PAYLOADS": f"file://{own / 'payloads'}"}

    for _, tree in trees:
        await _finished_run(suite, server, model, tree, env_for(tree), home, run_ids[tree], name)

    times: dict[tuple[str, str], list[float]] = {}
    base: list[float] = []
    for r in range(rounds):
        if r % 5 == 0:
            log(f"cli: round {r + 1}/{rounds}")
        base.append(await asyncio.to_thread(_timed, BASELINE[1], env_for(REPO), home))
        for label, tree in trees:
            for cmd, args in _commands(run_ids[tree]):
                took = await asyncio.to_thread(_timed, [sys.executable, "-c", ENTRY, *args], env_for(tree), home)
                times.setdefault((label, cmd), []).append(took)
    suite.stop_model(model)
    suite.stop_temporal(server)

    b = median(base)
    headers = ["command", *[f"{label} (ms)" for label, _ in trees], *[f"{label} / baseline" for label, _ in trees],
               "target", "met?"]
    rows, data = [], {"baseline_ms": b * 1000, "rounds": rounds, "commands": {}}
    for cmd, _ in _commands(run_ids[REPO]):
        meds = [median(times[(label, cmd)]) for label, _ in trees]
        ratio = meds[-1] / b
        target = TARGETS[cmd]
        data["commands"][cmd] = {label: m * 1000 for (label, _), m in zip(trees, meds)}
        rows.append([f"`rewind {cmd}`",
                     *[f"{m * 1000:.0f}" for m in meds], *[f"{m / b:.1f}x" for m in meds], f"≤ {target:g}x",
                     "met" if ratio <= target else "**not met**"])
        sec.headline.append(["12 CLI", f"`rewind {cmd}` whole process / python -c 'import asyncio, json'",
                             f"{meds[-1] * 1000:.0f} ms / {b * 1000:.0f} ms", f"**{ratio:.1f}x**", f"≤ {target:g}x",
                             "met" if ratio <= target else "**not met**"])
    rows.insert(0, [BASELINE[0], *[f"{b * 1000:.0f}"] * len(trees), *["1.0x"] * len(trees), "–", "–"])
    sec.table("Whole-process time (ms, medians) and ratio to the baseline", headers, rows)
    sec.data = data
    sec.notes.append("What a read-only command loads is guarded by tests/rewind/cli/test_cli_imports.py (which packages, "
                     "not how long): no Temporal client for a command that reads only the store, no S3 client for a "
                     "folder store, no openai outside the worker, no pydantic for --version and --help; `status` of a "
                     "finished run and `pending` without an open run use the SDK's service client, not its Client "
                     "(nor, for `pending`, pydantic).")
    return sec
