"""The fan-out research orchestrator: five company researchers and a synthesis.

    rewind worker --tool-modules examples.fanout_research
    rewind start --agent research_orchestrator --task "Research these companies: Acme, Globex, Initech"

`research_orchestrator` gives each company to `research_company`, all in one
step; each call runs the researcher as a durable run of its own (a sub-agent:
its own prompt, tool and checkpoints, under the orchestrator's run), and the
orchestrator writes a synthesis of their answers. A researcher that fails is
that call's error: the others' answers stand, and `rewind redo` runs the
failed one again without running the rest. `rewind demo --fanout` runs it.
"""

from __future__ import annotations

from examples.research_agent import DEFAULT_COMPANIES, search_company
from rewind import subagent

__all__ = ["research_company", "research_orchestrator", "search_company", "FANOUT_TASK"]

FANOUT_TASK = "Research these companies and write a synthesis: " + ", ".join(DEFAULT_COMPANIES)

research_company = subagent(
    name="research_company",
    description="Research one company and return a short profile.",
    system_prompt=(
        "You research one company. Look it up with search_company once, then answer with a short profile "
        "of it from the business angle: revenue, growth, size. Do not guess what the search did not return."
    ),
    tools=["search_company"],
    max_steps=5,
)

research_orchestrator = subagent(
    name="research_orchestrator",
    description="Research several companies in parallel and synthesize what each researcher found.",
    system_prompt=(
        "You coordinate company research. Give each company to research_company, all of them in one step, "
        "then write a synthesis of their answers, saying which companies got no answer and why."
    ),
    tools=["research_company"],
    max_steps=6,
)
