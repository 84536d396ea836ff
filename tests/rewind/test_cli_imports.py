"""The read-only commands load only what they use.

`rewind --version`, `--help`, `tree` and `show` on a folder store run in a
fresh process as a user's would (the console script's own code, an
environment built from scratch); the process then lists the top-level
packages it loaded. No Temporal client for a command that reads only the
store, no S3 client for a folder store, no openai anywhere but the worker.
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

from checkpoint_bridge.document.schema import AgentCheckpoint
from checkpoint_bridge.store import open_checkpoint_store
from workflows.ids import checkpoint_id

# Runs `rewind ARGS` in this process (as the console script does, but without its
# os._exit), then prints the top-level packages loaded, one JSON list.
PROBE = """
import json, sys
from rewind.cli import run
try:
    code = run(sys.argv[1:])
except SystemExit as exit:  # --version and --help end through argparse
    code = exit.code
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "packages": sorted({name.split(".")[0] for name in sys.modules}),
                         "modules": sorted(sys.modules)}))
"""

CLIENTS = {"temporalio", "grpc", "google"}             # the Temporal client and its protobuf / gRPC
S3 = {"aioboto3", "aiobotocore", "boto3", "botocore"}  # the S3 client
MODEL = {"openai", "httpx", "tiktoken"}                # the model client (the worker's)


# The models a checkpoint reader does not need: the workflow's contracts (35 pydantic
# models) and the diff's; building them costs `tree` and `show` more than their other imports.
NOT_FOR_READERS = {"workflows.contracts", "checkpoint_bridge.views.diff"}


def _run_probe(cwd, env, *args: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    doc["output"] = done.stdout + done.stderr
    return doc


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
