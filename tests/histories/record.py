"""Record real AgentWorkflow histories for the replay tests.

    .venv/bin/python tests/histories/record.py [SCENARIO ...]

Runs each scenario (or only the named ones) against a fresh dev server, worker and scripted model, and
writes one JSON history per workflow run into this folder. Re-record only on
purpose: the point of the files is that they come from the code as it was.
After a change to the loop's logic, guard it with `workflow.patched(...)` so
these old histories still replay, then record new ones next to them.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]

from activities.model.llm import ModelEndpoint  # noqa: E402
from activities.code.graphs import find_langchain  # noqa: E402
from activities.code.pipelines import PipelineRegistry  # noqa: E402
from activities.tools.registry import ToolRegistry  # noqa: E402
from rewind import fork, redo, rollback  # noqa: E402
from checkpoint_bridge.checkpoints.store import open_checkpoint_store  # noqa: E402
from rewind.client import connect, graph_input, pipeline_input, start_run  # noqa: E402
from rewind.settings.config import Settings  # noqa: E402
from rewind.temporal.dev_server import DevServer  # noqa: E402
from rewind.worker.scripted_model import ScriptedModelServer  # noqa: E402
from workflows.vocabulary.contracts import AgentInput, AgentStatus, ApprovalDecision, RunLimits  # noqa: E402
from workflows.vocabulary.experiments import ExperimentInput, ExperimentStatus, Variant, experiment_workflow_id  # noqa: E402
from workflows.vocabulary.wire import EXPERIMENT_STATUS_QUERY, EXPERIMENT_WORKFLOW, RAISE_EXPERIMENT_BUDGET_SIGNAL  # noqa: E402

TASK = "Research these companies: Acme, Globex, Initech."


async def _save_chain(client, workflow_id: str, name: str) -> None:  # type: ignore[no-untyped-def]
    run_id = None
    index = 0
    runs = []
    while True:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        runs.append(history)
        first = history.events[0].workflow_execution_started_event_attributes
        run_id = first.continued_execution_run_id or None
        if not run_id:
            break
    for index, history in enumerate(reversed(runs)):
        suffix = f"-{index}" if len(runs) > 1 else ""
        (HERE / f"{name}{suffix}.json").write_text(json.dumps(json.loads(history.to_json()), indent=1))
        print(f"recorded {name}{suffix}.json ({len(history.events)} events)")


async def _decide(handle, call: str, **decision) -> None:  # type: ignore[no-untyped-def]
    while not any(p.tool_call_id == call for p in (await handle.query("status", result_type=AgentStatus)).pending_approvals):
        await asyncio.sleep(0.05)
    await handle.execute_update("decide_tool_call", ApprovalDecision(tool_call_id=call, **decision))


async def main(only: set[str]) -> None:
    def want(name: str) -> bool:
        return not only or name in only

    tmp = Path(tempfile.mkdtemp(prefix="rewind-record-"))
    os.environ.update({"REWIND_OUTBOX": str(tmp / "outbox"), "REWIND_DEMO_FAILURE_RATE": "0",
                       "REWIND_TEST_EVENTS": str(tmp / "events.jsonl"), "REWIND_TEST_OUTBOX": str(tmp / "test-outbox")})
    server = DevServer.start(tmp / "temporal.db", headless=True)
    model = ScriptedModelServer()
    model.start_in_thread()
    # Payloads stay under the external-storage threshold, so these histories
    # replay without the payload store.
    settings = Settings(temporal_address=server.address, task_queue="record", store_url=f"file://{tmp / 'store'}",
                        payload_url=f"file://{tmp / 'payloads'}", home=tmp, sticky_timeout_s=1.0)
    from rewind.worker.main import build_worker

    try:
        client = await connect(settings)
        registry = ToolRegistry.from_modules(["examples.research_agent", "agent_tools"])
        endpoint = ModelEndpoint(base_url=model.base_url, api_key="x")
        pipelines = PipelineRegistry.from_modules(["agent_pipelines", "agent_graphs"])
        registry = ToolRegistry.from_modules(["examples.research_agent", "agent_tools", "agent_graphs"],
                                             finders=[find_langchain])
        async with build_worker(client, settings, registry, endpoint, pipelines=pipelines):
            short = await start_run(client, settings, AgentInput(run_id="hist-short", task=TASK))
            await short.result()
            if want("short"):
                await _save_chain(client, short.id, "short")

            model.add_script("long", [{"tool_calls": [{"name": "lookup", "arguments": {"term": f"t{i % 7}"}},
                                                      {"name": "blob", "arguments": {"index": i, "size": 300}}]}
                                      for i in range(24)] + [{"content": "finished"}])
            long = await start_run(client, settings, AgentInput(run_id="hist-long", task="long", model="script:long",
                                                                limits=RunLimits(max_steps=40)))
            await long.result()
            if want("long"):
                await _save_chain(client, long.id, "long")
            # The same run since history says each fact of a step once (workflows/vocabulary/said_once.py).
            if want("said-once"):
                await _save_chain(client, long.id, "said-once")

            can = await start_run(client, settings, AgentInput(run_id="hist-can", task="can", model="script:long",
                                                               limits=RunLimits(max_steps=40), history_limit_bytes=25_000))
            await can.result()
            if want("continued-as-new"):
                await _save_chain(client, can.id, "continued-as-new")

            async with open_checkpoint_store(settings.store_url) as store:
                forked = await fork(client, settings, store, "hist-short", 1, branch="technical",
                                    system_prompt="Emphasize technical analysis over business metrics.")
                await forked.handle.result()
            if want("forked"):
                await _save_chain(client, forked.workflow_id, "forked")
            # The same fork since SEEDED_TOOLS_PATCH: its first model call goes out while it describes its tools.
            if want("forked-seeded-tools"):
                await _save_chain(client, forked.workflow_id, "forked-seeded-tools")

            model.add_script("bad", [{"tool_calls": [{"name": "lookup", "arguments": "{nope"},
                                                     {"name": "nope", "arguments": {}},
                                                     {"name": "always_fails", "arguments": {}},
                                                     {"name": "send_email", "arguments": {"to": "a@b", "body": "x"}}]},
                                     {"content": "ok"}])
            bad = await start_run(client, settings, AgentInput(run_id="hist-bad-output", task="bad", model="script:bad"))
            await bad.result()
            if want("bad-output"):
                await _save_chain(client, bad.id, "bad-output")

            paused = await start_run(client, settings, AgentInput(run_id="hist-budget", task=TASK,
                                                                  limits=RunLimits(max_steps=1)))
            while (await paused.query("status", result_type=AgentStatus)).state != "budget_exceeded":
                await asyncio.sleep(0.1)
            await paused.signal("raise_limits", RunLimits(max_steps=10))
            await paused.result()
            if want("budget-continue"):
                await _save_chain(client, paused.id, "budget-continue")

            # Tool outputs by reference (>= 512 B), a cache hit on one, tool schemas by digest.
            model.add_script("refs", [{"tool_calls": [{"name": "blob", "arguments": {"index": i % 3, "size": 900}}]}
                                      for i in range(5)] + [{"content": "finished"}])
            refs = await start_run(client, settings, AgentInput(run_id="hist-refs", task="refs", model="script:refs",
                                                                limits=RunLimits(max_steps=10)))
            await refs.result()
            if want("outputs-by-reference"):
                await _save_chain(client, refs.id, "outputs-by-reference")

            # Approvals: two parallel calls (one approved with edited arguments, one rejected),
            # then a call whose tool's rule on the arguments asks for a decision.
            model.add_script("approval", [
                {"tool_calls": [{"name": "wire_money", "arguments": {"to": "bob", "amount_cents": 900}},
                                {"name": "wire_money", "arguments": {"to": "eve", "amount_cents": 5}}]},
                {"tool_calls": [{"name": "refund", "arguments": {"customer": "acme", "amount_cents": 50000}}]},
                {"content": "ok"}])
            gated = await start_run(client, settings, AgentInput(run_id="hist-approval", task="pay", model="script:approval"))
            await _decide(gated, "call_0_0", verdict="approve", by="alice", arguments={"to": "bob", "amount_cents": 800})
            await _decide(gated, "call_0_1", verdict="reject", by="alice", reason="unknown payee")
            await _decide(gated, "call_1_0", verdict="approve", by="bob")
            await gated.result()
            if want("approval"):
                await _save_chain(client, gated.id, "approval")

            # A rollback past an invoice; the continuation asks for it again and reuses it.
            model.add_script("invoice", [{"tool_calls": [{"name": "lookup", "arguments": {"term": "acme"}}]},
                                         {"tool_calls": [{"name": "send_invoice",
                                                          "arguments": {"customer": "acme", "amount_cents": 1200}}]},
                                         {"content": "sent"}])
            billed = await start_run(client, settings, AgentInput(run_id="hist-reuse", task="bill", model="script:invoice"))
            await billed.result()
            async with open_checkpoint_store(settings.store_url) as store:
                back = await rollback(client, settings, store, "hist-reuse", 1)
                await back.continued.handle.result()
            if want("reused-effect"):
                await _save_chain(client, back.continued.workflow_id, "reused-effect")

            # Recorded with Rewind's search attributes on: RewindState upserted as the run waits for
            # decisions, pauses for its budget and completes; every activity with a summary.
            indexed = await start_run(client, settings, AgentInput(run_id="hist-indexed", task="pay", model="script:approval",
                                                                   limits=RunLimits(max_steps=1)))
            await _decide(indexed, "call_0_0", verdict="approve", by="alice")
            await _decide(indexed, "call_0_1", verdict="reject", by="alice", reason="unknown payee")
            while (await indexed.query("status", result_type=AgentStatus)).state != "budget_exceeded":
                await asyncio.sleep(0.1)
            await indexed.signal("raise_limits", RunLimits(max_steps=10))
            await _decide(indexed, "call_1_0", verdict="approve", by="bob")
            await indexed.result()
            if want("indexed"):
                await _save_chain(client, indexed.id, "indexed")

            # An experiment: 2 variants x 2 from step 1 of the short run, a budget that pauses its
            # branches, then raised; a scorer over the branches (a child workflow).
            experiment = await client.start_workflow(
                EXPERIMENT_WORKFLOW, ExperimentInput(
                    experiment_id="hist", run_id="hist-short", step=1, repeat=2, max_cost_usd=0.0002,
                    variants=[Variant(name="same"), Variant(name="tech", system_prompt="Take a technical angle.", seed=3)],
                    scorer="agent_tools:answer_length"),
                id=experiment_workflow_id("hist"), task_queue=settings.task_queue, result_type=ExperimentStatus)
            while (await experiment.query(EXPERIMENT_STATUS_QUERY, result_type=ExperimentStatus)).state not in (
                    "budget_exceeded", "completed"):
                await asyncio.sleep(0.1)
            await experiment.signal(RAISE_EXPERIMENT_BUDGET_SIGNAL, 1.0)
            await experiment.result()
            if want("experiment"):
                await _save_chain(client, experiment.id, "experiment")

            # Sub-agents: three calls of one step (two of an argument model, one task-only), each a
            # child workflow; one of the children recorded too; then a redo of one call.
            model.add_script("fanout", [
                {"by_user": {"Look up a": {"tool_calls": [{"name": "lookup", "arguments": {"term": "a"}}]},
                             "Look up b": {"tool_calls": [{"name": "lookup", "arguments": {"term": "b"}}]},
                             "go deep": {"content": "deep answer"}},
                 "tool_calls": [{"name": "looker", "arguments": {"term": "a"}},
                                {"name": "looker", "arguments": {"term": "b", "limit": 2}},
                                {"name": "nest_d", "arguments": {"task": "go deep"}}]},
                {"content": None, "echo_tool_results": True}])
            fan = await start_run(client, settings, AgentInput(run_id="hist-subagents", task="fan", model="script:fanout",
                                                               tools=["looker", "nest_d"]))
            await fan.result()
            async with open_checkpoint_store(settings.store_url) as store:
                again = await redo(client, settings, store, "hist-subagents", 1, "call_0_1", model="script:fanout")
                await again.handle.result()
            if want("subagents"):
                await _save_chain(client, fan.id, "subagents")
                await _save_chain(client, "hist-subagents--main.s1-call_0_0", "subagent-child")
                await _save_chain(client, again.workflow_id, "redo")

            # A pipeline whose steps ride on its model calls (PIPELINE_CARRIED_CHECKPOINTS_PATCH): model
            # calls in a row, a lookup, a sleep; then a fork of it from its second draft.
            model.add_script("drafts", {"draft": [{"content": "better"}], "final": [{"content": "done"}]})
            drafts = await start_run(client, settings, pipeline_input(settings, "drafts", {"rounds": 3},
                                                                      model="script:drafts", run_id="hist-drafts"))
            await drafts.result()
            async with open_checkpoint_store(settings.store_url) as store:
                redrafted = await fork(client, settings, store, "hist-drafts", 2, branch="again",
                                       prompts={"draft": "Be brief."})
                await redrafted.handle.result()
            if want("pipeline-carried"):
                await _save_chain(client, drafts.id, "pipeline-carried")
            if want("pipeline-forked"):
                await _save_chain(client, redrafted.workflow_id, "pipeline-forked")

            # A graph (tests/agent_graphs.py): a call-level node, a node-level node, a Send fan-out, the
            # Store; its steps ride on its calls (GRAPH_CARRIED_CHECKPOINTS_PATCH); then a fork of it.
            model.add_script("graph", {"plan": [{"content": "tea, cake"}], "explain": [{"content": "sweet"}]})
            graphed = await start_run(client, settings, graph_input(settings, "agent_graphs:graph", {"topic": "food"},
                                                                    model="script:graph", run_id="hist-graph"))
            await graphed.result()
            async with open_checkpoint_store(settings.store_url) as store:
                regraphed = await fork(client, settings, store, "hist-graph", 3, branch="again",
                                       variables={"sizes": [9, 9]})
                await regraphed.handle.result()
            if want("graph-run"):
                await _save_chain(client, graphed.id, "graph-run")
            if want("graph-forked"):
                await _save_chain(client, regraphed.workflow_id, "graph-forked")
    finally:
        model.stop_thread()
        server.stop()


if __name__ == "__main__":
    asyncio.run(main(set(sys.argv[1:])))
    os._exit(0)  # see rewind/cli.py: avoid the native runtime's shutdown race
