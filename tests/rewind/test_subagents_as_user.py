"""Sub-agents as a user meets them: an orchestrator fans out to five company
researchers in one step and synthesizes; the worker and `rewind` run as
subprocesses in empty folders, configured by environment only.

The tools module below is a user's: a search that logs every execution to a
file (so a test can count them), a researcher sub-agent and an orchestrator.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from as_user import one_line_error, rewind, rewind_json, user_workers

from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from checkpoint_bridge.views.viewer import build_view

COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Stark"]
TASK = "Research these companies: " + ", ".join(COMPANIES)

TOOLS = '''
import asyncio, json, os
from pathlib import Path

from rewind import subagent, tool


@tool(timeout_s=60)
async def search_company(company: str) -> str:
    """Look up public facts about one company."""
    if company in (os.environ.get("SLOW_COMPANIES") or "").split(","):
        await asyncio.sleep(float(os.environ.get("SEARCH_DELAY_S") or "0"))
    # Logged when it completes: an execution a crash interrupted does not count.
    with Path(os.environ["SEARCH_LOG"]).open("a") as f:
        f.write(company + "\\n")
    return json.dumps({"company": company, "revenue_musd": len(company) * 10, "growth_pct": 5,
                       "employees": 100, "founded": 2000, "tech_stack": "Rust", "patents": 7})


research_company = subagent(
    name="research_company",
    description="Research one company and return a short profile.",
    system_prompt="You research one company with search_company, then answer with a short profile.",
    tools=["search_company"],
    model=os.environ.get("RESEARCHER_MODEL") or None,
    max_steps=5,
)

orchestrator = subagent(
    name="orchestrator",
    description="Research several companies in parallel and synthesize.",
    system_prompt="You give each company to research_company in one step, then synthesize their answers.",
    tools=["research_company"],
    max_steps=6,
)
'''


def _searches(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _model_requests(world, system_part: str) -> list[dict]:
    return [r for r in world.model.requests()
            if any(system_part in (m.get("content") or "") for m in r["messages"] if m["role"] == "system")]


async def test_an_orchestrator_fans_out_to_five_sub_agents_and_synthesizes(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log)), "--tool-modules", "team")
        await worker.wait_ready()
        done = await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "fan-1",
                                 "--wait")
        assert done["status"]["state"] == "completed", done
        answer = done["final_answer"]
        assert answer.startswith("Synthesis of 5 companies") and "5 of 5 researched" in answer, answer
        for company in COMPANIES:
            assert f"{company} (business)" in answer, answer
        assert sorted(_searches(log)) == sorted(COMPANIES)  # every search ran once

        # The orchestrator's prompt came from its declaration, the researchers' from theirs.
        assert len(_model_requests(world, "You give each company")) == 2
        assert len(_model_requests(world, "You research one company")) == 10

        tree = await rewind_json(cli, env, "tree", "fan-1")
        subs = sorted(b for b in tree["branches"] if b != "main")
        assert len(subs) == 5 and all(b.startswith("main.s1-") for b in subs), subs
        for b in subs:
            info = tree["branch_info"][b]
            assert info["subagent"]["agent"] == "research_company" and info["subagent"]["called_by"] == "fan-1:main:1"
            assert info["subagent"]["state"] == "completed"
        code, text, _ = await rewind(cli, env, "tree", "fan-1")
        assert code == 0 and "sub-agent research_company" in text, text
        # Nested under the step that called it: each sub-agent's lines follow main's step 1.
        lines = text.splitlines()
        step1 = next(i for i, line in enumerate(lines) if " main " in line and line.split()[0] == "1")
        step2 = next(i for i, line in enumerate(lines) if " main " in line and line.split()[0] == "2")
        assert all(step1 < i < step2 for i, line in enumerate(lines) if "sub-agent research_company" in line), text

        # The fan-out step's checkpoint records each call's sub-run, state and result.
        fan = await rewind_json(cli, env, "show", "fan-1:main:1")
        calls = [r for r in fan["tool_call_cache"] if r["tool_name"] == "research_company"]
        assert len(calls) == 5
        for r in calls:
            assert r["subagent"]["state"] == "completed" and r["subagent"]["branch_id"] in subs
            assert "(business)" in r["tool_output"]
        code, text, _ = await rewind(cli, env, "show", "fan-1:main:1")
        assert code == 0 and "sub-agent" in text and "completed" in text, text
        # A sub-agent's own checkpoint: `show` takes its id.
        sub = await rewind_json(cli, env, "show", f"fan-1:{subs[0]}:2")
        assert sub["agent"]["name"] == "research_company" and sub["agent"]["called_by"] == "fan-1:main:1"

        # Totals: the parent's are the whole tree's (every model call's tokens and cost).
        final = await rewind_json(cli, env, "show", "fan-1:main:2")
        heads = [await rewind_json(cli, env, "show", f"fan-1:{b}:2") for b in subs]
        total = final["ledger"]["total"]
        assert total["model_calls"] == 2 + sum(h["ledger"]["total"]["model_calls"] for h in heads) == 12
        own = sum(r["usage"]["total_tokens"] for r in (x["response"] for x in world.model.requests()))
        assert total["total_tokens"] == own == final["llm_tokens_used"]
        assert total["subagent_calls"] == 5
        stats = await rewind_json(cli, env, "stats", "--run", "fan-1")
        assert stats["totals"]["total_tokens"] == own, stats  # counted once, not twice
        assert stats["by_agent"]["research_company"]["branches"] == 5 and stats["subagent_calls"] == 5
        # Cost too: the caller's total is what every model call of the tree cost, each once.
        assert total["cost_usd"] > 0 and abs(stats["totals"]["cost_usd"] - total["cost_usd"]) < 1e-12

        # The viewer draws each sub-agent's run from the caller's step that called it.
        page = await rewind_json(cli, env, "view", "fan-1", "--out", str(tmp_path / "fan.html"))
        assert page["branches"] == 6
        async with open_checkpoint_store(f"file://{tmp_path / 'store'}") as store:
            view = await build_view(store, "fan-1")
        lanes = {b["id"]: b for b in view["branches"]}
        caller = next(i for i, c in enumerate(view["checkpoints"]) if c["id"] == "fan-1:main:1")
        for b in subs:
            assert lanes[b]["kind"] == "subagent" and lanes[b]["agent"] == "research_company"
            assert lanes[b]["caller"] == caller and lanes[b]["origin"] == "main:1"
        assert [n["name"] for n in view["names"]] == ["main"]  # sub-agents are not diffed against their caller


async def _tree(cli, env, run_id: str) -> dict:
    return await rewind_json(cli, env, "tree", run_id)


def _heads(tree: dict) -> dict[str, dict]:
    """Each stored branch's newest row."""
    return {b: rows[-1] for b, rows in tree["branches"].items()}


