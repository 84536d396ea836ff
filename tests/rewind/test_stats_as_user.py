"""`rewind stats` as a user runs it: real runs (a cache hit, a retried tool, a fork
with another model) made with the CLI and a worker as subprocesses, then the
figures of `rewind stats --json` checked against the checkpoints themselves,
read with `rewind show --json` from an empty folder."""

from __future__ import annotations

import json

from as_user import one_line_error, rewind, rewind_json, user_workers

TOOLS = '''
from activities.tools.registry import tool, tool_context


@tool
async def lookup(term: str) -> str:
    """Read-only: a repeat is served from the cache."""
    return f"about {term}"


@tool(side_effects=True, max_attempts=3)
async def flaky_save(text: str) -> str:
    """Fails its first attempt (a provider hiccup): Temporal retries it."""
    if tool_context().attempt == 1:
        raise RuntimeError("temporary outage")
    return f"saved {text}"
'''


async def test_stats_add_up_what_the_checkpoints_say(world) -> None:
    wdir, cli = world.folder("w"), world.folder("cli")
    (wdir / "tools.py").write_text(TOOLS)
    name, other = "stats-" + world.queue, "stats-big-" + world.queue
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}]},
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}, {"name": "flaky_save", "arguments": {"text": "x"}}]},
        {"content": "done"},
    ]
    world.model.add_script(name, script)
    world.model.add_script(other, script)
    prices = {f"script:{name}": {"input": 1.0, "output": 2.0}, f"script:{other}": {"input": 10.0, "output": 20.0}}
    env = world.env(cli)
    run_id = "stats-" + world.queue
    async with user_workers() as start:
        worker = start(wdir, world.env(wdir, REWIND_PRICES=json.dumps(prices)), "--tool-modules", "tools")
        await worker.wait_ready()
        done = await rewind_json(cli, env, "start", "--task", "count me", "--model", f"script:{name}",
                                 "--run-id", run_id, "--wait")
        assert done["status"]["state"] == "completed", done
        forked = await rewind_json(cli, env, "fork", run_id, "--step", "1", "--branch", "big",
                                   "--model", f"script:{other}", "--wait")
        assert forked["branch"] == "big"

    reader = world.folder("reader")  # an empty folder: the store alone
    renv = world.env(reader)
    stats = await rewind_json(reader, renv, "stats", "--run", run_id)
    tree = await rewind_json(reader, renv, "tree", run_id)
    own = [row for rows in tree["branches"].values() for row in rows if row["step_index"] > 0]
    shown = [await rewind_json(reader, renv, "show", row["checkpoint_id"]) for row in own]
    steps = [cp["ledger"]["step"] for cp in shown]

    assert stats["runs"] == 1 and stats["branches"] == 2 and stats["runs_by_state"] == {"completed": 1}
    assert stats["totals"]["steps"] == len(shown) == 3 + 2  # main 1..3, big 2..3 (a fork's first step is timed from nothing on its branch: 3 + 1 step times)
    assert stats["totals"]["total_tokens"] == sum(s["total_tokens"] for s in steps) > 0
    assert abs(stats["totals"]["cost_usd"] - sum(s["cost_usd"] for s in steps)) < 1e-9
    by_model = {m: v["cost_usd"] for m, v in stats["by_model"].items()}
    assert set(by_model) == {f"script:{name}", f"script:{other}"}
    assert by_model[f"script:{other}"] > by_model[f"script:{name}"] > 0  # 10x the price, fewer steps
    assert stats["by_branch"]["big"]["steps"] == 2 and stats["by_branch"]["main"]["steps"] == 3
    # The repeated lookup was served from the cache on both branches; flaky_save retried once on each.
    assert stats["cache_hits"] == sum(s["cache_hits"] for s in steps) == 2
    assert stats["tool_calls"] == sum(s["tool_calls"] for s in steps)
    # Each branch's last checkpoint holds its whole line's tool calls: one retried save each.
    heads = [cp for cp in shown if cp["step_label"] == "final answer"]
    retried = [[r["attempts"] for r in cp["tool_call_cache"] if r.get("attempts", 1) > 1] for cp in heads]
    assert stats["retries"] == {"run_tool flaky_save": 2} and retried == [[2], [2]]
    assert stats["step_time"]["steps"] == 3 + 1 and stats["step_time"]["p95_ms"] >= stats["step_time"]["mean_ms"] > 0

    code, text, _ = await rewind(reader, renv, "stats")
    assert code == 0 and "run_tool flaky_save 2" in text and f"script:{other}" in text
    code, _, err = await rewind(reader, renv, "stats", "--run", "no-such-run")
    one_line_error(code, err, "no checkpoints for run 'no-such-run'", prefix="rewind: ")
    code, _, err = await rewind(reader, renv, "stats", "--run", "../etc")
    one_line_error(code, err, prefix="rewind: ")
