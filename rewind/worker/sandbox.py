"""Which workflow code runs in Temporal's sandbox: pipelines always, the rest by setting.

Rewind's own workflows run unsandboxed by default (REWIND_WORKFLOW_SANDBOX=1
turns the sandbox on: rewind/worker/main.py says why). A pipeline is the
user's own code running as workflow code, so it always runs in the sandbox:
a call that would make it nondeterministic (the clock, random numbers, a
file, a socket) fails there with a line the pipeline's run turns into its
error (workflows/pipeline/workflow.py). Every module the worker has loaded is passed
through to the sandbox except the tools modules that define pipelines, which
are imported inside it, fresh for each run, so their globals see the
sandbox's restricted modules. What those modules import (their tools' own
libraries, other modules of yours) is passed through: the sandbox sees the
standard library's clock, randomness, files and sockets as the pipeline's
own code calls them, not a third-party client called from it (docs/pipelines.md).
"""

from __future__ import annotations

import sys

from temporalio.workflow import SandboxImportNotificationPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions


class RunnerByWorkflow(WorkflowRunner):
    """The sandboxed runner for the workflow types named, `other` for the rest."""

    def __init__(self, sandboxed_names: set[str], sandboxed: WorkflowRunner, other: WorkflowRunner) -> None:
        self._names, self._sandboxed, self._other = sandboxed_names, sandboxed, other

    def _pick(self, name: str | None) -> WorkflowRunner:
        return self._sandboxed if name in self._names else self._other

    def prepare_workflow(self, defn):  # type: ignore[no-untyped-def]
        self._pick(defn.name).prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return self._pick(det.defn.name).create_instance(det)

    def set_worker_level_failure_exception_types(self, types):  # type: ignore[no-untyped-def]
        self._sandboxed.set_worker_level_failure_exception_types(types)
        self._other.set_worker_level_failure_exception_types(types)


def pipeline_sandbox(user_modules: list[str]) -> SandboxedWorkflowRunner:
    """A sandbox that passes through every loaded module but the pipelines' own modules (and
    the packages that hold them): those are imported inside it, on purpose, when a run starts
    (so no warning is issued for that import)."""
    mine = set()
    for name in user_modules:
        parts = name.split(".")
        mine.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    passed = sorted(set(sys.modules) - mine - {"__main__", "__mp_main__"})
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*passed).with_import_notification_policy(
        SandboxImportNotificationPolicy.SILENT)
    return SandboxedWorkflowRunner(restrictions=restrictions)


def workflow_runner(pipeline_workflow: str, user_modules: list[str], sandbox_all: bool) -> WorkflowRunner:
    """The worker's runner: pipelines in their sandbox, the rest in the SDK's default sandbox
    with `sandbox_all` (REWIND_WORKFLOW_SANDBOX=1), else unsandboxed."""
    other = SandboxedWorkflowRunner() if sandbox_all else UnsandboxedWorkflowRunner()
    return RunnerByWorkflow({pipeline_workflow}, pipeline_sandbox(user_modules), other)
