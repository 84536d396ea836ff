"""`python -m bench.bare_worker ADDRESS QUEUE MODEL_URL`: the bare workflow (b) on a worker process of its own.

The floor of the concurrency benchmark: the agent loop's shape with no Rewind
code in it (bench.bare_workflow with `noop_at_end`: the model call and the
tool call as activities, and an activity that does nothing when the run ends,
where Rewind writes its last checkpoint). Plain temporalio: the default data converter,
no payload store, no sandbox (as Rewind's default worker), the same tools.
Its CPU per step is what the Temporal SDK and the openai client cost for this
shape on this machine, measured beside Rewind's worker under the same load.
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.tools.registry import ToolRegistry
from bench.bare_workflow import BareActivities, BareAgentWorkflow
from bench.common import TOOLS_MODULE


async def main(address: str, queue: str, model_url: str) -> None:
    client = await Client.connect(address)
    acts = BareActivities(model_url, ToolRegistry.from_modules([TOOLS_MODULE]))
    worker = Worker(client, task_queue=queue, workflows=[BareAgentWorkflow],
                    activities=[acts.bare_llm, acts.bare_tool, acts.bare_noop],
                    workflow_runner=UnsandboxedWorkflowRunner())
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
