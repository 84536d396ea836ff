"""Pipelines the in-process tests run (next to tests/agent_tools.py, whose tools they call)."""

from __future__ import annotations

import asyncio

from activities.code.pipelines import pipeline


@pipeline
async def long_pairs(ctx, pairs: int, size: int = 1500) -> str:
    """`pairs` turns of a model call and a `blob` call; a sleep after the first turn. The blob's
    index comes from ctx.random(), so code run again must draw the same numbers to be answered
    from its record."""
    for turn in range(pairs):
        await ctx.llm("think", user=f"turn {turn}")
        drawn = int(ctx.random() * 1_000_000)
        await ctx.tool("blob", index=drawn, size=size)
        ctx.state.setdefault("drawn", []).append(drawn)
        if turn == 0:
            await ctx.sleep(1)
    return f"{pairs} turns"


@pipeline
async def gathered(ctx, terms: list[str]) -> str:
    """Look the terms up at once, then sum them up with one model call."""
    found = await asyncio.gather(*(ctx.tool("lookup", term=term) for term in terms))
    return await ctx.llm("sum", user="; ".join(found))


@pipeline
async def drafts(ctx, rounds: int) -> str:
    """`rounds` model calls in a row, then a lookup, a short sleep and a last model call."""
    text = ""
    for turn in range(rounds):
        text = await ctx.llm("draft", user=f"draft {turn}: {text}")
    found = await ctx.tool("lookup", term="alpha")
    await ctx.sleep(0.1)
    return await ctx.llm("final", user=found)


@pipeline
async def draft_then_slow(ctx, label: str) -> str:
    """A model call, then `slow` (a read-only tool with a 2 s heartbeat timeout) that carries the
    model call's step, then a last model call."""
    draft = await ctx.llm("draft", user=f"draft for {label}")
    done = await ctx.tool("slow", label=label, seconds=0.1)
    return await ctx.llm("final", user=f"{draft} / {done}")
