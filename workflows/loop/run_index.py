"""The run's state in Temporal's visibility, so `temporal workflow list` can find it.

The client starts every branch with the search attributes RewindRunId,
RewindBranch, RewindModel and RewindState=running (when it could register
them: `AgentInput.indexed`). The workflow keeps RewindState true from then
on: Temporal's own status says Running for a run that waits for a person or
for a raised budget; this says which. Each change is one
UpsertWorkflowSearchAttributes event, written only when the state changes
(a handful per run). A run started without the attributes upserts nothing,
which also keeps runs from before this module replaying unchanged.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from workflows.vocabulary.wire import SA_BRANCH, SA_MODEL, SA_RUN_ID, SA_STATE

STATE_KEY = SearchAttributeKey.for_keyword(SA_STATE)
RUN_ID_KEY = SearchAttributeKey.for_keyword(SA_RUN_ID)
BRANCH_KEY = SearchAttributeKey.for_keyword(SA_BRANCH)
MODEL_KEY = SearchAttributeKey.for_keyword(SA_MODEL)


class RunIndex:
    def __init__(self, enabled: bool, shown: str = "running") -> None:
        self._enabled = enabled
        self._shown = shown  # what the client started the workflow with

    def show(self, state: str) -> None:
        """Make RewindState say `state` (no event if it already does)."""
        if self._enabled and state != self._shown:
            workflow.upsert_search_attributes([STATE_KEY.value_set(state)])
            self._shown = state


__all__ = ["RunIndex", "STATE_KEY", "RUN_ID_KEY", "BRANCH_KEY", "MODEL_KEY"]
