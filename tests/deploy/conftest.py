"""Stand-ins for docker-compose.yml's services, as local processes (no Docker engine here).

`temporal`   -> a Temporal dev server (rewind.temporal.dev_server.DevServer)
`temporal-namespace-init` -> its own script from the file, run with the `temporal` CLI of the venv
`minio`      -> moto's S3 server (ThreadedMotoServer)
`minio-init` -> the buckets of its `mc mb` lines, created with boto3 and its `mc alias` credentials
`worker`     -> `rewind worker ...` processes (the service's command), each in its own empty
                directory with the service's environment (hosts mapped) plus PATH and HOME only

The S3 stand-in has a gate (`S3Gate`) that can hold requests under a prefix: the
deployment test uses it to hold a run at a known point before it SIGKILLs a worker.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

import compose_topology as ct
from deploy_stack import Processes, S3Gate, Stack, tail
from rewind.temporal.dev_server import DevServer, temporal_binary


# -- failure reports: dump the processes' logs --------------------------------------

@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _service_script(service: dict[str, Any], mapping: dict[str, str]) -> list[str]:
    return [ct.rewrite_hosts({"arg": arg}, mapping)["arg"] for arg in ct.command_script(service)]


def _expand(word: str, env: dict[str, str]) -> str:
    """`$NAME` / `${NAME}` in one shell word of an init script, from the service's environment."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in env, f"minio-init: ${name} is not in the service's environment"
        return env[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, word)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    compose = ct.load_compose()
    services = compose["services"]
    root = tmp_path_factory.mktemp("compose")
    werkzeug_logger = logging.getLogger("werkzeug")
    old_level = werkzeug_logger.level
    werkzeug_logger.setLevel(logging.ERROR)  # moto's per-request access log

    # `temporal` -> the dev server.
    temporal = DevServer.start(root / "temporal" / "temporal.db", headless=True)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        # `minio` -> moto's S3 server, behind the gate.
        moto.start()
        host, port = moto.get_host_and_port()
        # (werkzeug's server calls `server.app` per request: wrap it in the gate)
        gate = S3Gate(moto._server.app)  # type: ignore[union-attr]
        moto._server.app = gate  # type: ignore[union-attr]
        s3_endpoint = f"http://{host}:{port}"

        # Which (service, container port) each stand-in replaces; both must be published,
        # so that the host's `localhost:<published port>` maps onto the same stand-in.
        stand_ins = {("temporal", 7233): temporal.address, ("minio", 9000): f"{host}:{port}"}
        compose_hosts, published_hosts = {}, {}
        for (name, container_port), address in stand_ins.items():
            published = ct.published_ports(services[name])
            assert container_port in published, f"services.{name}: port {container_port} is not published"
            compose_hosts[f"{name}:{container_port}"] = address
            for local in ("localhost", "127.0.0.1"):
                published_hosts[f"{local}:{published[container_port]}"] = address

        # `temporal-namespace-init` -> its script, as the file has it, against the dev server.
        init_env = {"PATH": f"{temporal_binary().parent}{os.pathsep}{ct.SYSTEM_PATH}", "HOME": str(root)}
        script = _service_script(services["temporal-namespace-init"], compose_hosts)
        done = subprocess.run(script, env=init_env, cwd=root, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"temporal-namespace-init failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"

        # `minio-init` -> the buckets of its `mc mb` lines, with its `mc alias` credentials.
        init = services["minio-init"]
        init_vars = ct.environment(init, "minio-init")
        text = "\n".join(ct.command_script(init))
        alias_line = re.search(r"^\s*mc alias set .*$", text, re.M)
        assert alias_line, "minio-init: no `mc alias set` line"
        words = [_expand(w, init_vars) for w in shlex.split(alias_line.group(0))]
        assert len(words) == 7, f"minio-init: expected `mc alias set ALIAS URL USER PASSWORD`, got {alias_line.group(0)!r}"
        # moto accepts any credentials; these are the ones MinIO would have (its root user).
        credentials = {"aws_access_key_id": words[5], "aws_secret_access_key": words[6]}
        buckets = []
        for bucket in ct.minio_init_buckets(init):
            assert ct.rewrite_hosts({"url": bucket.alias_url}, compose_hosts)["url"] == s3_endpoint, (
                f"minio-init talks to {bucket.alias_url}, which is not the minio service")
            s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **credentials)
            s3.create_bucket(Bucket=bucket.name)
            buckets.append(bucket.name)

        yield Stack(compose, root, temporal, s3_endpoint, gate, compose_hosts, published_hosts, buckets, credentials)
    finally:
        try:
            moto.stop()
        finally:
            temporal.stop()
            werkzeug_logger.setLevel(old_level)


@pytest.fixture
def processes(request: pytest.FixtureRequest, stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Processes]:
    # Logs live outside every process's working directory (those must stay empty).
    procs = Processes(tmp_path_factory.mktemp("logs"))
    yield procs
    procs.stop_all()
    call = getattr(request.node, "rep_call", None)
    if call is not None and call.failed:
        print("\n===== logs of the deployment's processes =====")
        print(procs.report())
        print(f"----- temporal dev server {stack.temporal.log_file}\n{tail(stack.temporal.log_file)}")


@pytest.fixture
def new_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A new, empty directory (a container's working directory, or the host's shell)."""
    def make(name: str) -> Path:
        path = tmp_path_factory.mktemp(name)
        assert not any(path.iterdir())
        return path
    return make
