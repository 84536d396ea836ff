"""Which workflow code runs in Temporal's sandbox: pipelines always, the rest by setting.

Rewind's own workflows run unsandboxed by default (REWIND_WORKFLOW_SANDBOX=1
turns the sandbox on: rewind/worker/main.py says why). A pipeline is the
user's own code running as workflow code, so it always runs in the sandbox:
a call that would make it nondeterministic (the clock, random numbers, a
file, a socket) fails there with a line the pipeline's run turns into its
error (workflows/pipeline.py). Every module the worker has loaded is passed
through to the sandbox except the tools modules that define pipelines, which
are imported inside it, fresh for each run, so their globals see the
sandbox's restricted modules.
"""

from __future__ import annotations

import sys

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
    """A sandbox that passes through every loaded module but the pipelines' own."""
    mine = {name.split(".")[0] for name in user_modules}
    loaded = {name.split(".")[0] for name in list(sys.modules)}
    passed = sorted(loaded - mine - {"__main__", "__mp_main__"})
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*passed))


def workflow_runner(pipeline_workflow: str, user_modules: list[str], sandbox_all: bool) -> WorkflowRunner:
    """The worker's runner: pipelines in their sandbox, the rest in the SDK's default sandbox
    with `sandbox_all` (REWIND_WORKFLOW_SANDBOX=1), else unsandboxed."""
    other = SandboxedWorkflowRunner() if sandbox_all else UnsandboxedWorkflowRunner()
    return RunnerByWorkflow({pipeline_workflow}, pipeline_sandbox(user_modules), other)