async def _until(predicate, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while True:
        found = await predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        await asyncio.sleep(0.25)


def _researcher_requests(world, company: str) -> list[dict]:
    task = f"Research {company} and return a short profile."
    return [r for r in world.model.requests() if any(m["role"] == "user" and m.get("content") == task for m in r["messages"])]


async def test_a_worker_killed_while_two_sub_agents_run_loses_nothing(world, tmp_path) -> None:
    first_dir, second_dir, cli = world.folder("worker-a"), world.folder("worker-b"), world.folder("cli")
    for d in (first_dir, second_dir):
        (d / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    env = world.env(cli)
    slow = {"Umbrella", "Stark"}
    async with user_workers() as start:
        # On the first worker two searches hang; it is killed while they do.
        first = start(first_dir, world.env(first_dir, SEARCH_LOG=str(log), SLOW_COMPANIES=",".join(sorted(slow)),
                                           SEARCH_DELAY_S="60"), "--tool-modules", "team")
        await first.wait_ready()
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "crash-1")

        async def three_done() -> bool:
            if not (tmp_path / "store").exists():
                return False
            heads = _heads(await _tree(cli, env, "crash-1"))
            done = [b for b, h in heads.items() if b != "main" and h["step_label"] == "final answer"]
            return len(done) == 3 and len(_searches(log)) == 3

        await _until(three_done, "three sub-agents answer while two searches hang")
        before = {c: len(_researcher_requests(world, c)) for c in COMPANIES}
        orchestrator_calls = len(_model_requests(world, "You give each company"))
        first.kill()
        second = start(second_dir, world.env(second_dir, SEARCH_LOG=str(log)), "--tool-modules", "team")
        await second.wait_ready()

        async def completed() -> dict | None:
            view = await rewind_json(cli, env, "status", "crash-1")
            return view if view["state"] == "completed" else None

        view = await _until(completed, "the run completes on the second worker", 180)
    assert "5 of 5 researched" in view["status"]["final_answer"]
    assert sorted(_searches(log)) == sorted(COMPANIES)  # each search completed once
    for company in set(COMPANIES) - slow:
        assert before[company] == 2 == len(_researcher_requests(world, company)), company  # no model call again
    assert orchestrator_calls == 1 and len(_model_requests(world, "You give each company")) == 2


def _researcher_script(failing: str) -> list[dict]:
    """A researcher model: one search per company, then the search's result; `failing` gets a 400."""
    first = {c: {"tool_calls": [{"name": "search_company", "arguments": {"company": c}}]} for c in COMPANIES}
    first[failing] = {"error": {"status": 400, "message": f"This model refuses to research {failing}."}}
    return [{"by_user": first, "content": "no company named"}, {"content": None, "echo_tool_results": True}]


def _call_of(checkpoint: dict, company: str) -> dict:
    return next(r for r in checkpoint["tool_call_cache"] if r["tool_name"] == "research_company"
                and company in r["tool_input"]["task"])


async def test_a_failed_sub_agent_is_its_calls_error_and_redo_runs_only_it(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    script = "researcher-" + world.queue
    world.model.add_script(script, _researcher_script("Initech"))
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log), RESEARCHER_MODEL=f"script:{script}"),
                       "--tool-modules", "team")
        await worker.wait_ready()
        done = await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "fail-1",
                                 "--wait")
        assert done["status"]["state"] == "completed", done
        answer = done["final_answer"]
        assert "4 of 5 researched" in answer and "Initech: no answer" in answer and "answered 400" in answer, answer
        assert sorted(_searches(log)) == sorted(set(COMPANIES) - {"Initech"})
        fan = await rewind_json(cli, env, "show", "fail-1:main:1")
        failed = _call_of(fan, "Initech")
        assert failed["subagent"]["state"] == "failed" and "refuses to research Initech" in failed["error"]
        assert all(_call_of(fan, c)["subagent"]["state"] == "completed" for c in set(COMPANIES) - {"Initech"})

        # Redo the failed call with a model that answers: only it runs again.
        world.model.reset()
        world.model.add_script(script, _researcher_script("Initech"))
        redone = await rewind_json(cli, env, "redo", "fail-1", "--step", "1", "--call", failed["tool_call_id"],
                                   "--model", "gpt-4o-mini", "--branch", "fixed", "--wait")
        assert redone["status"]["state"] == "completed", redone
        assert "5 of 5 researched" in redone["final_answer"], redone["final_answer"]
        assert sorted(_searches(log)) == sorted(COMPANIES)  # one new search: Initech's
        assert {r["model"] for r in world.model.requests()} == {"gpt-4o-mini"}  # no other researcher ran
        assert len(_researcher_requests(world, "Initech")) == 2
        assert len([r for r in world.model.requests() if r not in _researcher_requests(world, "Initech")]) == 1
        step = await rewind_json(cli, env, "show", "fail-1:fixed:1")
        again = _call_of(step, "Initech")
        assert again["subagent"]["state"] == "completed" and again["redo_of"] == "fail-1:main:1"
        assert again["subagent"]["branch_id"].startswith("fixed.s1-")
        kept = [r for r in step["tool_call_cache"] if r.get("answered_from")]
        assert len(kept) == 4 and all(r["answered_from"] == "fail-1:main:1" for r in kept)

        diff = await rewind_json(cli, env, "diff", "fail-1", "main", "fixed")
        (pair,) = diff["redone"]
        assert pair["tool_call_id"] == failed["tool_call_id"]
        assert "refuses to research Initech" in pair["a"]["result"] and "Initech (business)" in pair["b"]["result"]
        code, text, _ = await rewind(cli, env, "diff", "fail-1", "main", "fixed")
        assert code == 0 and "redone" in text and "Initech (business)" in text, text

        # Bad input: one line each.
        code, _, err = await rewind(cli, env, "redo", "fail-1", "--step", "1", "--call", "call_9_9")
        one_line_error(code, err, "has no tool call 'call_9_9'", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "redo", "fail-1", "--step", "0", "--call", failed["tool_call_id"])
        one_line_error(code, err, "made no tool calls", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "redo", "fail-1", "--step", "1", "--call", failed["tool_call_id"],
                                    "--branch", "fixed")
        one_line_error(code, err, "already has a branch 'fixed'", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "rollback", "fail-1", "--step", "1", "--branch", again["subagent"]["branch_id"])
        one_line_error(code, err, "is a sub-agent's run", "rewind redo", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "start", "--agent", "nobody", "--task", "t")
        one_line_error(code, err, "declares an agent 'nobody'", prefix="rewind: ")
        code, _, err = await rewind(cli, env, "start", "--agent", "search_company", "--task", "t")
        one_line_error(code, err, "is a tool, not an agent", prefix="rewind: ")


