"""`rewind view` at scale: page size and load time for a 2,000-step run with 5 branches.

Builds the run with the store API alone (`record_parts` + `CheckpointStore.save_step`,
what the mirror does): `main` with 2,000 steps, each an assistant tool call and a
~1 KB tool result, and four forks of 200 steps each from steps 400, 800, 1,200
and 1,600 (2,801 checkpoints). Then it times building the page in this process,
and loads the page in headless Chromium: the wall time of `--dump-dom` (process
start to DOM printed) and the page's own figure, `data-ready-ms` on <body>
(navigation start to the first render done, measured with performance.now()).

    .venv/bin/python -m bench.viewer_size [--steps N] [--fork-steps N] [--keep DIR]

Not part of `bench/run`: it measures the viewer, not the runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from checkpoint_bridge.stores import FileObjectStore
from checkpoint_bridge.projection.projector import record_parts
from checkpoint_bridge.checkpoints.store import CheckpointStore
from checkpoint_bridge.views.viewer import build_view, render_page
from workflows.vocabulary.canonical import cache_key
from workflows.vocabulary.contracts import Ledger, StepRecord, ToolCallLog
from workflows.vocabulary.ids import checkpoint_id

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
RUN = "viewer-scale"


def _text(seed: str, size: int) -> str:
    line = f"{seed}: the quick brown fox jumps over the lazy dog; "
    return (line * (size // len(line) + 1))[:size]


def _record(branch: str, step: int, parent: str | None, total: Ledger) -> tuple[StepRecord, Ledger]:
    step_ledger = Ledger(prompt_tokens=300 + 7 * (step % 50), completion_tokens=20 + step % 13,
                         total_tokens=320 + 7 * (step % 50) + step % 13, cost_usd=0.00002 * (1 + step % 9),
                         model_calls=1 if step else 0, tool_calls=1 if step else 0)
    total = total.plus(step_ledger)
    if step == 0:
        messages = [{"role": "system", "content": "You are a careful research agent."},
                    {"role": "user", "content": "Walk through the archive, one record per step."}]
        calls: list[ToolCallLog] = []
    else:
        call_id = f"call_{branch}_{step}"
        arguments = {"index": step, "branch": branch}
        output = _text(f"record {step} of {branch}", 1000)
        side = step % 10 == 0
        messages = [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "save" if side else "read",
                                                             "arguments": json.dumps(arguments)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": output}]
        calls = [ToolCallLog(step=step, tool_call_id=call_id, tool_name="save" if side else "read",
                             arguments=arguments, output=output, called_at=T0 + timedelta(seconds=step),
                             duration_ms=3, cache_key=cache_key("read", arguments),
                             idempotency_key=f"{RUN}/{branch}/{step}/{call_id}" if side else None,
                             side_effects=side, served_from_cache=step % 7 == 0 and not side)]
    record = StepRecord(
        run_id=RUN, branch_id=branch, step_index=step, parent_id=parent,
        step_label="start" if step == 0 else f"tool:{calls[0].tool_name}#{step}",
        new_messages=messages, new_tool_calls=calls, created_at=T0 + timedelta(seconds=step),
        model="gpt-4o-mini", prompt_tokens=total.prompt_tokens, completion_tokens=total.completion_tokens,
        llm_tokens_used=total.total_tokens, llm_cost_usd=total.cost_usd,
        step_ledger=step_ledger, branch_ledger=total, total_ledger=total,
    )
    return record, total


async def build_store(root: Path, steps: int, fork_steps: int) -> int:
    """The run in a new folder store; returns how many checkpoints it has."""
    store = CheckpointStore(FileObjectStore(root))
    count = 0
    totals: dict[int, Ledger] = {}
    total = Ledger()
    for step in range(steps + 1):
        record, total = _record("main", step, checkpoint_id(RUN, "main", step - 1) if step else None, total)
        totals[step] = total
        await store.save_step(record_parts(record))
        count += 1
    for n, at in enumerate(steps * k // 5 for k in range(1, 5)):
        branch, total = f"fork-{n + 1}", totals[at]
        for step in range(at + 1, at + fork_steps + 1):
            parent = checkpoint_id(RUN, "main" if step == at + 1 else branch, step - 1)
            record, total = _record(branch, step, parent, total)
            await store.save_step(record_parts(record))
            count += 1
    await store.aclose()
    return count


def _chromium_load(page: Path, hash_: str) -> tuple[float, int, str]:
    """(wall seconds of --dump-dom, the page's data-ready-ms, the DOM)."""
    profile = tempfile.mkdtemp(prefix="viewer-bench-profile-")
    try:
        t = time.perf_counter()
        out = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             "--virtual-time-budget=30000", "--dump-dom", page.as_uri() + hash_],
            capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(r'data-ready-ms="(\d+)"', out.stdout)
    if not found:
        raise RuntimeError(f"the page never said it was ready; chromium stderr: {out.stderr[-2000:]}")
    return wall, int(found.group(1)), out.stdout


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--fork-steps", type=int, default=200)
    parser.add_argument("--keep", type=Path, help="keep the store and the page in this folder")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    root = work / "store"
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    checkpoints = await build_store(root, args.steps, args.fork_steps)
    built_s = time.perf_counter() - t
    store = CheckpointStore(FileObjectStore(root))
    t = time.perf_counter()
    view = await build_view(store, RUN)
    data_s = time.perf_counter() - t
    t = time.perf_counter()
    html = render_page(view).encode("utf-8")
    render_s = time.perf_counter() - t
    await store.aclose()
    page = work / f"{RUN}.html"
    page.write_bytes(html)
    blank = work / "blank.html"  # Chromium's own start-up and exit, for comparison
    blank.write_text('<!DOCTYPE html><body data-ready-ms="0">')
    blank_wall = sorted(_chromium_load(blank, "")[0] for _ in range(3))[1]
    content = sum(len(json.dumps(m)) for cp in view["checkpoints"] for m in cp["m"][1])
    loads = {}
    for name, hash_ in (("overview", ""), ("last step", f"#step=main:{args.steps}"),
                        ("diff", "#diff=main..fork-4")):
        runs = [_chromium_load(page, hash_) for _ in range(3)]
        walls = sorted(r[0] for r in runs)
        readies = sorted(r[1] for r in runs)
        loads[name] = {"dump_dom_wall_s": round(walls[1], 3), "ready_ms": readies[1],
                       "dom_elements": runs[0][2].count("<")}
    print(json.dumps({
        "checkpoints": checkpoints, "branches": len(view["branches"]), "store_build_s": round(built_s, 2),
        "build_view_s": round(data_s, 2), "render_page_s": round(render_s, 3), "page_bytes": len(html),
        "message_content_bytes": content, "page_over_content": round(len(html) / content, 3),
        "chromium_median_of_3": loads, "chromium_blank_page_wall_s": round(blank_wall, 3),
        "page": str(page) if args.keep else None,
    }, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
