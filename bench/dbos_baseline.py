"""Baseline (d): the same scripted loop as a DBOS Transact workflow on SQLite.

DBOS is what a user picks for durable steps without a server: each model call
and each tool call is a `@DBOS.step()`, checkpointed into a SQLite system
database before the workflow goes on, so a crashed process resumes from its
last completed step. DBOS is a process-wide singleton (one configuration,
one registry, background threads), so the baseline runs in a process of its
own, as DBOS applications do:

    python -m bench.dbos_baseline BASE_URL MODEL DB_PATH MAX_STEPS RUNS

It runs the loop RUNS times (the first one a warm-up, not reported) and
prints one JSON line: per-step seconds of each measured run (model call start
to next model call start, as for the other baselines), wall time, steps, the
database's bytes and the number of steps DBOS recorded.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.baselines import _assistant, _first_messages, _run_tool, _schemas
from bench.common import TOOLS_MODULE


def dbos_available() -> str | None:
    """None if DBOS imports, else why not."""
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        return f"dbos not installed ({exc}); `pip install -e '.[bench]'`"
    return None


def main(base_url: str, model: str, db: Path, max_steps: int, runs: int) -> dict[str, Any]:
    import openai
    from dbos import DBOS, DBOSConfig

    from activities.tools.registry import ToolRegistry

    registry = ToolRegistry.from_modules([TOOLS_MODULE])
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    tools = _schemas(registry)
    marks: list[float] = []
    loop = asyncio.new_event_loop()  # the @tool functions are async

    @DBOS.step()
    def model_step(messages: list[dict[str, Any]]) -> dict[str, Any]:
        marks.append(time.perf_counter())
        raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, tools=tools)
        return _assistant(raw.http_response.json())

    @DBOS.step()
    def tool_step(call: dict[str, Any]) -> dict[str, Any]:
        return loop.run_until_complete(_run_tool(registry, call))

    @DBOS.workflow()
    def agent(task: str) -> int:
        messages, steps = _first_messages(task), 0
        for _ in range(max_steps):
            reply = model_step(messages)
            messages.append(reply)
            steps += 1
            calls = reply.get("tool_calls") or []
            if not calls:
                break
            messages.extend(tool_step(c) for c in calls)
        return steps

    config: DBOSConfig = {"name": "rewind-bench", "system_database_url": f"sqlite:///{db}"}
    DBOS(config=config)
    DBOS.launch()
    measured = []
    try:
        for i in range(runs):
            marks.clear()
            started = time.perf_counter()
            handle = DBOS.start_workflow(agent, "benchmark run")
            steps = handle.get_result()
            marks.append(time.perf_counter())
            if i:  # the first run warms imports, connections and the database up
                measured.append({"durations": [b - a for a, b in zip(marks, marks[1:])],
                                 "wall_s": time.perf_counter() - started, "steps": steps,
                                 "workflow_id": handle.get_workflow_id()})
    finally:
        DBOS.destroy()
        loop.close()
        client.close()
    with sqlite3.connect(db) as conn:
        recorded = conn.execute("SELECT count(*) FROM operation_outputs").fetchone()[0]
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    return {"runs": measured, "db_bytes": size, "recorded_steps": recorded}


if __name__ == "__main__":
    url, name, path, steps, count = sys.argv[1:6]
    out = main(url, name, Path(path), int(steps), int(count))
    print(json.dumps(out))
    sys.stdout.flush()
