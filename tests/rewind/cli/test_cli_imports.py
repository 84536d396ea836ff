"""The read-only commands load only what they use.

`rewind --version`, `--help`, `tree` and `show` on a folder store, `status` of
a finished run and `pending` run in a fresh process as a user's would (the
console script's own code, an environment built from scratch); the process
then lists the packages and modules it loaded. No Temporal client for a
command that reads only the store, no S3 client for a folder store, no openai
anywhere but the worker; `status` of a finished run and `pending` without an
open run talk to Temporal with its service client alone, not the SDK's Client.
Which packages, not how long: an import that creeps back in fails here on
any machine, however fast.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from as_user import user_env

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from checkpoint_bridge.document.schema import AgentCheckpoint
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.client import connect, run_view, start_run
from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer
from rewind.temporal.connect import open_connection
from rewind.worker.main import build_worker
from workflows.vocabulary.contracts import AgentInput
from workflows.vocabulary.ids import checkpoint_id

# Runs `rewind ARGS` in this process (as the console script does, but without its
# os._exit), then prints the top-level packages loaded, one JSON list.
PROBE = """
import json, os, sys
from rewind.cli.main import run
try:
    code = run(sys.argv[1:])
except SystemExit as exit:  # --version and --help end through argparse
    code = exit.code
sys.stdout.flush()
# A None entry is an import turned away (rewind.cli.main._without_grpc), not a module loaded.
loaded = [name for name, module in sys.modules.items() if module is not None]
print("\\n" + json.dumps({"code": code, "packages": sorted({name.split(".")[0] for name in loaded}),
                         "modules": sorted(loaded)}))
sys.stdout.flush()
os._exit(0)  # as the console script ends (rewind.cli.main.main): the Temporal runtime's threads may not outlive it
"""

CLIENTS = {"temporalio", "grpc", "google"}             # the Temporal client and its protobuf / gRPC
S3 = {"aioboto3", "aiobotocore", "boto3", "botocore"}  # the S3 client
MODEL = {"openai", "httpx", "tiktoken"}                # the model client (the worker's)


# The models a checkpoint reader does not need: the workflow's contracts (35 pydantic
# models) and the diff's; building them costs `tree` and `show` more than their other imports.
NOT_FOR_READERS = {"workflows.vocabulary.contracts", "checkpoint_bridge.views.diff"}
# What `status` of a finished run does not need: the SDK's Client (the run's describe and its
# close event are plain service calls), the contracts but a run's status (workflows/vocabulary/status.py),
# the checkpoint store and its models (the result answers).
SDK_CLIENT = "temporalio.client"
# Nor the data converter: a plain JSON result is read as the converter would read it
# (rewind/temporal/converter.py checks the converter's settings without building it).
NOT_FOR_STATUS = {"workflows.vocabulary.contracts", "checkpoint_bridge.checkpoints.store", "checkpoint_bridge.document.schema",
                  "temporalio.converter", "rewind.temporal.payloads"}


def _run_probe(cwd, env, *args: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    *printed, last = done.stdout.strip().splitlines()
    doc = json.loads(last)
    doc["stdout"] = "\n".join(printed).strip()  # the command's own output
    doc["output"] = done.stdout + done.stderr
    return doc


def _sdk_client(modules: list[str]) -> list[str]:
    return [m for m in modules if m == SDK_CLIENT or m.startswith(SDK_CLIENT + ".")]


def _loaded(cwd, env, *args: str) -> tuple[int, set[str], str]:  # type: ignore[no-untyped-def]
    doc = _run_probe(cwd, env, *args)
    return doc["code"], set(doc["packages"]), doc["output"]


@pytest.fixture(scope="module")
def folder_store(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A folder store holding a three-step run, written by the real store code."""
    root = tmp_path_factory.mktemp("imports") / "store"

    async def write() -> None:
        async with open_checkpoint_store(f"file://{root}") as store:
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "count to three"}]
            parent = None
            for step in range(3):
                messages = [*messages, {"role": "assistant", "content": f"{step}"}]
                cp = AgentCheckpoint(checkpoint_id=checkpoint_id("imports-1", "main", step), run_id="imports-1",
                                     parent_id=parent, branch_id="main", step_index=step, messages=messages,
                                     created_at=datetime(2026, 1, 1, 12, 0, step, tzinfo=timezone.utc))
                await store.save(cp)
                parent = cp.checkpoint_id

    asyncio.run(write())
    return root


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("tree", "imports-1"), ("tree", "imports-1", "--json"),
                                  ("show", "imports-1:main:2", "--json")])
def test_a_store_command_loads_no_temporal_s3_or_model_client(folder_store, tmp_path, args):  # type: ignore[no-untyped-def]
    env = user_env(tmp_path, REWIND_STORE=f"file://{folder_store}", TEMPORAL_ADDRESS="127.0.0.1:1")
    code, packages, output = _loaded(tmp_path, env, *args)
    assert code == 0, output
    assert not packages & (CLIENTS | S3 | MODEL), (args, sorted(packages & (CLIENTS | S3 | MODEL)))
    if args[0] == "show":
        assert '"step_index": 2' in output