async def test_a_fork_after_the_fan_out_reuses_and_redo_runs_one_sub_agent_with_a_new_prompt(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log)), "--tool-modules", "team")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "re-1", "--wait")
        world.model.reset()
        forked = await rewind_json(cli, env, "fork", "re-1", "--step", "1", "--branch", "terse", "--wait",
                                   "--system-prompt", "You give each company to research_company; be terse.")
        assert forked["status"]["state"] == "completed"
        assert len(_searches(log)) == 5  # 0 sub-agent calls ran again
        assert [r for r in world.model.requests() if "research_company" not in r["tools"]] == []
        assert len(world.model.requests()) == 1  # the orchestrator's synthesis only

        world.model.reset()
        fan = await rewind_json(cli, env, "show", "re-1:main:1")
        call = _call_of(fan, "Globex")
        prompt = "You are a technical analyst: report the technical angle of one company, using search_company."
        redone = await rewind_json(cli, env, "redo", "re-1", "--step", "1", "--call", call["tool_call_id"],
                                   "--system-prompt", prompt, "--wait")
        assert redone["status"]["state"] == "completed"
        assert _searches(log).count("Globex") == 2 and len(_searches(log)) == 6  # exactly the redone one's search
        researcher = [r for r in world.model.requests() if "research_company" not in r["tools"]]
        assert len(researcher) == 2 and all(r["messages"][0]["content"] == prompt for r in researcher)
        assert "Globex (technical)" in redone["final_answer"] and "Acme (business)" in redone["final_answer"]


