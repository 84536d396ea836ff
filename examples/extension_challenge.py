"""The reference design's extension challenge, end to end on the embedded stack.

    python -m examples.extension_challenge

1. Run the research agent on five companies (business-metrics angle).
2. Go back to the checkpoint after the searches (step 1: the research is
   done, the report not yet written) and fork a branch `technical` whose
   system prompt asks for technical analysis over business metrics. The
   searches are not run again: the branch inherits their results.
3. Compare the two branches with `rewind diff`.

The same with the CLI against a running server and worker:

    rewind fork RUN --step 1 --branch technical --system-prompt "$TECH_PROMPT" --wait
    rewind diff RUN main technical
"""

from __future__ import annotations

import asyncio
import sys
import time

from checkpoint_bridge.views.diff import diff, diff_text
from checkpoint_bridge.views.inspect import tree_text
from examples.research_agent import DEFAULT_TASK
from rewind import checkpoint_store, fork, new_run_id, start_run
from rewind.settings.config import Settings
from rewind.local.stack import embedded_stack
from workflows.vocabulary.contracts import AgentInput

TECH_PROMPT = (
    "You are a research agent. Emphasize technical analysis - architecture, engineering practice, "
    "technology stack and patents - over business metrics such as revenue and growth."
)


async def main() -> int:
    settings = Settings.from_env()
    async with embedded_stack(settings, ["examples.research_agent"]) as stack:
        run_id = new_run_id()
        handle = await start_run(stack.client, settings, AgentInput(run_id=run_id, task=DEFAULT_TASK))
        first = await handle.result()
        print(f"\nrun {run_id}: {first.status.state} in {first.status.step} steps\n")
        async with checkpoint_store(settings) as store:
            started = time.monotonic()
            branch = await fork(stack.client, settings, store, run_id, 1, branch="technical", system_prompt=TECH_PROMPT)
            second = await branch.handle.result()
            print(f"branch technical: {second.status.state} ({time.monotonic() - started:.2f}s from fork to end)\n")
            print(tree_text(await store.list_checkpoints(run_id)) + "\n")
            print(diff_text(await diff(store, run_id, "main", "technical")))
    print(f"\nmain's answer:      {first.final_answer}\ntechnical's answer: {second.final_answer}")
    print(f"\ninspect: rewind tree {run_id}; rewind diff {run_id} main technical")
    return 0


if __name__ == "__main__":
    from workflows.vocabulary.errors import RewindError

    try:
        code = asyncio.run(main())
    except RewindError as exc:  # a configuration problem: one line, as the CLI says it
        print(f"extension_challenge: {exc}", file=sys.stderr)
        code = 1
    sys.exit(code)
