"""After Temporal's retention has removed a finished run, the checkpoint store
still answers: status, tree, show, diff, mirror and fork work from it."""

from __future__ import annotations

import asyncio
import json
import uuid

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest

from as_user import UserWorker, rewind, user_env
from workflows.vocabulary.ids import workflow_id_for


async def _forget(client, workflow_id: str) -> None:
    """What the namespace's retention does to a closed run: Temporal deletes it."""
    await client.workflow_service.delete_workflow_execution(DeleteWorkflowExecutionRequest(
        namespace=client.namespace, workflow_execution=WorkflowExecution(workflow_id=workflow_id)))

    # The dev server deletes in the background: slow on a loaded machine.
    for _ in range(1200):
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except Exception:
            return
        await asyncio.sleep(0.25)
    raise AssertionError(f"Temporal did not delete {workflow_id}")


async def test_a_run_past_retention_is_read_from_the_store(temporal_server, client, tmp_path, model):
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"ret-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"file://{tmp_path / 'store'}", REWIND_PAYLOADS=f"file://{tmp_path / 'payloads'}",
                   OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url, REWIND_DEMO_FAILURE_RATE="0")
    cli = tmp_path / "cli"
    cli.mkdir()
    run = f"old-{uuid.uuid4().hex[:6]}"
    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Acme, Globex",
                                      "--run-id", run, "--wait", "--json")
        assert code == 0, err
        await _forget(client, run)

        code, out, err = await rewind(cli, env, "status", run, "--json")
        assert code == 0, err
        view = json.loads(out)
        assert view["state"] == "completed" and view["source"] == "checkpoint" and view["workflow_status"] == "archived"
        assert view["status"]["step"] == 3 and view["status"]["tool_calls_done"] == 3 and "saved to" in view["status"]["final_answer"]
        code, out, err = await rewind(cli, env, "mirror", run, "--json")
        assert code == 0, err
        (report,) = json.loads(out)["branches"]
        assert report["history"] is False and report["checkpoints"] == 4 and report["written"] == 0
        code, out, err = await rewind(cli, env, "tree", run)
        assert code == 0 and "final answer" in out, err
        # A fork seeds a new workflow from the checkpoint alone.
        code, out, err = await rewind(cli, env, "fork", run, "--step", "1", "--branch", "again", "--wait", "--json")
        assert code == 0, err
        assert json.loads(out)["status"]["state"] == "completed"
        code, out, err = await rewind(cli, env, "diff", run, "main", "again", "--json")
        assert code == 0, err
        # The branch's status from its newest checkpoint: its line's totals, and what it spent itself.
        await _forget(client, workflow_id_for(run, "again"))
        code, out, err = await rewind(cli, env, "status", run, "--branch", "again")
        assert code == 0, err
        assert "(from the newest checkpoint in the store)" in out and "  this branch  " in out, out
        code, out, err = await rewind(cli, env, "status", run)
        assert code == 0 and "this branch" not in out, out