async def test_sub_agents_that_use_up_the_budget_pause_the_tree_until_it_is_raised(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log)), "--tool-modules", "team")
        await worker.wait_ready()
        # What the steps cost, from a run without a budget (the scripted model is deterministic).
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "ref-1", "--wait")
        tree = await _tree(cli, env, "ref-1")
        first_step = (await rewind_json(cli, env, "show", "ref-1:main:1"))["ledger"]["step"]
        orchestrator = first_step["total_tokens"] - first_step["subagent_total_tokens"]
        researcher = max([(await rewind_json(cli, env, "show", f"ref-1:{b}:1"))["ledger"]["step"]["total_tokens"]
                          for b in tree["branches"] if b != "main"])
        # Each of the five gets a fifth of what is left after the orchestrator's call: enough for
        # its first step, not for a second one as large.
        budget = orchestrator + 5 * (researcher * 3 // 2)
        world.model.reset()
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "budget-1",
                          "--max-tokens", str(budget))

        async def paused() -> dict | None:
            view = await rewind_json(cli, env, "status", "budget-1")
            subs = (view.get("status") or {}).get("subagents") or []
            return view if len(subs) == 5 and all(s["state"] == "budget_exceeded" for s in subs) else None

        view = await _until(paused, "every sub-agent pauses for its share of the budget")
        assert view["state"] == "budget_exceeded" and "sub-agent research_company" in view["status"]["budget_reason"]
        code, text, _ = await rewind(cli, env, "status", "budget-1")
        assert code == 0 and "budget_exceeded" in text and "rewind continue budget-1" in text, text
        spent_before = sum(r["response"]["usage"]["total_tokens"] for r in world.model.requests())
        assert spent_before <= budget

        done = await rewind_json(cli, env, "continue", "budget-1", "--max-tokens", str(budget * 10), "--wait")
        assert done["status"]["state"] == "completed", done
        assert "5 of 5 researched" in done["final_answer"]
        assert sorted(_searches(log)) == sorted(COMPANIES * 2)  # the reference run's and this one's
        total = sum(r["response"]["usage"]["total_tokens"] for r in world.model.requests())
        assert done["status"]["total_tokens"] == total  # the tree's tokens, once each
        final = await rewind_json(cli, env, "show", "budget-1:main:2")
        assert final["ledger"]["total"]["total_tokens"] == total