@pytest.mark.parametrize("args", [("tree", "imports-1"), ("show", "imports-1:main:2")])
def test_tree_and_show_build_only_the_checkpoint_models(folder_store, tmp_path, args):  # type: ignore[no-untyped-def]
    doc = _run_probe(tmp_path, user_env(tmp_path, REWIND_STORE=f"file://{folder_store}"), *args)
    assert doc["code"] == 0, doc["output"]
    assert not NOT_FOR_READERS & set(doc["modules"]), sorted(NOT_FOR_READERS & set(doc["modules"]))


@pytest.mark.parametrize("args", [("--version",), ("--help",)])
def test_version_and_help_load_no_pydantic(tmp_path, args):  # type: ignore[no-untyped-def]
    code, packages, output = _loaded(tmp_path, user_env(tmp_path), *args)
    assert code == 0, output
    assert "pydantic" not in packages, output


def test_a_temporal_profile_file_is_read_only_by_commands_that_connect(folder_store, tmp_path):  # type: ignore[no-untyped-def]
    """With the `temporal` CLI's profile file in place (a team's cluster, TLS), `tree` on a
    folder store still needs no Temporal client: the profile is read when connecting."""
    profile = tmp_path / ".config" / "temporalio" / "temporal.toml"
    profile.parent.mkdir(parents=True)
    profile.write_text('[profile.default]\naddress = "temporal.example.com:7233"\nnamespace = "team"\n'
                       'api_key = "not-a-real-key"\n')
    env = user_env(tmp_path, REWIND_STORE=f"file://{folder_store}")
    code, packages, output = _loaded(tmp_path, env, "tree", "imports-1", "--json")
    assert code == 0, output
    assert not packages & CLIENTS, sorted(packages & CLIENTS)


@pytest.fixture
def pydantic_plugin(tmp_path):  # type: ignore[no-untyped-def]
    """An installed pydantic plugin (a distribution with a `pydantic` entry point on
    PYTHONPATH) whose import leaves a marker file: the PYTHONPATH and the marker."""
    site = tmp_path / "site"
    info = site / "marker_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: marker-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pydantic]\nmarker = marker_plugin:plugin\n")
    marker = tmp_path / "plugin-loaded"
    (site / "marker_plugin.py").write_text(
        f"open({str(marker)!r}, 'a').write('loaded\\n')\n\n"
        "class _Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n\n"
        "plugin = _Plugin()\n")
    return site, marker


def test_commands_that_run_no_user_code_skip_pydantic_plugins(folder_store, tmp_path, pydantic_plugin):  # type: ignore[no-untyped-def]
    """Loading plugins reads every installed distribution's entry points and imports the
    plugins: `tree` and `show` skip it; the worker, which runs the user's tools, does not."""
    site, marker = pydantic_plugin
    env = user_env(tmp_path, PYTHONPATH=str(site), REWIND_STORE=f"file://{folder_store}", TEMPORAL_ADDRESS="127.0.0.1:1")
    for args in (("tree", "imports-1"), ("show", "imports-1:main:2", "--json")):
        doc = _run_probe(tmp_path, env, *args)
        assert doc["code"] == 0, doc["output"]
        assert not marker.exists(), args
    # A user's own choice is kept: naming other plugins to skip still loads this one.
    doc = _run_probe(tmp_path, {**env, "PYDANTIC_DISABLE_PLUGINS": "some_other_plugin"}, "tree", "imports-1")
    assert doc["code"] == 0 and marker.exists(), doc["output"]
    marker.unlink()
    # The worker loads them (it fails here, Temporal being unreachable and not waited for, after
    # building its models).
    done = subprocess.run([sys.executable, "-c", PROBE, "worker"], cwd=tmp_path, env={**env, "REWIND_STARTUP_WAIT_S": "0"},
                          capture_output=True,
                          text=True, timeout=120)
    assert "cannot reach Temporal" in done.stderr, done.stdout + done.stderr
    assert marker.exists(), done.stderr


@pytest.fixture(scope="module")
async def finished_run(tmp_path_factory, model_server):  # type: ignore[no-untyped-def]
    """A dev server of this module's own (no other test's run is open on it) with one run
    that completed: (its settings, the run id)."""
    folder = tmp_path_factory.mktemp("finished")
    server = DevServer.start(folder / "temporal.db", headless=True)
    try:
        # Without the workflow sandbox: its validation imports the workflow modules again, which on
        # Python 3.11 fails now and then when a garbage finalizer imports meanwhile (temporalio
        # sdk-python #585, "KeyError: <thread id>"); this run only has to complete.
        settings = Settings(temporal_address=server.address, task_queue="imports", store_url=f"file://{folder / 'store'}",
                            payload_url=f"file://{folder / 'payloads'}", home=folder / "home", workflow_sandbox=False)
        client = await connect(settings)
        endpoint = ModelEndpoint(base_url=model_server.base_url, api_key="test-key")
        async with build_worker(client, settings, ToolRegistry.from_modules([]), endpoint):
            handle = await start_run(client, settings, AgentInput(run_id="imports-done", task="count to three"))
            await handle.result()
        yield settings, "imports-done"
    finally:
        server.stop()


