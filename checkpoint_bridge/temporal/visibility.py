"""What Temporal's UI and `temporal workflow list` show of a run.

Every branch's workflow starts with a memo (run, branch, model, the task, the
checkpoint it was forked from), a one-line summary, and Rewind's search
attributes, so that a team that already lives in the Temporal UI can find a
run's branches with `RewindRunId='r1'` and the runs waiting for a person with
`RewindState='waiting_for_approval'`.

Search attributes must be registered in the namespace before a workflow can
carry them. The client registers them (idempotent) the first time it starts
a run; where it may not (a cluster whose operator API the client's
credentials cannot use), runs start with the memo only and `indexed` off,
never failing a start over visibility.
"""

from __future__ import annotations

import weakref
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from workflows.vocabulary.contracts import AgentInput
from workflows.loop.run_index import BRANCH_KEY, MODEL_KEY, RUN_ID_KEY, STATE_KEY
from workflows.vocabulary.summaries import run_summary
from workflows.vocabulary.wire import MEMO_RESUMED, SEARCH_ATTRIBUTES

_MEMO_TASK_CHARS = 500

# Per client: whether its namespace has Rewind's search attributes (asked once).
_registered: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()


async def ensure_search_attributes(client: Client) -> bool:
    """Register Rewind's search attributes in the client's namespace; True if they are there."""
    known = _registered.get(client)
    if known is not None:
        return known
    namespace = client.namespace
    try:
        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        missing = [name for name in SEARCH_ATTRIBUTES if name not in listed.custom_attributes]
        if missing:
            try:
                await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
                    namespace=namespace,
                    search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing},
                ))
            except RPCError as exc:
                if exc.status != RPCStatusCode.ALREADY_EXISTS:  # another client registered them meanwhile
                    raise
            listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        present = all(name in listed.custom_attributes for name in SEARCH_ATTRIBUTES)
    except RPCError as exc:
        if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            raise  # Temporal is down: the start would fail too, with the clearer error
        present = False  # not allowed or not supported here: memo only
    _registered[client] = present
    return present


def start_options(agent_input: AgentInput, indexed: bool) -> dict[str, Any]:
    """The memo, summary and (when `indexed`) search attributes a branch's workflow starts with."""
    resume = agent_input.resume
    memo: dict[str, Any] = {
        "run_id": agent_input.run_id,
        "branch_id": agent_input.branch_id,
        "model": agent_input.model,
        "task": agent_input.task[:_MEMO_TASK_CHARS],
    }
    if resume is not None and resume.parent_checkpoint is not None:  # a fork or rollback, seeded from it
        memo["forked_from"] = resume.parent_checkpoint
    if resume is not None and resume.resumed is not None:  # `rewind resume`: which revision it resumes
        memo[MEMO_RESUMED] = resume.resumed
    options: dict[str, Any] = {
        "memo": memo,
        "static_summary": run_summary(agent_input.run_id, agent_input.branch_id, agent_input.task),
    }
    if indexed:
        options["search_attributes"] = TypedSearchAttributes([
            SearchAttributePair(RUN_ID_KEY, agent_input.run_id),
            SearchAttributePair(BRANCH_KEY, agent_input.branch_id),
            SearchAttributePair(MODEL_KEY, agent_input.model),
            SearchAttributePair(STATE_KEY, "running"),
        ])
    return options


__all__ = ["ensure_search_attributes", "start_options", "RUN_ID_KEY", "BRANCH_KEY", "MODEL_KEY", "STATE_KEY"]
