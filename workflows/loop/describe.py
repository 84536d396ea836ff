"""Describing tools: which worker has which tool, and what each is (workflow code).

A run asks for the specs of its named tools when it starts (`describe_tools`,
recorded in its history, so replay and resume never depend on what workers
offer later). `DescribeToolsWorkflow` asks the same for the client: what a
declared agent is (`rewind start --agent NAME`), whichever worker holds it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from workflows.vocabulary.contracts import DescribeToolsRequest, DescribeToolsResponse
    from workflows.vocabulary.wire import DESCRIBE_TOOLS, DESCRIBE_TOOLS_WORKFLOW, tool_task_queue


async def describe_here(names: list[str]) -> DescribeToolsResponse:
    """Runs from before tool queues: the worker that answers must have every tool."""
    return await workflow.execute_activity(
        DESCRIBE_TOOLS,
        DescribeToolsRequest(names=names),
        result_type=DescribeToolsResponse,
        start_to_close_timeout=timedelta(seconds=30),
    )


async def describe_routed(names: list[str], tool_wait_s: float) -> DescribeToolsResponse:
    """The worker that answers on the run's queue describes what it has (with
    no names: all its tools); a named tool it lacks is described by a worker
    that has it, on that tool's own queue."""
    here = await describe_here(names)
    if not here.missing:
        return here
    found = await asyncio.gather(*(_describe_one(name, tool_wait_s) for name in here.missing))
    return DescribeToolsResponse(
        tools=[*here.tools, *(spec for spec in found if spec is not None)],
        missing=[name for name, spec in zip(here.missing, found) if spec is None],
    )


async def _describe_one(name: str, tool_wait_s: float) -> Any:
    try:
        described = await workflow.execute_activity(
            DESCRIBE_TOOLS,
            DescribeToolsRequest(names=[name]),
            result_type=DescribeToolsResponse,
            task_queue=tool_task_queue(workflow.info().task_queue, name),
            # No worker polls the queue of a tool nobody has: give up after a while.
            schedule_to_start_timeout=timedelta(seconds=tool_wait_s),
            start_to_close_timeout=timedelta(seconds=30),
        )
    except ActivityError as err:
        if isinstance(err.cause, CancelledError):
            raise asyncio.CancelledError() from err
        return None
    return described.tools[0] if described.tools else None


@workflow.defn(name=DESCRIBE_TOOLS_WORKFLOW)
class DescribeToolsWorkflow:
    """The specs of named tools (or, with none named, the answering worker's), for a client."""

    @workflow.run
    async def run(self, request: DescribeToolsRequest) -> DescribeToolsResponse:
        if not request.names:
            return await describe_here([])
        return await describe_routed(request.names, request.wait_s)


__all__ = ["describe_here", "describe_routed", "DescribeToolsWorkflow"]