def _env_of(settings: Settings, home) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return user_env(home, TEMPORAL_ADDRESS=settings.temporal_address, REWIND_TASK_QUEUE=settings.task_queue,
                    REWIND_STORE=settings.store_url, REWIND_PAYLOADS=settings.payload_url)


@pytest.mark.parametrize("json_output", [False, True])
def test_status_of_a_finished_run_needs_no_sdk_client_nor_the_checkpoint_store(finished_run, tmp_path, json_output):  # type: ignore[no-untyped-def]
    settings, run_id = finished_run
    env = _env_of(settings, tmp_path)
    if json_output:  # payloads on S3: its client is built when a payload is stored or fetched, not to connect
        env.update(REWIND_PAYLOADS="s3://imports-payloads", AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_REGION="us-east-1",
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    doc = _run_probe(tmp_path, env, "status", run_id, *(["--json"] if json_output else []))
    assert doc["code"] == 0, doc["output"]
    if json_output:
        view = json.loads(doc["stdout"])
        assert (view["state"], view["source"], view["failure"]) == ("completed", "result", None), view
    else:
        assert doc["stdout"].startswith(f"run {run_id} (branch main): completed"), doc["output"]
        assert "from the newest checkpoint" not in doc["stdout"] and "failure" not in doc["stdout"], doc["output"]
    assert not _sdk_client(doc["modules"]), _sdk_client(doc["modules"])
    assert not NOT_FOR_STATUS & set(doc["modules"]), sorted(NOT_FOR_STATUS & set(doc["modules"]))
    # Nor gRPC's Python package, installed here (the OTLP gRPC exporter needs it), which the
    # SDK's service packages import when it is there (rewind.cli.main._without_grpc).
    assert not set(doc["packages"]) & (S3 | MODEL | {"grpc"}), sorted(set(doc["packages"]) & (S3 | MODEL | {"grpc"}))


def test_a_command_that_exports_spans_over_grpc_keeps_grpc(finished_run, tmp_path):  # type: ignore[no-untyped-def]
    """With OTLP over gRPC the command's spans go out through gRPC's Python package: it is
    not turned away (the collector need not answer for the command to succeed)."""
    settings, run_id = finished_run
    env = {**_env_of(settings, tmp_path), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    doc = _run_probe(tmp_path, env, "status", run_id, "--json")
    assert doc["code"] == 0, doc["output"]
    assert json.loads(doc["stdout"])["state"] == "completed"
    assert "grpc" in doc["packages"], doc["output"]


@pytest.mark.parametrize("json_output", [False, True])
def test_pending_without_an_open_run_needs_neither_the_sdk_client_nor_pydantic(finished_run, tmp_path, json_output):  # type: ignore[no-untyped-def]
    settings, _ = finished_run
    doc = _run_probe(tmp_path, _env_of(settings, tmp_path), "pending", *(["--json"] if json_output else []))
    assert doc["code"] == 0, doc["output"]
    if json_output:
        assert json.loads(doc["stdout"]) == {"waiting": [], "unanswered": []}
    else:
        assert doc["stdout"] == "no tool call is waiting for a decision", doc["output"]
    assert not _sdk_client(doc["modules"]), _sdk_client(doc["modules"])
    unused = {"pydantic", "grpc"} | S3 | MODEL
    assert not set(doc["packages"]) & unused, sorted(set(doc["packages"]) & unused)


async def test_a_connection_answers_as_the_client_does(finished_run):  # type: ignore[no-untyped-def]
    """run_view over a Connection (plain service calls for a finished run) and over the
    SDK's Client give the same view; the Connection builds no Client for it."""
    settings, run_id = finished_run
    connection = await open_connection(settings)
    through_service = await run_view(connection, run_id)
    assert "client" not in vars(connection)  # never built
    through_client = await run_view(await connect(settings), run_id)
    assert through_service.model_dump() == through_client.model_dump()
    assert through_service.source == "result" and through_service.state == "completed"


async def test_a_status_that_requires_encryption_does_not_take_a_plain_result(finished_run):  # type: ignore[no-untyped-def]
    """The plain result is read without the converter only where the converter would take
    it: with REWIND_REQUIRE_ENCRYPTION the converter refuses plaintext, and so does status."""
    import base64
    import dataclasses
    import os

    settings, run_id = finished_run
    key = base64.b64encode(os.urandom(32)).decode()
    strict = dataclasses.replace(settings, encryption_keys=f"kid1:{key}", require_encryption=True)
    view = await run_view(await open_connection(strict), run_id)
    assert view.status is None and "REWIND_REQUIRE_ENCRYPTION" in (view.failure or ""), view
