"""The README and the guides say what really happens: the Python API example runs
as written, and the configuration guide lists every variable the product reads."""

from __future__ import annotations

import asyncio
import re
import sys
import uuid
from pathlib import Path

from as_user import UserWorker, user_env

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
GUIDES = REPO / "docs"


def _guide(name: str) -> str:
    return (GUIDES / name).read_text()


def test_the_configuration_table_lists_every_variable_the_product_reads():
    source = (REPO / "rewind" / "settings" / "config.py").read_text()
    read = set(re.findall(r'read\.(?:str|raw|int|float|flag)\("([A-Z0-9_]+)"', source))
    assert {"REWIND_STORE", "REWIND_PAYLOADS", "OPENAI_BASE_URL", "AWS_ENDPOINT_URL"} <= read
    table = _guide("configuration.md")
    missing = sorted(v for v in read if f"`{v}`" not in table)
    assert not missing, f"docs/configuration.md does not list {missing}"
    # The Temporal connection's variables (read through the SDK's envconfig, rewind/settings/temporal.py).
    from rewind.settings.temporal import VARIABLES

    temporal = {"TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE"}
    for name, (variable, _) in VARIABLES.items():
        forms = [f"{variable}_PATH", f"{variable}_DATA"] if name in ("server_ca_cert", "client_cert", "client_key") else [variable]
        temporal.update(forms)
    unlisted = sorted(v for v in temporal if f"`{v}`" not in table)
    assert not unlisted, f"docs/configuration.md does not name {unlisted}"
    # And no other module reads the environment.
    readers = sorted(
        str(path.relative_to(REPO)) for folder in ("workflows", "activities", "checkpoint_bridge", "rewind")
        for path in (REPO / folder).rglob("*.py")
        if re.search(r"os\.environ\b|os\.getenv\(", path.read_text()) and path.name not in {"config.py", "testing.py"}
    )
    assert readers == [], f"modules reading the environment besides rewind/settings/config.py: {readers}"


async def test_the_python_api_example_runs_as_written(temporal_server, tmp_path, model):
    block = re.search(r"### Python API.*?```python\n(.*?)```", _guide("tools-and-agents.md"), re.S)
    assert block, "docs/tools-and-agents.md has no Python API example"
    code = block.group(1)
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"api-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"file://{tmp_path / 'store'}", REWIND_PAYLOADS=f"file://{tmp_path / 'payloads'}",
                   OPENAI_API_KEY="test-key", OPENAI_BASE_URL=model.base_url, REWIND_DEMO_FAILURE_RATE="0")
    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        folder = tmp_path / "user"
        folder.mkdir()
        (folder / "example.py").write_text(code)
        proc = await asyncio.create_subprocess_exec(sys.executable, "example.py", cwd=folder, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode()
    assert proc.returncode == 0, err.decode()[-3000:]
    lines = text.splitlines()
    assert lines[0].startswith("completed 3 $"), text
    assert len(lines) == 1 + 4 and lines[-1].endswith(":main:3 final answer"), text


def test_the_deployment_profile_file_is_one_the_sdk_reads():
    """The deployment guide's profile file example, read by the SDK's envconfig as a worker reads it."""
    from temporalio.envconfig import ClientConfig

    guide = _guide("deployment.md")
    section = guide[guide.index("### Temporal Cloud, mTLS, profiles"):]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block, "docs/deployment.md shows no profile file"
    profiles = ClientConfig.load(config_source=block.group(1), config_file_strict=True).profiles
    assert set(profiles) == {"cloud", "prod"}
    assert profiles["cloud"].api_key and profiles["cloud"].address.endswith(":7233")
    tls = profiles["prod"].tls
    assert tls is not None and tls.client_cert is not None and tls.client_private_key is not None and tls.server_name
    for variable in ("TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH",
                     "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE"):
        assert variable in section, f"the deployment section does not show {variable}"
