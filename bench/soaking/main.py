"""bench/soak: the seeded soak. See docs/soak.md.

    bench/soak --seed N --runs R --concurrency C --minutes M [--store file|s3] [--json]

Phase 1 runs each shape once undisturbed (the references, and the undisturbed
time per shape); phase 2 runs R runs of shapes drawn from the seed while the
injector plays the seed's fault schedule; then the stack is healed and every
invariant is checked. Exit 0 when nothing was violated, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rewind.client import connect
from rewind.stores import checkpoint_store

from bench.soaking import invariants as inv
from bench.soaking.drive import Outcome, drive
from bench.soaking.faults import Injector, as_json, downtime, schedule
from bench.soaking.shapes import SHAPES, WEIGHTS
from bench.soaking.stack import Stack

TOOL_FAULT_RATE = 0.15
FAULT_GAP_S = 1.5  # the mean time between scheduled faults, at least


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/soak", description="Rewind's seeded soak: runs under random faults, "
                                "each checked against an undisturbed run of its shape.")
    p.add_argument("--seed", type=int, default=None, help="the seed (default: a random one, printed)")
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--minutes", type=float, default=6.0, help="the soak phase's limit: no run starts after it")
    p.add_argument("--faults", type=int, default=None, help="scheduled faults (default: 3 per run)")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--store", choices=("file", "s3"), default="s3")
    p.add_argument("--shapes", default="", help="only these shapes (comma-separated; default: all)")
    p.add_argument("--keep", action="store_true", help="keep the soak's folder (printed)")
    p.add_argument("--json", action="store_true", help="the report as one JSON document on stdout")
    args = p.parse_args(argv)
    if args.runs < 1 or args.concurrency < 1 or args.minutes <= 0 or args.workers < 1:
        p.error("--runs, --concurrency and --workers must be at least 1, --minutes more than 0")
    unknown = set(filter(None, args.shapes.split(","))) - set(SHAPES)
    if unknown:
        p.error(f"unknown shapes {sorted(unknown)}; known: {', '.join(SHAPES)}")
    return args


def replay_command(args: argparse.Namespace) -> str:
    extra = f" --faults {args.faults}" if args.faults is not None else ""
    extra += f" --shapes {args.shapes}" if args.shapes else ""
    return (f"bench/soak --seed {args.seed} --runs {args.runs} --concurrency {args.concurrency} "
            f"--minutes {args.minutes:g} --workers {args.workers} --store {args.store}{extra}")


async def _bounded(limit: asyncio.Semaphore, coro: Any) -> Any:
    async with limit:
        return await coro


async def soak(args: argparse.Namespace, root: Path, say: Any) -> dict[str, Any]:
    rng = random.Random(f"soak-runs-{args.seed}")
    names = [n for n in SHAPES if not args.shapes or n in args.shapes.split(",")]
    plan = [rng.choices(names, [WEIGHTS[n] for n in names])[0] for _ in range(args.runs)]
    stack = Stack(root, store=args.store, workers=args.workers, seed=args.seed, tool_fault_rate=TOOL_FAULT_RATE)
    began = time.time()
    await stack.start()
    try:
        # The driver is this stack's user: its store clients take the credentials from the
        # environment, as a user's shell gives them (without, every S3 read of the driver
        # failed and was retried until the run's deadline).
        os.environ.update({k: v for k, v in stack.env().items() if k.startswith("AWS_")})
        settings = stack.settings()
        client = await connect(settings)
        await stack.wait_workers_ready()
        say(f"stack up in {time.time() - began:.1f}s: Temporal 127.0.0.1:{stack.port}, {args.store} store, "
            f"{args.workers} workers, model {stack.model.base_url}")
        async with checkpoint_store(settings) as store:
            # Phase 1: the references, undisturbed.
            ref_at = time.time()
            limit = asyncio.Semaphore(args.concurrency)
            used = sorted(set(plan))
            refs: list[Outcome] = await asyncio.gather(*(
                _bounded(limit, drive(client, settings, store, SHAPES[n], f"ref-{n}-{args.seed}")) for n in used))
            ref_wall = time.time() - ref_at
            ref_by = {o.shape: o for o in refs}
            say(f"references: {len(refs)} shapes in {ref_wall:.1f}s")
            # Phase 2: the soak.
            est = max(30.0, statistics.mean(o.ended - o.started for o in refs) * len(plan) / args.concurrency * 1.5)
            count = args.faults if args.faults is not None else 3 * args.runs
            # At least FAULT_GAP_S between faults on average: packed into the runs' undisturbed
            # time, 1,100 faults came every 50 ms, and the workers were killed faster than they
            # could start (the first large soak). The runs are spread over the same window.
            window = min(max(est, count * FAULT_GAP_S), args.minutes * 60)
            faults = schedule(args.seed, count, window, s3=args.store == "s3")
            injector = Injector(stack, faults)
            stop = asyncio.Event()
            origin = time.time()
            inject = asyncio.create_task(injector.run(origin, stop))
            cutoff = time.monotonic() + args.minutes * 60
            faults_end = time.monotonic() + window
            run_ids = [f"soak-{k:03d}-{name}-{args.seed}" for k, name in enumerate(plan)]

            async def one(k: int, run_id: str, name: str) -> Outcome | None:
                # Run k starts no sooner than its share of the window, so faults meet runs throughout.
                await asyncio.sleep(max(0.0, origin + k * window * 0.9 / len(plan) - time.time()))
                async with limit:
                    if time.monotonic() > cutoff:
                        return None
                    return await drive(client, settings, store, SHAPES[name], run_id, faults_end)
            outcomes = await asyncio.gather(*(one(k, r, n) for k, (r, n) in enumerate(zip(run_ids, plan))),
                                            return_exceptions=True)
            stop.set()
            await inject
            await injector.settle()
            soak_wall = time.time() - origin
            down = downtime(faults, origin, time.time())
            say(f"soak: {len(plan)} runs in {soak_wall:.1f}s, {sum(f.started is not None for f in faults)} faults "
                f"scheduled and injected; checking")
            report = await check(args, stack, client, store, root, plan, run_ids, outcomes, ref_by, faults, injector,
                                 origin)
            report.update(seed=args.seed, ref_wall_s=round(ref_wall, 1), soak_wall_s=round(soak_wall, 1),
                          undisturbed_estimate_s=round(sum(ref_by[n].ended - ref_by[n].started for n in plan)
                                                       / args.concurrency, 1),
                          replay=replay_command(args), folder=str(root), downtime=down)
            return report
    finally:
        await stack.stop()


async def check(args: argparse.Namespace, stack: Stack, client: Any, store: Any, root: Path, plan: list[str],
                run_ids: list[str], outcomes: list[Any], ref_by: dict[str, Outcome], faults: list[Any],
                injector: Injector, origin: float) -> dict[str, Any]:
    env = stack.env()
    cwd = root / "cli"
    cwd.mkdir(exist_ok=True)
    outcome_check, effects, store_check, liveness = (inv.Check("outcome"), inv.Check("effects"), inv.Check("store"),
                                                     inv.Check("liveness"))
    watch_check = inv.Check("watch")
    settings = stack.settings()
    ledger = inv.read_ledger(stack.ledger)
    ref_heads = {name: {b: inv.snapshot(cp) for b, cp in (await inv.heads(store, o.run_id)).items()}
                 for name, o in ref_by.items()}
    done: list[tuple[str, str, Outcome]] = []
    for run_id, name, outcome in zip(run_ids, plan, outcomes):
        outcome_check.checks += 1
        if outcome is None:
            continue  # not started before --minutes: reported as such
        if isinstance(outcome, BaseException):
            outcome_check.fail(run_id, f"the soak could not drive it: {outcome!r}")
            continue
        for note in outcome.notes:
            outcome_check.fail(run_id, note)
        done.append((run_id, name, outcome))
    # The MCP server's effects, attributed to their calls by idempotency key.
    mcp_runs = [r for r, name, _ in done if name == "mcp"] + [o.run_id for o in ref_by.values() if o.shape == "mcp"]
    mcp_lines, unknown = await inv.mcp_effects(ledger, store, mcp_runs)
    ledger += mcp_lines
    for key in unknown:
        effects.checks += 1
        effects.fail("(MCP)", f"the MCP server applied an effect (idempotency key {key}) that no checkpoint records")
    for run_id, name, outcome in [*done, *((o.run_id, o.shape, o) for o in ref_by.values())]:
        shape = SHAPES[name]
        code, out, err = await inv.rewind_cli(env, cwd, "status", run_id, "--branch", outcome.heads[0], "--json")
        state = json.loads(out).get("state") if code == 0 else None
        outcome_check.checks += 1
        if state != shape.expected_state:
            outcome_check.fail(run_id, f"ended {state!r} (rewind status exit {code} {err.strip()[-200:]}), an undisturbed "
                                       f"run of shape {name} ends {shape.expected_state!r}")
        got = {b: inv.snapshot(cp) for b, cp in (await inv.heads(store, run_id)).items()}
        expected = ref_heads[name]
        outcome_check.checks += 1
        if sorted(got) != sorted(expected):
            outcome_check.fail(run_id, f"branches {sorted(got)}, the reference has {sorted(expected)}")
        for branch in sorted(set(got) & set(expected)):
            outcome_check.checks += 1
            if got[branch] != expected[branch]:
                outcome_check.fail(run_id, f"branch {branch} differs from the reference run: "
                                           f"{inv.first_difference(got[branch], expected[branch])}")
        summaries = await store.list_checkpoints(run_id)
        inv.check_effects(effects, run_id, ledger, summaries, await inv.heads(store, run_id), faults,
                          await inv.recorded_steps(store, summaries))
        await inv.check_store(store_check, store, run_id, env, root / "mirrors")
        await inv.check_watch(watch_check, run_id, outcome.watched, store, settings, client)
    all_ids = [r for r, _, _ in done] + [o.run_id for o in ref_by.values()]
    await inv.check_liveness(liveness, client, all_ids, env, cwd)
    checks = [outcome_check, effects, store_check, liveness, watch_check]
    injected = [f for f in faults if f.started is not None]
    tool_faults = Counter(f"tool_{line['fault']}" for line in ledger if line["kind"] == "start" and line.get("fault"))
    by_kind = Counter(f.kind if f.kind != "s3_window" else f"s3_{f.params['mode']}" for f in injected) + tool_faults
    spans = {o.run_id: (o.started, o.ended) for _, _, o in done}
    violations = []
    for c in checks:
        for run_id, what in c.violations:
            start, end = spans.get(run_id, (origin, time.time()))
            near = [f.line(origin) for f in injected if start - 5 <= f.started <= end + 1]
            violations.append({"check": c.name, "run": run_id, "what": what, "faults_near": near})
    durations = {o.run_id: round(o.ended - o.started, 2) for _, _, o in done}
    return {
        "runs": len(plan), "runs_done": len(done), "shapes": dict(Counter(plan)),
        "faults": sum(by_kind.values()), "faults_by_kind": dict(sorted(by_kind.items())),
        "checks": {c.name: {"checks": c.checks, "violations": len(c.violations)} for c in checks},
        "lines": [c.line() for c in checks], "violations": violations, "injector_errors": injector.errors,
        "schedule": as_json(faults, origin), "run_seconds": durations,
        "ref_seconds": {n: round(o.ended - o.started, 2) for n, o in ref_by.items()},
        "retries_by_driver": sum(o.retries for _, _, o in done), "worker_restarts": injector.restarts,
    }


def text_report(r: dict[str, Any]) -> str:
    out = [f"soak seed {r['seed']}: {r['runs_done']}/{r['runs']} runs ({', '.join(f'{k} {v}' for k, v in r['shapes'].items())}), "
           f"{r['faults']} faults ({', '.join(f'{k} {v}' for k, v in r['faults_by_kind'].items())})",
           f"wall: soak {r['soak_wall_s']}s, the same runs undisturbed ~{r['undisturbed_estimate_s']}s "
           f"(references {r['ref_wall_s']}s); workers that exited on their own and were started again: "
           f"{r['worker_restarts']}",
           f"down: S3 {r['downtime']['s3']:.0%}, Temporal {r['downtime']['temporal']:.0%} of the soak", *r["lines"]]
    for v in r["violations"]:
        out += [f"VIOLATION [{v['check']}] seed {r['seed']} run {v['run']}: {v['what']}",
                "  faults around it:", *(f"    {line}" for line in v["faults_near"] or ["(none)"]),
                f"  replay: {r['replay']}"]
    out += [f"injector: {e}" for e in r["injector_errors"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**6)
    logging.basicConfig(level=logging.WARNING)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True))
    say(f"soak seed {args.seed} (replay: {replay_command(args)})")
    # mkdtemp, not TemporaryDirectory: the latter's finalizer removed a --keep folder at exit.
    root = Path(tempfile.mkdtemp(prefix="rewind-soak-"))
    report = None
    try:
        report = asyncio.run(soak(args, root, say))
    finally:
        # A soak that failed keeps its folder (every process's log, the ledger, the stores):
        # a 40-minute run whose violation cannot be looked into has to be run again.
        failed = report is None or bool(report["violations"] or report["injector_errors"])
        if args.keep or failed:
            say(f"kept {root}" + ("" if args.keep else " (the soak failed: its logs, ledger and stores)"))
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=2) if args.json else text_report(report))
    return 0 if not report["violations"] and not report["injector_errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
