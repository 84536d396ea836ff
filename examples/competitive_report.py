"""The article's pipeline as Rewind pipelines: your own orchestration code, durable.

    rewind demo --pipeline                                   (offline, on the scripted model)
    rewind worker --tool-modules examples.competitive_report
    rewind start --pipeline competitive_report --input '{"companies": ["Acme Robotics", "Globex"]}' --wait

`competitive_report` is the reference design's research pipeline written as
plain code: plan, research every company at once, synthesize, validate the
draft against the facts (back to research for the companies the verdict
names, at most twice), format, save. Every `ctx` call is an activity and a
checkpointed step labelled by the call, so a crash costs no completed call,
`save_report` writes once, and `rewind fork RUN --step K --prompt
synthesize=...` reruns only what comes after step K.

`research_loop` is the research agent of the seed exercise as a pipeline that
writes its own agent loop with `ctx.llm(tools=...)` and `ctx.tool`.
"""

from __future__ import annotations

import asyncio
import json

from pydantic import BaseModel, Field

from examples.research_agent import DEFAULT_COMPANIES, RESEARCH_PROMPT, save_report, search_company
from rewind import OutputInvalid, ToolCallFailed, pipeline

__all__ = ["competitive_report", "research_loop", "search_company", "save_report", "SCRIPT_NAME", "script"]

PLANNER = "You plan competitive research: say what to find out about each company, in one short paragraph."
WRITER = "You write competitive reports for an executive team from the facts you are given, and nothing else."
CHECKER = ("You check a draft report against the facts it was written from. Answer with JSON: "
           '{"ok": true|false, "recheck": [companies whose facts the draft gets wrong], "reason": "..."}.')
FORMATTER = "You format a report for the executive team: a title, a one-line summary, then a section per company."


class Verdict(BaseModel):
    """What the validator says of a draft."""

    ok: bool
    recheck: list[str] = Field(default_factory=list)
    reason: str = ""


@pipeline(description="Research companies in parallel, synthesize, validate against the facts, format, save.")
async def competitive_report(ctx, companies: list[str] = DEFAULT_COMPANIES) -> str:  # noqa: B006 - a JSON default
    plan = await ctx.llm("plan", system=PLANNER, user="Plan a competitive report on: " + ", ".join(companies))
    facts = await _research(ctx, companies)
    draft, verdict = "", Verdict(ok=False)
    for round_ in range(1, 4):  # the first draft and at most two more after research
        draft = await ctx.llm("synthesize", system=WRITER, user=f"Plan: {plan}\n\nFacts:\n{_facts(facts)}")
        try:
            verdict = await ctx.llm("validate", system=CHECKER, output=Verdict,
                                    user=f"Round {round_}. Draft:\n{draft}\n\nFacts:\n{_facts(facts)}")
        except OutputInvalid as exc:  # the checker never answered in shape: ship the draft, say so
            ctx.state["validation"] = f"not validated: {exc}"
            break
        ctx.state["validation"] = verdict.model_dump()
        recheck = [c for c in verdict.recheck if c in facts]
        if verdict.ok or not recheck or round_ == 3:
            break
        facts.update(await _research(ctx, recheck))
    report = await ctx.llm("format", system=FORMATTER, user=draft)
    saved = await ctx.tool("save_report", title="Competitive report: " + ", ".join(companies), content=report)
    ctx.state["saved"] = saved
    return report


async def _research(ctx, companies: list[str]) -> dict[str, str]:
    """Every company at once; one that the search cannot answer (after Temporal's retries) is noted."""
    async def one(company: str) -> str:
        try:
            return await ctx.tool("search_company", company=company)
        except ToolCallFailed as exc:
            return f"no data: {exc}"

    found = await asyncio.gather(*(one(c) for c in companies))
    ctx.state.setdefault("researched", [])
    ctx.state["researched"] = sorted(set(ctx.state["researched"]) | set(companies))
    return dict(zip(companies, found))


def _facts(facts: dict[str, str]) -> str:
    return "\n".join(f"- {company}: {fact}" for company, fact in sorted(facts.items()))


@pipeline(description="The research agent as your own loop: the model picks tools until it answers.")
async def research_loop(ctx, task: str, max_turns: int = 20) -> str:
    messages = [{"role": "system", "content": RESEARCH_PROMPT}, {"role": "user", "content": task}]
    for _ in range(max_turns):
        reply = await ctx.llm("think", messages=messages, tools=["search_company", "save_report"])
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            return reply.get("content") or ""

        async def answer(call: dict) -> dict:
            function = call["function"]
            try:
                output = await ctx.tool(function["name"], **json.loads(function["arguments"] or "{}"))
            except (ToolCallFailed, ValueError, TypeError) as exc:
                output = f"error: {exc}"
            return {"role": "tool", "tool_call_id": call["id"], "content": str(output)}

        messages.extend(await asyncio.gather(*(answer(c) for c in calls)))
    return "stopped after " + str(max_turns) + " turns without an answer"


# What the scripted offline model answers the pipeline's calls with, by label (`rewind demo --pipeline`).
SCRIPT_NAME = "competitive-report"


def script() -> dict[str, list[dict]]:
    first, second = json.dumps({"ok": False, "recheck": ["Globex"], "reason": "Globex's growth is not in the facts"}), \
        json.dumps({"ok": True, "recheck": [], "reason": "every figure matches the facts"})
    return {
        "plan": [{"content": "For each company: size, revenue, growth and technology; then compare them."}],
        "synthesize": [{"content": "Draft: the five companies compared on revenue, growth and technology."}],
        "validate": [{"content": first, "by_user": {"Round 2.": {"content": second},
                                                    "Round 3.": {"content": second}}}],
        "format": [{"content": "# Competitive report\n\nFive companies, compared for the executive team.\n\n"
                               "## Findings\n\nRevenue, growth and technology, company by company."}],
    }