async def test_cancelling_or_deleting_the_caller_takes_its_sub_agents_along(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log), SLOW_COMPANIES="Acme", SEARCH_DELAY_S="120"),
                       "--tool-modules", "team")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "stop-1")

        async def four_done() -> dict | None:
            view = await rewind_json(cli, env, "status", "stop-1")
            subs = (view.get("status") or {}).get("subagents") or []
            return view if sum(s["state"] == "completed" for s in subs) == 4 else None

        view = await _until(four_done, "four sub-agents complete while Acme's search hangs")
        (running,) = [s for s in view["status"]["subagents"] if s["state"] == "running"]
        code, text, _ = await rewind(cli, env, "status", "stop-1")
        assert code == 0 and f"sub-agent    research_company call {running['tool_call_id']}: running" in text, text
        await rewind_json(cli, env, "cancel", "stop-1")

        async def cancelled() -> dict | None:
            sub = await rewind_json(cli, env, "status", "stop-1", "--branch", running["branch_id"])
            return sub if sub["state"] == "cancelled" else None

        await _until(cancelled, "the running sub-agent is cancelled with its caller")
        assert (await rewind_json(cli, env, "status", "stop-1"))["state"] == "cancelled"

        deleted = await rewind_json(cli, env, "delete", "stop-1", "--yes")
        (erased,) = deleted["runs"]
        assert sum(w.startswith("stop-1--main.s1-") for w in erased["workflows"]) == 5, erased
        assert "stop-1" in erased["workflows"]
        code, _, err = await rewind(cli, env, "status", "stop-1", "--branch", running["branch_id"])
        one_line_error(code, err, prefix="rewind: ")
        code, _, err = await rewind(cli, env, "tree", "stop-1")
        one_line_error(code, err, "no checkpoints for run 'stop-1'", prefix="rewind: ")


APPROVING = '''
import os
from pathlib import Path

from rewind import subagent, tool, tool_context


@tool(side_effects=True, needs_approval=True)
async def place_order(item: str) -> str:
    """Order an item: a person approves every order."""
    out = Path(os.environ["ORDERS"])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{tool_context().idempotency_key}.txt").write_text(item)
    return f"ordered {item}"


buyer = subagent(name="buyer", description="Buy one item.", system_prompt="You buy what you are asked to.",
                 tools=["place_order"], model=os.environ.get("BUYER_MODEL"))
'''


def _shop(world, tmp_path: Path, tools: str) -> tuple[Path, dict, Path, str]:
    """A boss that sends a buyer sub-agent for a chair: (cli folder, its env, the orders folder, the boss's script)."""
    (world.folder("worker") / "shop.py").write_text(tools)
    buyer, boss = "buyer-" + world.queue, "boss-" + world.queue
    world.model.add_script(buyer, [{"tool_calls": [{"name": "place_order", "arguments": {"item": "chair"}}]},
                                   {"content": None, "echo_tool_results": True}])
    world.model.add_script(boss, [{"tool_calls": [{"name": "buyer", "arguments": {"task": "Buy a chair."}}]},
                                  {"content": None, "echo_tool_results": True}])
    cli = world.folder("cli")
    return cli, world.env(cli), tmp_path / "orders", boss


async def test_an_approval_inside_a_sub_agent_is_pending_and_decided_as_any_other(world, tmp_path) -> None:
    cli, env, orders, boss = _shop(world, tmp_path, APPROVING)
    async with user_workers() as start:
        worker = start(world.folder("worker"), world.env(world.folder("worker"), ORDERS=str(orders),
                                                         BUYER_MODEL=f"script:buyer-{world.queue}"), "--tool-modules", "shop")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--task", "Get me a chair", "--tools", "buyer", "--model", f"script:{boss}",
                          "--run-id", "shop-1")

        async def waiting() -> dict | None:
            view = await rewind_json(cli, env, "status", "shop-1")
            return view if view["state"] == "waiting_for_approval" else None

        await _until(waiting, "the caller shows that its sub-agent waits for approval")
        listed = await rewind_json(cli, env, "pending")
        (call,) = listed["waiting"]
        assert call["tool_name"] == "place_order" and call["branch_id"].startswith("main.s1-")
        assert not orders.exists()
        # Decided naming the run alone: the call is found in the sub-agent that waits.
        decided = await rewind_json(cli, env, "approve", "shop-1", call["tool_call_id"], "--by", "ops")
        assert decided["verdict"] == "approved"

        async def completed() -> dict | None:
            view = await rewind_json(cli, env, "status", "shop-1")
            return view if view["state"] == "completed" else None

        done = await _until(completed, "the run completes after the approval")
    assert done["status"]["final_answer"] == "ordered chair"
    assert [p.read_text() for p in orders.iterdir()] == ["chair"]


