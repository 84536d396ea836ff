"""The pipeline the pipeline benchmark runs (`--tool-modules bench.pipelines`): `pairs` turns
of one model call and one `blob` tool call, the same work per pair as one step of the loop."""

from __future__ import annotations

from activities.code.pipelines import pipeline
from bench.tools import blob

__all__ = ["blob", "blob_pairs", "LABEL"]

LABEL = "think"


@pipeline
async def blob_pairs(ctx, pairs: int, size: int = 256) -> str:
    for index in range(pairs):
        await ctx.llm(LABEL, user=f"turn {index}")
        await ctx.tool("blob", index=index, size=size)
    return "finished"
