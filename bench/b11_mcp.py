"""11. MCP tool calls: the per-call overhead of an MCP server's tool against a @tool
function doing the same work.

The same scripted run (model call, then one tool call, every step; scripted model at
0 ms), on one in-process worker that has both: the bench's @tool functions and the
tools of a stdio MCP server started by the worker (bench/mcp_blob_server.py, the
official SDK on both ends). Two kinds of call:
  read-only    `blob` (@tool) against `bench__blob` (readOnlyHint: true), distinct
               arguments every step (no cache hits)
  side effect  `record` (@tool side_effects=True) against `bench__record` (no
               annotations: a non-idempotent side effect, so each call pings the server
               and marks the request as sent in the payload store before sending it)
Per-call figure: the tool activity's start-to-close time from history (median over
every call of every run); per-step figure: model activity scheduled to the next one.
"""

from __future__ import annotations

import sys
import time
import uuid

from activities.model.llm import ModelEndpoint
from activities.tools.mcp.config import McpServerConfig
from activities.tools.mcp.tools import McpHub
from activities.tools.registry import ToolRegistry
from bench.common import REPO, TOOLS_MODULE, Section, activity_profile, history_events, log, median, ms, start_agent
from rewind.temporal.timing import step_marks
from workflows.vocabulary.wire import RUN_TOOL

VARIANTS = {
    "tool_read": ("blob", lambda i: {"index": i, "size": 256}),
    "mcp_read": ("bench__blob", lambda i: {"index": i, "size": 256}),
    "tool_effect": ("record", lambda i: {"index": i}),
    "mcp_effect": ("bench__record", lambda i: {"index": i}),
}


def _script(model, tool: str, args, steps: int) -> str:  # type: ignore[no-untyped-def]
    name = f"mcp-{tool}-{uuid.uuid4().hex[:8]}"
    turns = [{"tool_calls": [{"name": tool, "arguments": args(i)}]} for i in range(steps - 1)] + [{"content": "done"}]
    model.add_script(name, turns)
    return f"script:{name}"


async def _one(client, settings, model, variant: str, steps: int) -> dict:  # type: ignore[no-untyped-def]
    tool, args = VARIANTS[variant]
    handle = await start_agent(client, settings, _script(model, tool, args, steps), steps, tools=[tool])
    result = await handle.result()
    assert result.status.state == "completed" and result.status.step == steps, result.status
    assert result.status.ledger.cache_hits == 0, result.status
    events = await history_events(client, handle.id)
    marks = step_marks(events, "call_llm")
    runs = _tool_runs(events)
    assert len(runs) == steps - 1, (variant, len(runs))
    return {"step_s": [b - a for a, b in zip(marks, marks[1:])][:-1], "tool_ms": runs,
            "profile": activity_profile(events)}


def _tool_runs(events) -> list[float]:  # type: ignore[no-untyped-def]
    """Start-to-close of every run_tool activity (ms)."""
    from temporalio.api.enums.v1 import EventType

    tools: set[int] = set()
    started: dict[int, float] = {}
    out = []
    for e in events:
        t = e.event_time.ToDatetime().timestamp()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == RUN_TOOL:
                tools.add(e.event_id)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started[e.activity_task_started_event_attributes.scheduled_event_id] = t
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in tools and sid in started:
                out.append((t - started[sid]) * 1000)
    return out


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    from worker import build_worker

    steps, reps = (12, 2) if suite.quick else (40, 3)
    sec = Section("mcp", "11. MCP tool calls against @tool functions", __doc__.split("\n\n", 1)[1].strip())
    server = suite.shared_temporal()
    client = await suite.client(server)
    settings = suite.settings(server, "mcp")
    model = suite.model(0)
    hub = McpHub([McpServerConfig(name="bench", transport="stdio", command=sys.executable,
                                  args=("-m", "bench.mcp_blob_server"), cwd=str(REPO), where="bench: mcp")],
                 log_dir=suite.tmp)
    registry = ToolRegistry.from_modules([TOOLS_MODULE, "bench.mcp_tools"])
    try:
        for t in await hub.start():
            registry.add(t)
        async with build_worker(client, settings, registry, ModelEndpoint(base_url=model.base_url, api_key="x"),
                                mcp=hub):
            for variant in VARIANTS:  # warm-up: connections, imports, the session's first calls
                await _one(client, settings, model, variant, 3)
            runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
            for rep in range(reps):
                log(f"mcp: repetition {rep + 1}/{reps}")
                for variant in VARIANTS:  # interleaved
                    runs[variant].append(await _one(client, settings, model, variant, steps))
    finally:
        await hub.close()
        suite.stop_model(model)

    st = {}
    for variant, rs in runs.items():
        st[variant] = {"tool_ms": median([x for r in rs for x in r["tool_ms"]]),
                       "step_ms": ms(median([x for r in rs for x in r["step_s"]])),
                       "calls": sum(len(r["tool_ms"]) for r in rs)}
    sec.data = {"steps": steps, "reps": reps, "stats": st}
    rows = []
    for kind, tool_v, mcp_v in (("read-only", "tool_read", "mcp_read"), ("side effect", "tool_effect", "mcp_effect")):
        a, b = st[tool_v], st[mcp_v]
        rows.append([kind, f"{a['tool_ms']:.2f}", f"{b['tool_ms']:.2f}", f"+{b['tool_ms'] - a['tool_ms']:.2f}",
                     f"{b['tool_ms'] / a['tool_ms']:.2f}x", f"{a['step_ms']:.1f}", f"{b['step_ms']:.1f}",
                     f"{b['step_ms'] / a['step_ms']:.2f}x", a["calls"] + b["calls"]])
        sec.headline.append(["mcp", f"MCP {kind} call vs @tool (tool activity, median)",
                             f"{b['tool_ms']:.2f} ms vs {a['tool_ms']:.2f} ms (+{b['tool_ms'] - a['tool_ms']:.2f} ms)",
                             f"{b['step_ms'] / a['step_ms']:.2f}x per step", "-", "-"])
    sec.table("Per call and per step (ms, medians)",
              ["kind", "@tool call", "MCP call", "MCP adds", "call ratio", "@tool step", "MCP step", "step ratio",
               "calls measured"], rows)
    sec.notes.append("an MCP side effect that is not idempotent pays a ping and a write of its sent mark to the "
                     "payload store before it is sent (what makes it never sent twice); a read-only call is one "
                     "request/response over the worker's session")
    return sec
