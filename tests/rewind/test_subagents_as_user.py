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

COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Stark"]
TASK = "Research these companies: " + ", ".join(COMPANIES)

TOOLS = '''
import asyncio, json, os
from pathlib import Path

from rewind import subagent, tool


@tool(timeout_s=60)
async def search_company(company: str) -> str:
    """Look up public facts about one company."""
    log = Path(os.environ["SEARCH_LOG"])
    with log.open("a") as f:
        f.write(company + "\\n")
    await asyncio.sleep(float(os.environ.get("SEARCH_DELAY_S") or "0"))
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
