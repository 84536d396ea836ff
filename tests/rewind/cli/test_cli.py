"""The `rewind` command line, as a user runs it (a real subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from rewind.settings.config import Settings

REPO = Path(__file__).resolve().parents[3]


async def rewind(settings: Settings, *args: str, cwd: Path | None = None, env: dict | None = None) -> tuple[int, str, str]:
    full_env = dict(os.environ)
    full_env.update({
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "REWIND_TASK_QUEUE": settings.task_queue,
        "REWIND_STORE": settings.store_url,
        "REWIND_PAYLOADS": settings.payload_url,
        **({"AWS_ENDPOINT_URL": settings.s3_endpoint_url} if settings.s3_endpoint_url else {}),
        **(env or {}),
    })
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rewind.cli", *args, cwd=cwd or REPO, env=full_env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_start_wait_json_and_status(worker, settings, model, events_file):
    code, out, err = await rewind(settings, "start", "--task", "Research these companies: Acme, Globex", "--wait", "--json", "--run-id", "cli-run-1")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run_id"] == "cli-run-1" and doc["status"]["state"] == "completed"
    assert "saved to" in doc["final_answer"]

    code, out, err = await rewind(settings, "status", "cli-run-1", "--json")
    assert code == 0, err
    view = json.loads(out)
    assert view["workflow_status"] == "completed"
    assert view["status"]["step"] == 3 and view["status"]["tool_calls_done"] == 3

    code, out, _ = await rewind(settings, "status", "cli-run-1")
    assert code == 0 and "completed" in out and "tokens" in out

    code, out, err = await rewind(settings, "start", "--task", "again", "--run-id", "cli-run-1")
    assert code == 1 and "already exists" in err and "Traceback" not in err


async def test_start_without_wait_prints_the_run_id(worker, settings, model, events_file):
    code, out, err = await rewind(settings, "start", "--task", "Research these companies: Initech")
    assert code == 0, err
    run_id = out.strip()
    assert run_id.startswith("run-")


async def test_errors_are_one_clear_line(settings):
    code, out, err = await rewind(settings, "status", "no-such-run")
    assert code == 1 and "no run 'no-such-run'" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    code, _, err = await rewind(settings, "status", "../../etc")
    assert code == 1 and "run id" in err and "Traceback" not in err
    code, _, err = await rewind(settings, "status", "x", env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert code == 1 and "cannot reach Temporal" in err and "Traceback" not in err


async def test_demo_runs_twice(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_", "REWIND_"))}
    env["REWIND_DEMO_FAILURE_RATE"] = "0.2"
    for attempt in range(2):
        if attempt == 1:  # a shell set up for the team's TLS cluster: the demo keeps its own plaintext server
            env.update(TEMPORAL_ADDRESS="127.0.0.1:1", TEMPORAL_API_KEY="team-key-0123456789",
                       TEMPORAL_TLS_CLIENT_CERT_PATH="/no/such/client.pem", TEMPORAL_TLS_CLIENT_KEY_PATH="/no/such/client.key")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rewind.cli", "demo", cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        text = out.decode()
        assert proc.returncode == 0, text + err.decode()
        assert "finished: completed after 3 steps" in text
        assert "time per agent step (median)" in text
        assert "## Stark Industries" in text
    assert len(list((tmp_path / ".rewind" / "outbox").glob("*.md"))) == 2
    assert not (tmp_path / ".rewind" / "demo-server.pid").exists()


async def test_tree_show_export_and_mirror(worker, settings, model, events_file, tmp_path):
    code, out, err = await rewind(settings, "start", "--task", "Research these companies: Acme, Globex", "--wait", "--run-id", "cli-tree-1")
    assert code == 0, err

    code, out, err = await rewind(settings, "tree", "cli-tree-1")
    assert code == 0, err
    lines = out.splitlines()
    assert "search_company x2" in out and "final answer" in out
    assert sum(1 for line in lines if " main " in line) == 4

    code, out, err = await rewind(settings, "tree", "cli-tree-1", "--json")
    doc = json.loads(out)
    rows = doc["branches"]["main"]
    assert [r["step_index"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["parent_id"] == rows[0]["checkpoint_id"] and len(rows[1]["short_id"]) == 10

    code, out, err = await rewind(settings, "show", "cli-tree-1:main:3", "--json")
    assert code == 0, err
    full = json.loads(out)
    assert full["status"] == "completed" and full["schema_version"] == 8
    assert full["messages"][-1]["role"] == "assistant" and len(full["tool_call_cache"]) == 3

    code, out, err = await rewind(settings, "show", "cli-tree-1:main:2")
    assert code == 0 and "save_report" in out

    target = tmp_path / "export.json"
    code, out, err = await rewind(settings, "export", "cli-tree-1:main:3", "--out", str(target))
    assert code == 0, err
    assert json.loads(target.read_text()) == full

    code, out, err = await rewind(settings, "mirror", "cli-tree-1", "--json")
    assert code == 0, err
    report = json.loads(out)["branches"][0]
    assert report["checkpoints"] == 4 and report["written"] == 0 and report["already_present"] == 4

    for args, needle in [
        (("tree", "no-such-run"), "no checkpoints for run 'no-such-run'"),
        (("show", "cli-tree-1:main:99"), "not found"),
        (("show", "../../etc/passwd"), "malformed"),
        (("tree", "a/b"), "run id"),
    ]:
        code, out, err = await rewind(settings, *args)
        assert code == 1 and needle in err and "Traceback" not in err, (args, err)


async def test_checkpoints_in_s3(client, settings, model, events_file, moto_endpoint, monkeypatch, tmp_path):
    """With REWIND_STORE=s3://… a run's checkpoints land in S3 and the CLI reads them there."""
    import boto3

    from activities.model.llm import ModelEndpoint
    from activities.tools.registry import ToolRegistry
    from worker import build_worker

    bucket = f"cli-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    settings.s3_endpoint_url = moto_endpoint
    settings.store_url = f"s3://{bucket}/team-a"
    registry = ToolRegistry.from_modules(["examples.research_agent"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    async with build_worker(client, settings, registry, endpoint):
        code, out, err = await rewind(settings, "start", "--task", "Research these companies: Acme", "--wait", "--run-id", "s3-run-1")
        assert code == 0, err
    code, out, err = await rewind(settings, "tree", "s3-run-1", "--json")
    assert code == 0, err
    assert [r["step_index"] for r in json.loads(out)["branches"]["main"]] == [0, 1, 2, 3]
    code, out, err = await rewind(settings, "show", "s3-run-1:main:3", "--json")
    assert code == 0 and json.loads(out)["status"] == "completed"
    keys = [o["Key"] for o in boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1").list_objects_v2(Bucket=bucket)["Contents"]]
    assert any(k.startswith("team-a/runs/s3-run-1/branches/main/steps/") for k in keys)


async def test_fork_diff_rollback_continue_from_the_cli(worker, settings, model, events_file):
    code, out, err = await rewind(settings, "start", "--task", "Research these companies: Acme, Globex", "--wait", "--run-id", "cli-branch-1")
    assert code == 0, err
    tech = "Emphasize technical analysis over business metrics."
    code, out, err = await rewind(settings, "fork", "cli-branch-1", "--step", "1", "--branch", "technical",
                                  "--system-prompt", tech, "--set", "audience=cto", "--wait", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["branch"] == "technical" and doc["fork_point"] == "cli-branch-1:main:1"
    assert doc["status"]["state"] == "completed" and "technical" in doc["final_answer"]

    # The branch's status counts its line from step 0, and says what the branch spent itself.
    code, out, err = await rewind(settings, "status", "cli-branch-1", "--branch", "technical", "--json")
    assert code == 0, err
    status = json.loads(out)["status"]
    own, total = status["branch_ledger"], status["ledger"]
    assert 0 < own["model_calls"] < total["model_calls"] and own["total_tokens"] < total["total_tokens"]
    code, out, err = await rewind(settings, "status", "cli-branch-1", "--branch", "technical")
    assert code == 0, err
    assert f"  model calls  {total['model_calls']}\n" in out
    assert f"  this branch  model calls {own['model_calls']}, tool calls {own['tool_calls']}, " in out
    code, out, err = await rewind(settings, "status", "cli-branch-1")
    assert code == 0 and "this branch" not in out, out

    code, out, err = await rewind(settings, "diff", "cli-branch-1", "main", "technical")
    assert code == 0, err
    assert "fork point: step 1" in out and "technical" in out and "≠" in out
    code, out, err = await rewind(settings, "diff", "cli-branch-1", "main", "technical", "--json")
    d = json.loads(out)
    assert d["fork_point"]["step_index"] == 1 and not d["same_final_answer"]

    code, out, err = await rewind(settings, "fork", "cli-branch-1", "--step", "1", "--branch", "technical")
    assert code == 1 and "already has a branch" in err and "Traceback" not in err
    code, out, err = await rewind(settings, "fork", "cli-branch-1", "--step", "9", "--branch", "other")
    assert code == 1 and "out of range" in err

    code, out, err = await rewind(settings, "rollback", "cli-branch-1", "--step", "1", "--wait")
    assert code == 0, err
    assert "invalidated 2 checkpoint(s)" in out and "save_report" in out and "rewinding does not undo" in out
    code, out, err = await rewind(settings, "tree", "cli-branch-1")
    assert "invalidated" in out and "revision 1" in out and "forked from main:1" in out

    code, out, err = await rewind(settings, "start", "--task", "Research these companies: Initech", "--max-steps", "1",
                                  "--run-id", "cli-budget-1", "--wait", "--json")
    assert code == 3 and json.loads(out)["status"]["state"] == "budget_exceeded"
    code, out, err = await rewind(settings, "continue", "cli-budget-1", "--max-steps", "1")
    assert code == 2 and "no raise" in err and "Traceback" not in err
    code, out, err = await rewind(settings, "continue", "cli-budget-1", "--max-steps", "10", "--wait", "--json")
    assert code == 0, err
    assert json.loads(out)["status"]["state"] == "completed"
    code, out, err = await rewind(settings, "continue", "cli-budget-1", "--max-steps", "20")
    assert code == 1 and "not paused" in err


async def test_extension_challenge_example_runs_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_", "REWIND_"))}
    env["REWIND_DEMO_FAILURE_RATE"] = "0"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.extension_challenge", cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()
    assert "branch technical, forked from main:1" in text
    assert "fork point: step 1" in text and "technical angle" in text and "business angle" in text


def test_the_command_named_first_parses_alone_as_in_the_whole_command_line():
    """A command's arguments are parsed by its own parser alone (the others are not built):
    every command is found that way, and what it parses is what the whole line parses."""
    from rewind.cli.main import _build_parser, build_parser

    whole = build_parser()
    names = next(a for a in whole._subparsers._group_actions).choices  # noqa: SLF001
    for name in names:
        assert _build_parser(only=name)[1] == [name]
    assert _build_parser(only="no-such-command")[1] == []
    for argv in (["status", "r1"], ["status", "r1", "--branch", "b", "--query-timeout", "2", "--json"],
                 ["tree", "r1", "--json"], ["show", "r1:main:2"], ["pending"], ["start", "--task", "t", "--max-steps", "3"],
                 ["fork", "r1", "--step", "1", "--branch", "b"], ["worker", "--processes", "2"]):
        alone, _ = _build_parser(only=argv[0])
        assert vars(alone.parse_args(argv)) == vars(whole.parse_args(argv)), argv
