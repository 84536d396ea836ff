"""13. The large seeded soak: runs under random crashes, restarts and outages (docs/soak.md).

`bench/soak` as its own process, at the large size (120 runs of every shape, over
1,000 faults: worker and Temporal kills, S3 refusing, timing out and answering
500/503, the model answering 429/500 or hanging, tools raising, timing out and
returning malformed output), every run checked against an undisturbed run of its
shape. Full mode only: CI runs a small soak of its own, with a seed that changes
per commit (.ci/run). A violation makes this section fail, with its replay command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.common import REPO, Section, log

RUNS, CONCURRENCY, FAULTS, WORKERS, MINUTES = 120, 8, 1100, 3, 40.0


def _seed() -> int:
    """The commit's seed (as .ci/run derives it), so a report names a reproducible soak."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, cwd=REPO,
                              check=True).stdout.strip()
        return int(head, 16) % 10**6
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 1


def _report(stdout: str) -> dict | None:  # type: ignore[type-arg]
    """The soak's JSON report: the whole of stdout, or (should anything else reach its
    stdout) the document that starts on a line of its own."""
    try:
        return json.loads(stdout)
    except ValueError:
        pass
    start = stdout.find("\n{\n")
    if start >= 0:
        try:
            return json.loads(stdout[start:])
        except ValueError:
            return None
    return None


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    sec = Section("soak", "13. Soak: random faults against undisturbed runs", __doc__.split("\n\n", 1)[1].replace("\n", " "))
    if suite.quick:
        sec.notes.append("Not run in quick mode: .ci/run runs a small soak of its own (12 runs, ~40 faults).")
        return sec
    seed = _seed()
    argv = ["bench/soak", "--seed", str(seed), "--runs", str(RUNS), "--concurrency", str(CONCURRENCY),
            "--faults", str(FAULTS), "--workers", str(WORKERS), "--minutes", f"{MINUTES:g}", "--json"]
    log(f"soak: {' '.join(argv)}")
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         timeout=3 * 3600)
    # Both streams kept whole: a 40-minute soak whose report is lost cannot be looked at again.
    (suite.tmp / "soak.stdout").write_text(out.stdout)
    (suite.tmp / "soak.stderr").write_text(out.stderr)
    log(f"soak: exit {out.returncode}; its output in {suite.tmp / 'soak.stdout'} and soak.stderr")
    for line in out.stderr.splitlines():
        if line.startswith("kept "):  # a failed soak's folder: its processes' logs, ledger and stores
            log(f"soak: {line}")
    report = _report(out.stdout)
    if report is None:
        raise RuntimeError(f"bench/soak exited {out.returncode} without a report (stdout: {out.stdout[:500]!r}; "
                           f"all of it in {suite.tmp / 'soak.stdout'}): {out.stderr[-3000:]}")
    return soak_section(sec, report, seed, out.returncode)


def soak_section(sec: Section, report: dict, seed: int, returncode: int = 0) -> Section:  # type: ignore[type-arg]
    """The section's tables from the soak's report. A violation (or an injector error)
    fails the section, its runs and faults listed below the tables."""
    sec.data = {k: v for k, v in report.items() if k not in ("schedule", "folder")}
    sec.table("The soak", ["seed", "runs", "faults injected", "soak wall", "the same runs undisturbed", "extra wall"],
              [[seed, f"{report['runs_done']}/{report['runs']}", report["faults"], f"{report['soak_wall_s']} s",
                f"~{report['undisturbed_estimate_s']} s",
                f"{report['soak_wall_s'] / max(report['undisturbed_estimate_s'], 0.1):.1f}x"]])
    sec.table("Runs by shape", ["shape", "runs"], [[k, v] for k, v in sorted(report["shapes"].items())])
    sec.table("Faults by kind", ["fault", "injected"], [[k, v] for k, v in report["faults_by_kind"].items()])
    sec.table("Invariants", ["invariant", "checks", "violations"],
              [[name, c["checks"], c["violations"]] for name, c in report["checks"].items()])
    violations = sum(c["violations"] for c in report["checks"].values())
    sec.headline.append(["13 soak", f"{report['runs_done']} runs under {report['faults']} faults (seed {seed}): "
                         "invariant violations", f"{sum(c['checks'] for c in report['checks'].values()):,} checks",
                         f"**{violations}**", "0", "met" if violations == 0 else "**not met**"])
    sec.verdicts.append(
        f"{report['runs_done']} runs, {report['faults']} faults, {violations} violations; the faults cost "
        f"{report['soak_wall_s']} s of wall time against ~{report['undisturbed_estimate_s']} s for the same runs "
        f"undisturbed; {report['retries_by_driver']} driver retries, {report['worker_restarts']} workers that exited on "
        f"their own started again; S3 was down {report.get('downtime', {}).get('s3', 0):.0%} and Temporal "
        f"{report.get('downtime', {}).get('temporal', 0):.0%} of the soak. Replay: `{report['replay']}`.")
    if violations or report["injector_errors"] or returncode != 0:
        sec.table("Violations", ["invariant", "run", "what"],
                  [[v["check"], v["run"], v["what"][:300]] for v in report["violations"]]
                  + [["injector", "–", e[:300]] for e in report["injector_errors"]])
        sec.error = (f"the soak found {violations} violation(s) and {len(report['injector_errors'])} injector "
                     f"error(s), exit {returncode} (replay: {report['replay']}); listed below the tables")
        return sec
    print(f"soak seed {seed}: 0 violations", file=sys.stderr)
    return sec
