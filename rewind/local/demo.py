"""`rewind demo`: the whole embedded stack and the research agent in one command.

Starts a Temporal dev server (state in .rewind/temporal.db), the scripted
offline model (unless OPENAI_API_KEY is set), a worker with the research
tools, runs the agent on five companies with live progress and the model's
text as it writes it (the offline model streams at DEMO_PACE unless
REWIND_SCRIPTED_TOKENS_PER_S says), then prints the report and where the
run's state lives. Safe to run again: it uses free
ports, stops a dev server left behind by an interrupted demo, and reuses the
state on disk.

With `--approve`, `save_report` waits for a person's approval
(examples.research_with_approval): the demo shows the waiting call and the
`rewind approve` / `rewind reject` commands that decide it from another
terminal, and asks on its own terminal (without one it approves as
"rewind demo", so the flow can be seen in a log).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from examples import competitive_report as report
from examples.fanout_research import FANOUT_TASK
from examples.research_agent import DEFAULT_COMPANIES, DEFAULT_TASK, RESEARCH_PROMPT, outbox_dir
from rewind.client import agent_input, graph_input, new_run_id, pipeline_input, start_run
from rewind.settings.config import Settings
from rewind.temporal.dev_server import port_open
from rewind.progress import follow
from rewind.local.stack import embedded_stack
from rewind.temporal.timing import median_or_none, retried_attempts, step_durations
from rewind.worker.scripted_stream import Pace
from workflows.vocabulary.contracts import AgentInput, AgentResult
from workflows.vocabulary.errors import UsageError

# The offline model's pace in the demo: text one can watch being written (a fast model's), and
# the long report save_report receives as arguments ten times as fast (the demo shows text).
DEMO_PACE = Pace(tokens_per_s=40, arguments_tokens_per_s=400)


async def run_demo(settings: Settings, task: str | None = None, out: TextIO = sys.stdout, *, quiet: bool = False,
                   approve: bool = False, ask: bool | None = None, fanout: bool = False,
                   keep: bool = False, mcp: bool = False, pipeline: bool = False,
                   langgraph: bool = False) -> AgentResult:
    """`quiet` (rewind demo --json): nothing on `out`; the caller prints the result.
    `approve`: save_report waits for approval; `ask` (default: stdin is a terminal) asks
    for the decision there, else the demo approves on its own after showing the call.
    `fanout`: the orchestrator of examples.fanout_research, five researcher sub-agents at once.
    `keep`: the stack (server on TEMPORAL_ADDRESS's port when free, worker) keeps running after
    the run until SIGINT/SIGTERM, so `rewind fork RUN ...` from another shell works.
    `mcp`: the agent of examples.mcp_files_agent, whose only tools are the filesystem MCP server's.
    `pipeline`: examples.competitive_report, the research as your own code (a @pipeline).
    `langgraph`: examples.langgraph_research, the article's LangGraph graph as a durable run."""
    if mcp:
        return await _mcp_demo(settings, task, io.StringIO() if quiet else out)
    if quiet:
        out = io.StringIO()
    if ask is None:
        ask = sys.stdin.isatty() and not quiet
    if langgraph:
        graph = _langgraph_example()
    tools = ["examples.langgraph_research" if langgraph else "examples.competitive_report" if pipeline else
             "examples.fanout_research" if fanout else "examples.research_with_approval" if approve else
             "examples.research_agent"]
    port = None
    if keep:
        wanted = int(settings.temporal_address.rsplit(":", 1)[-1])
        port = wanted if not port_open("127.0.0.1", wanted) else None
    scripts = ({report.SCRIPT_NAME: report.script()} if pipeline else
               {graph.SCRIPT_NAME: graph.script()} if langgraph else None)
    pace = DEMO_PACE if settings.scripted_tokens_per_s is None else None
    async with embedded_stack(settings, tools, out, port=port, shared_server=keep, scripts=scripts, pace=pace) as stack:
        client = stack.client
        run_id = new_run_id()
        if langgraph:
            inp = graph_input(settings, "examples.langgraph_research:agent", graph.TASK, run_id=run_id,
                              model=f"script:{graph.SCRIPT_NAME}" if stack.offline else None)
        elif pipeline:
            model = f"script:{report.SCRIPT_NAME}" if stack.offline else settings.model
            inp = pipeline_input(settings, "competitive_report", {"companies": DEFAULT_COMPANIES}, run_id=run_id,
                                 model=model)
        elif fanout:
            inp = await agent_input(client, settings, "research_orchestrator", task or FANOUT_TASK, run_id=run_id)
        else:
            inp = AgentInput(run_id=run_id, task=task or DEFAULT_TASK, system_prompt=RESEARCH_PROMPT, model=settings.model)
        handle = await start_run(client, settings, inp)
        print(f"run {run_id} started; progress:", file=out)
        decisions: dict[str, asyncio.Future[None]] = {}

        def answer_approvals(view: Any) -> None:
            for p in (view.status.pending_approvals if approve and view.status else []):
                if p.tool_call_id not in decisions:
                    decisions[p.tool_call_id] = asyncio.ensure_future(_decide(client, settings, p, out, ask))

        try:
            result = await follow(client, run_id, handle, out, on_view=answer_approvals,
                                  settings=None if quiet else stack.settings)
        finally:
            for task in decisions.values():
                task.cancel()
        durations = await step_durations(client, run_id)
        retries = await retried_attempts(client, run_id)
        reports = await _reports_of(settings, run_id)
        _report(settings, run_id, result, durations, retries, out, fanout, pipeline, langgraph, keep, reports)
        if keep:
            await _keep_running(stack.settings.temporal_address, wanted if port else None, run_id, out, pipeline)
    return result


async def _keep_running(address: str, default_port: int | None, run_id: str, out: TextIO,
                        pipeline: bool = False) -> None:
    """Until SIGINT/SIGTERM: the stack serves the commands of other shells."""
    import signal

    at = "" if default_port else f"TEMPORAL_ADDRESS={address} "
    change = ('--step 6 --branch shorter --prompt synthesize="Answer in one line."' if pipeline else
              '--step 2 --branch shorter --system-prompt "Answer in one line."')
    print(f"the stack keeps running (Temporal on {address}, the research worker); in another terminal here try:\n"
          f"  {at}rewind fork {run_id} {change} --wait\n"
          f"  {at}rewind diff {run_id} main shorter\n"
          f"Ctrl-C (or kill -TERM {os.getpid()}) stops it.", file=out, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    print("stopping the worker and the server", file=out, flush=True)


def _langgraph_example() -> Any:
    """examples.langgraph_research, or one line on what to install."""
    try:
        from examples import langgraph_research
    except ImportError as exc:
        raise UsageError(f"rewind demo --langgraph needs LangGraph and langchain-openai ({exc}): "
                         "pip install 'rewind-agents[langgraph]'") from None
    return langgraph_research


async def _reports_of(settings: Settings, run_id: str) -> list[Path]:
    """The reports this run saved: the outbox names each by its call's idempotency key, which the
    run's newest checkpoint records (the outbox may hold an earlier demo's reports)."""
    from rewind.stores import checkpoint_store

    async with checkpoint_store(settings) as store:
        head = await store.load_latest(run_id)
    keys = {r.idempotency_key for r in (head.tool_call_cache if head else []) if r.idempotency_key}
    return sorted((p for p in outbox_dir().glob("*.md") if p.stem in keys), key=lambda p: p.stat().st_mtime)


def _report(settings: Settings, run_id: str, result: AgentResult, durations: Any, retries: Any, out: TextIO,
            fanout: bool, pipeline: bool = False, langgraph: bool = False, keep: bool = False,
            reports: list[Path] | None = None) -> None:
    home = settings.home
    print(f"\nfinished: {result.status.state} after {result.status.step} steps, "
          f"{result.status.total_tokens} tokens, ${result.status.cost_usd:.5f}", file=out)
    if retries:
        print("retried by Temporal: " + ", ".join(f"{name} {n}x" for name, n in sorted(retries.items())), file=out)
    median = median_or_none(durations)
    if median is not None:
        print(f"time per agent step (median): {median * 1000:.0f} ms", file=out)
    print(f"\nfinal answer:\n{result.final_answer}\n", file=out)
    if reports:
        print(f"report ({reports[-1]}):\n{reports[-1].read_text()}", file=out)
    print(
        f"state: Temporal history in {home / 'temporal.db'}, checkpoints in {settings.store_url}, "
        f"reports in {outbox_dir()}; inspect it with `rewind tree {run_id}` and `rewind show {run_id}:main:1`",
        file=out,
    )
    if fanout:
        print(f"each sub-agent's run is a branch of {run_id} (`rewind tree {run_id}` nests them under step 1); "
              f"run one call again with `rewind redo {run_id} --step 1 --call CALL_ID`", file=out)
    if langgraph:
        print(f"each super-step of the graph is a step labelled by its node (`rewind tree {run_id}`); "
              f"`rewind fork {run_id} --step 4 --branch doubt --set validation_passed=false` continues from the "
              "validator's step with that channel changed, re-running no node before it", file=out)
    if pipeline:
        print(f"each call of the pipeline's code is a step labelled by the call (`rewind tree {run_id}`); "
              f"`rewind fork {run_id} --step 6 --branch brief --prompt synthesize=\"Be brief.\"` runs the code "
              "again with every call up to step 6 answered from the record", file=out)
    if (fanout or langgraph or pipeline) and not keep:
        # The commands above that start work (redo, fork) need Temporal and a worker, which stop
        # with the demo; `tree` and `show` read the checkpoint store alone.
        print("the stack stops with the demo: run it again with --keep to try the fork or redo above "
              "from another terminal", file=out)


async def _mcp_demo(settings: Settings, task: str | None, out: TextIO) -> AgentResult:
    """The MCP agent on a fresh workspace under .rewind/mcp-demo (needs node and the npm server)."""
    from activities.tools.mcp.config import McpServerConfig
    from examples import mcp_files_agent as agent
    from checkpoint_bridge.views.tool_policy import policy_of

    workspace = (settings.home / "mcp-demo").resolve()
    command = agent.filesystem_server_command(workspace)  # says what is missing before anything starts
    agent.prepare_workspace(workspace)
    server = McpServerConfig(name="fs", transport="stdio", command=command[0], args=tuple(command[1:]),
                             where="rewind demo --mcp: the filesystem server")
    print(f"MCP server fs: {' '.join(command)}", file=out)
    scripts = {agent.SCRIPT_NAME: agent.script_turns(workspace)}
    pace = DEMO_PACE if settings.scripted_tokens_per_s is None else None
    async with embedded_stack(settings, [], out, mcp_servers=[server], scripts=scripts, pace=pace) as stack:
        client = stack.client
        print("tools, as the server's annotations decide them:", file=out)
        for spec in stack.tools:
            print(f"  {spec.name:<32} {policy_of(spec)['label']}", file=out)
        run_id = new_run_id()
        model = f"script:{agent.SCRIPT_NAME}" if stack.offline else settings.model
        inp = AgentInput(run_id=run_id, task=task or agent.TASK, system_prompt=agent.PROMPT, model=model)
        handle = await start_run(client, settings, inp)
        print(f"run {run_id} started; progress:", file=out)
        result = await follow(client, run_id, handle, out, settings=stack.settings)
    print(f"\nfinished: {result.status.state} after {result.status.step} steps, {result.status.ledger.tool_calls} "
          f"tool calls, {result.status.ledger.cache_hits} served from the run's cache", file=out)
    print(f"\nfinal answer:\n{result.final_answer}\n", file=out)
    for name in ("todo.md", "summary.md"):
        path = workspace / name
        if path.exists():
            print(f"{path}:\n{path.read_text()}", file=out)
    print(f"inspect it: `rewind show {run_id}:main:3` (the second read: cached), `rewind show {run_id}:main:4` "
          f"(the edit: its server, annotations and policy); `rewind rollback {run_id} --step 3` re-issues the edit "
          "and reuses it (todo.md keeps one change)", file=out)
    return result


async def _decide(client: Any, settings: Settings, p: Any, out: TextIO, ask: bool) -> None:
    """Show a call that waits for approval and how to decide it, then decide it."""
    from rewind.client import approve, reject
    from workflows.vocabulary.errors import DecisionRefusedError

    brief = {k: (v if len(str(v)) <= 60 else f"{len(str(v)):,} characters") for k, v in p.arguments.items()}
    at = f"TEMPORAL_ADDRESS={settings.temporal_address} "
    print(f"\n{p.tool_name} waits for your approval (step {p.step}, call {p.tool_call_id}, "
          f"idempotency key {p.idempotency_key}): {json.dumps(brief)}\n"
          f"  decide from another terminal:  {at}rewind approve {p.run_id} {p.tool_call_id} [--reason TEXT]\n"
          f"                            or:  {at}rewind reject {p.run_id} {p.tool_call_id} --reason TEXT\n"
          f"  (`{at}rewind pending` lists every call that waits)", file=out, flush=True)
    try:
        if ask:
            answer = (await asyncio.to_thread(input, "  approve it here? [y = approve / n = reject] ")).strip().lower()
            if answer.startswith("n"):
                reason = (await asyncio.to_thread(input, "  reason (the model receives it): ")).strip() or "rejected in the demo"
                await reject(client, p.run_id, p.tool_call_id, reason=reason)
            else:
                await approve(client, p.run_id, p.tool_call_id)
        else:
            print("  (no terminal to ask: the demo approves it as 'rewind demo')", file=out, flush=True)
            await approve(client, p.run_id, p.tool_call_id, by="rewind demo", reason="approved by the demo")
    except DecisionRefusedError as exc:  # decided from another terminal first
        print(f"  {exc}", file=out, flush=True)
