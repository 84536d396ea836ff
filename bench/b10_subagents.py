"""10. Sub-agents: the wall time of N parallel sub-agent calls against one, and what a
call adds to its caller's history.

An orchestrator's one step calls the `helper` sub-agent N times (N = 1 and 5, and 10
in full mode); each helper's run is two model calls around one `nap` tool call of
1 s, against a scripted model that takes 100 ms per call. The same shape
with plain tool calls (the orchestrator calling `nap` N times) is the baseline of
the history figure: bytes of the caller's history per call, from its events.
Baseline of the wall-time figure: the run with one sub-agent call.
"""

from __future__ import annotations

import time
import uuid

from bench.common import Section, history_events, log, rewind_worker, start_agent

NAP_S = 1.0
MODEL_MS = 100.0


def _script(model, calls: int, *, subagents: bool) -> str:  # type: ignore[no-untyped-def]
    name = f"fan-{calls}-{uuid.uuid4().hex[:6]}"
    tool = "helper" if subagents else "nap"
    def arguments(i: int) -> dict:
        return {"task": f"item {i}."} if subagents else {"label": f"{name}-{i}", "seconds": NAP_S}
    by_user = {f"item {i}.": {"tool_calls": [{"name": "nap", "arguments": {"label": f"{name}-{i}", "seconds": NAP_S}}]}
               for i in range(calls)}
    model.add_script(name, [{"by_user": by_user, "tool_calls": [{"name": tool, "arguments": arguments(i)} for i in range(calls)]},
                            {"content": "done"}])
    return f"script:{name}"


async def _one(client, settings, model, calls: int, *, subagents: bool) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    name = _script(model, calls, subagents=subagents)
    started = time.perf_counter()
    handle = await start_agent(client, settings, name, 3, tools=["helper" if subagents else "nap"])
    result = await handle.result()
    wall = time.perf_counter() - started
    assert result.status.state == "completed", result.status
    events = await history_events(client, handle.id)
    return wall, sum(e.ByteSize() for e in events)


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    sec = Section("subagents", "Sub-agents: parallel fan-out and history", __doc__.split("\n\n", 1)[1].strip())
    server = suite.shared_temporal()
    client = await suite.client(server)
    settings = suite.settings(server, "subagents")
    model = suite.model(latency_ms=MODEL_MS)
    counts = [1, 5] if suite.quick else [1, 5, 10]
    rows, walls, sizes, plain = [], {}, {}, {}
    async with rewind_worker(client, settings, model):
        for n in counts:
            walls[n], sizes[n] = min([await _one(client, settings, model, n, subagents=True)
                                      for _ in range(1 if suite.quick else 3)])
            _, plain[n] = await _one(client, settings, model, n, subagents=False)
            log(f"subagents: {n} call(s): {walls[n]:.2f} s, caller history {sizes[n]:,} B (plain tools {plain[n]:,} B)")
    one = walls[1]
    for n in counts:
        rows.append([n, f"{walls[n]:.2f} s", f"{walls[n] / one:.2f}x", f"{sizes[n]:,}", f"{plain[n]:,}"])
    sec.table("N sub-agent calls in one step (each: model, nap, model)",
              ["calls", "wall time", "vs one call", "caller history bytes", "same with N plain tool calls"], rows)
    last = counts[-1]
    per_call = (sizes[last] - sizes[1]) / (last - 1)
    per_tool = (plain[last] - plain[1]) / (last - 1)
    sec.data = {"walls": walls, "history_bytes": sizes, "plain_history_bytes": plain, "per_call_bytes": per_call,
                "per_tool_call_bytes": per_tool}
    ratio = walls[5] / one
    sec.headline.append(["subagents", "5 parallel sub-agents vs 1 (wall time)", f"{walls[5]:.2f} s vs {one:.2f} s",
                         f"{ratio:.2f}x", "about 1x (the slowest)", "yes" if ratio <= 1.5 else "no"])
    sec.headline.append(["subagents", "caller history per sub-agent call", f"{per_call:,.0f} B",
                         f"{per_call / per_tool:.2f}x a plain tool call ({per_tool:,.0f} B)", "-", "-"])
    sec.verdicts.append(f"{last} parallel sub-agents took {walls[last] / one:.2f}x the time of one "
                        f"({walls[last]:.2f} s vs {one:.2f} s): they run at once, not one after another")
    sec.notes.append(f"a sub-agent call adds {per_call:,.0f} bytes to its caller's history (start, started and "
                     f"completed events of the child workflow: its input and its result with the run's status), "
                     f"{per_call / per_tool:.1f}x the {per_tool:,.0f} bytes of a plain tool call")
    return sec