async def test_an_experiment_and_a_fork_vary_a_sub_agents_model(world, tmp_path) -> None:
    work, cli = world.folder("worker"), world.folder("cli")
    (work / "team.py").write_text(TOOLS)
    log = tmp_path / "searches.log"
    script = "terse-" + world.queue
    world.model.add_script(script, _researcher_script("nobody"))
    env = world.env(cli)
    async with user_workers() as start:
        worker = start(work, world.env(work, SEARCH_LOG=str(log)), "--tool-modules", "team")
        await worker.wait_ready()
        await rewind_json(cli, env, "start", "--agent", "orchestrator", "--task", TASK, "--run-id", "exp-1", "--wait")
        world.model.reset()
        world.model.add_script(script, _researcher_script("nobody"))
        status = await rewind_json(cli, env, "experiment", "exp-1", "--step", "0", "--id", "subs",
                                   "--variant", "declared:model=gpt-4o-mini",
                                   "--variant", f"scripted:sub.research_company.model=script:{script}", "--wait")
        assert status["state"] == "completed", status
        branches = {b["variant"]: b["branch"] for b in status["branches"]}
        tree = await _tree(cli, env, "exp-1")
        models = {}
        for variant, branch in branches.items():
            subs = [b for b in tree["branches"] if b.startswith(branch + ".s1-")]
            assert len(subs) == 5, (variant, sorted(tree["branches"]))
            models[variant] = {(await rewind_json(cli, env, "show", f"exp-1:{b}:2"))["model"] for b in subs}
        assert models == {"declared": {"gpt-4o-mini"}, "scripted": {f"script:{script}"}}

        forked = await rewind_json(cli, env, "fork", "exp-1", "--step", "0", "--branch", "alt", "--wait",
                                   "--subagent", f"research_company.model=script:{script}")
        assert forked["status"]["state"] == "completed"
        subs = [b for b in (await _tree(cli, env, "exp-1"))["branches"] if b.startswith("alt.s1-")]
        assert {(await rewind_json(cli, env, "show", f"exp-1:{b}:2"))["model"] for b in subs} == {f"script:{script}"}
        code, _, err = await rewind(cli, env, "fork", "exp-1", "--step", "0", "--branch", "bad",
                                    "--subagent", "research_company.temperature=2")
        one_line_error(code, err, "AGENT.model or AGENT.system_prompt", prefix="rewind")


async def test_an_effect_a_sub_agent_caused_is_reused_when_a_rollback_asks_for_it_again(world, tmp_path) -> None:
    cli, env, orders, boss = _shop(world, tmp_path, APPROVING.replace("needs_approval=True", "on_repeat='reuse'"))
    async with user_workers() as start:
        worker = start(world.folder("worker"), world.env(world.folder("worker"), ORDERS=str(orders),
                                                         BUYER_MODEL=f"script:buyer-{world.queue}"), "--tool-modules", "shop")
        await worker.wait_ready()
        done = await rewind_json(cli, env, "start", "--task", "Get me a chair", "--tools", "buyer", "--model",
                                 f"script:{boss}", "--run-id", "again-1", "--wait")
        assert done["final_answer"] == "ordered chair"
        back = await rewind_json(cli, env, "rollback", "again-1", "--step", "0", "--wait")
        assert back["status"]["state"] == "completed"
        # The rollback lists the sub-agent's order among the effects after step 0 ...
        assert [(e["tool_name"], e["arguments"]) for e in back["side_effects"]] == [("place_order", {"item": "chair"})]
        # ... and the continuation's new sub-agent run reuses it: one chair ordered in all.
        assert len(list(orders.iterdir())) == 1
        tree = await _tree(cli, env, "again-1")
        (again,) = [b for b in tree["branches"] if b.startswith("main.r1.s1-")]
        step = await rewind_json(cli, env, "show", f"again-1:{again}:1")
        (order,) = step["tool_call_cache"]
        assert order["reused"]["origin"] == "discarded" and order["tool_output"] == "ordered chair"
