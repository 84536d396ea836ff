"""The same benchmark graph on Temporal's own LangGraph plugin (temporalio-langgraph), no Rewind:
each node an activity (the plugin's `execute_in="activity"`), the Pregel loop in the workflow."""

from __future__ import annotations

from temporalio import workflow

GRAPH = "bench-graph"


@workflow.defn(name="BenchPluginGraph")
class PluginGraphWorkflow:
    @workflow.run
    async def run(self, limit: int) -> int:
        from temporalio.langgraph import graph

        out = await graph(GRAPH).compile().ainvoke({"n": 0, "limit": limit})
        return int(out["n"])
