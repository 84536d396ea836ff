"""The run shapes of the soak: a script for the scripted model, the run's input, and
what the soak does to the run while it goes (approve, reject, fork, rollback).

Every shape is deterministic: the scripted model's answers are a function of the
request, the soak's tools' outputs a function of their arguments, so a run of a
shape ends with the same transcript as any other run of it, whatever faults hit
it on the way. That is what the soak checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workflows.vocabulary.contracts import AgentInput, LlmTuning, PipelineRun, RunLimits

LLM_TIMEOUT_S = 5.0  # a model "hang" fault answers after longer than this


def _call(name: str, **arguments: Any) -> dict:
    return {"name": name, "arguments": arguments}


def _turn(*calls: dict) -> dict:
    return {"tool_calls": list(calls)}


@dataclass(frozen=True)
class Shape:
    name: str
    script: list[dict] | dict[str, list[dict]]  # a pipeline's script is by label
    tools: list[str]
    # What the soak does while the run goes: None, "approve", "reject", "fork", "rollback".
    action: str | None = None
    max_steps: int = 20
    history_limit_bytes: int = 4 * 1024 * 1024
    budget_pause_s: float = 7 * 24 * 3600.0
    extra_scripts: dict[str, list[dict] | dict[str, list[dict]]] = field(default_factory=dict)
    # The state an undisturbed run ends in, and the branches it ends with.
    expected_state: str = "completed"
    # A pipeline run (soak_tools.soak_pipeline) with these arguments instead of the loop.
    pipeline: PipelineRun | None = None

    def model(self) -> str:
        return f"script:soak-{self.name}"

    def agent_input(self, run_id: str) -> AgentInput:
        return AgentInput(
            run_id=run_id, task=f"soak shape {self.name}", tools=[] if self.pipeline else self.tools,
            model=self.model(), pipeline=self.pipeline,
            limits=RunLimits(max_steps=self.max_steps, budget_pause_s=self.budget_pause_s),
            llm=LlmTuning(timeout_s=LLM_TIMEOUT_S, heartbeat_s=2.0, max_retry_s=10.0),
            history_limit_bytes=self.history_limit_bytes,
        )


MCP_SERVER = "soakmcp"  # the soak's MCP server (soak_mcp.py): its tools are soakmcp__find, soakmcp__post
FORK_STEP, FORK_WHEN = 2, 3  # fork at step 2 once step 3 is stored (main still running)
ROLLBACK_STEP, ROLLBACK_WHEN = 1, 3  # roll back to step 1 once step 3 is stored

SHAPES: dict[str, Shape] = {s.name: s for s in [
    Shape("parallel", [
        _turn(_call("lookup", term="alpha"), _call("lookup", term="beta"), _call("lookup", term="gamma")),
        _turn(_call("send_message", to="ops", body="alpha beta gamma"), _call("lookup", term="alpha")),
        {"content": "parallel done"},
    ], ["lookup", "send_message"]),
    Shape("approve", [
        _turn(_call("lookup", term="acme")),
        _turn(_call("wire", to="acme", amount_cents=1200), _call("lookup", term="acme-bank")),
        {"content": "wired"},
    ], ["lookup", "wire"], action="approve"),
    Shape("reject", [
        _turn(_call("wire", to="globex", amount_cents=990000)),
        {"content": "not wired"},
    ], ["wire"], action="reject"),
    Shape("budget", [
        _turn(_call("lookup", term=f"b{i}")) for i in range(5)
    ] + [{"content": "never reached"}], ["lookup"], max_steps=2, budget_pause_s=2.0,
        expected_state="budget_exceeded"),
    Shape("fork", [
        _turn(_call("lookup", term="f1")),
        _turn(_call("send_message", to="fork", body="f1 found")),
        _turn(_call("lookup", term="f2")),
        _turn(_call("lookup", term="f3")),
        {"content": "main done"},
    ], ["lookup", "send_message"], action="fork", extra_scripts={"alt": [
        {"content": "unused"}, {"content": "unused"},
        # The fork repeats the lineage's effect (reused, not sent again) and a lookup (cached).
        _turn(_call("send_message", to="fork", body="f1 found"), _call("lookup", term="f1")),
        _turn(_call("lookup", term="f-alt")),
        {"content": "alt done"},
    ]}),
    Shape("rollback", [
        _turn(_call("lookup", term="r1")),
        _turn(_call("send_message", to="rollback", body="r1 found")),
        _turn(_call("lookup", term="r2")),
        _turn(_call("lookup", term="r3")),
        {"content": "rolled back and done"},
    ], ["lookup", "send_message"], action="rollback"),
    Shape("long", [
        _turn(_call("blob", index=i, size=2500)) for i in range(12)
    ] + [{"content": "long done"}], ["blob"], history_limit_bytes=24_000),
    Shape("subagents", [
        {"tool_calls": [_call("researcher", topic="alpha"), _call("researcher", topic="beta")],
         "by_user": {"Look into alpha": _turn(_call("lookup", term="alpha-sub")),
                     "Look into beta": _turn(_call("lookup", term="beta-sub"))}},
        {"content": "synthesis of alpha and beta",
         "by_user": {"Look into alpha": {"content": "alpha report"}, "Look into beta": {"content": "beta report"}}},
    ], ["researcher"]),
    Shape("mcp", [
        _turn(_call(f"{MCP_SERVER}__find", term="m1"), _call(f"{MCP_SERVER}__post", channel="ops", text="m1 found")),
        _turn(_call(f"{MCP_SERVER}__find", term="m1")),  # answered from the run's cache
        _turn(_call("lookup", term="m-local")),
        {"content": "mcp done"},
    ], [f"{MCP_SERVER}__find", f"{MCP_SERVER}__post", "lookup"], action="fork", extra_scripts={"alt": [
        {"content": "unused"}, {"content": "unused"},
        # The fork asks for main's post again (an effect of its lineage: reused, not posted again).
        _turn(_call(f"{MCP_SERVER}__post", channel="ops", text="m1 found"), _call(f"{MCP_SERVER}__find", term="m1")),
        _turn(_call(f"{MCP_SERVER}__find", term="m-alt")),
        {"content": "mcp alt done"},
    ]}),
]}

# Pipelines (soak_tools.soak_pipeline): its three lookups complete in any order, which the head's
# snapshot compares as a set; the fork changes the model of its calls after step 2.
SHAPES["pipeline"] = Shape("pipeline", {"summarize": [{"content": "three definitions, summarized"}]},
                           ["lookup", "send_message"], pipeline=PipelineRun(name="soak_pipeline",
                                                                            arguments={"topic": "p"}))
SHAPES["pipeline-fork"] = Shape("pipeline-fork", {"summarize": [{"content": "main's summary"}]},
                                ["lookup", "send_message"], action="fork",
                                pipeline=PipelineRun(name="soak_pipeline", arguments={"topic": "q"}),
                                extra_scripts={"alt": {"summarize": [{"content": "the fork's summary"}]}})

# A LangGraph graph (soak_tools.soak_graph): a call-level node, a node-level node (its own sqlite3
# database: one activity) and a call-level node with an effect; its answer is its final state.
SHAPES["graph"] = Shape("graph", {"gather_facts": [{"content": "both facts hold"}],
                                  "summarize_graph": [{"content": "three facts, summarized"}]},
                        ["lookup", "send_message"],
                        pipeline=PipelineRun(name="soak_tools:soak_graph", arguments={"topic": "g"},
                                             models={"*": "script:soak-graph"}))

WEIGHTS = {"parallel": 3, "approve": 2, "reject": 1, "budget": 1, "fork": 2, "rollback": 2, "long": 1, "subagents": 2,
           "mcp": 2, "pipeline": 2, "pipeline-fork": 2, "graph": 2}


def scripts() -> dict[str, list[dict] | dict[str, list[dict]]]:
    """Every script the soak's model server plays, by name."""
    out: dict[str, list[dict] | dict[str, list[dict]]] = {}
    for shape in SHAPES.values():
        out[shape.model().removeprefix("script:")] = shape.script
        for branch, turns in shape.extra_scripts.items():
            out[f"soak-{shape.name}-{branch}"] = turns
    return out
