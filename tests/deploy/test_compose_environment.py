"""The compose file's worker environment is what the deployment runs on: every variable in
it is read by the product, and changing one breaks the worker with one clear line."""

from __future__ import annotations

import asyncio
import re

import botocore.credentials
import pytest

import compose_topology as ct
from deploy_stack import Stack
from rewind.settings.config import Settings
from rewind.temporal.dev_server import free_port


# A record of the worker's logging.basicConfig format (rewind/worker/main.py), levels below ERROR.
_LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ \S+ (DEBUG|INFO|WARNING) ")


class _Recording(dict):
    """An environment mapping that remembers which variables were looked up."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def test_interpolation_follows_compose_and_refuses_what_it_does_not_know():
    env = {"SET": "x", "EMPTY": ""}
    assert ct.interpolate("${SET:-d}/${EMPTY:-d}/${UNSET:-d}/${EMPTY-d}/${UNSET-d}/${UNSET}/$$HOME", env) == "x/d/d//d//$HOME"
    for text in ("$SET", "${SET:?required}", "${SET:+alt}", "${UNSET:-${SET}}", "${}", "${SET"):
        with pytest.raises(ct.ComposeError, match="unsupported interpolation"):
            ct.interpolate(text, env, "test")


def test_every_worker_variable_of_the_compose_file_is_read_by_the_product():
    env = ct.environment(ct.load_compose()["services"]["worker"], "worker")
    recording = _Recording(env)
    settings = Settings.from_env(recording)
    # Settings (rewind/settings/config.py) is the only reader of the environment; the S3
    # credentials are left to botocore's chain, which reads these from it.
    botocore_reads = {botocore.credentials.EnvProvider.ACCESS_KEY, botocore.credentials.EnvProvider.SECRET_KEY,
                      *botocore.credentials.EnvProvider.TOKENS}
    unread = sorted(set(env) - recording.read - botocore_reads)
    assert not unread, f"docker-compose.yml sets {unread} for the worker, but nothing reads them (a typo?)"
    # ...and what the file sets is what the product then uses (empty = unset).
    used = {
        "REWIND_STORE": settings.store_url, "REWIND_PAYLOADS": settings.payload_url,
        "AWS_ENDPOINT_URL": settings.s3_endpoint_url, "AWS_DEFAULT_REGION": settings.aws_region,
        "TEMPORAL_ADDRESS": settings.temporal_address, "TEMPORAL_NAMESPACE": settings.namespace,
        "REWIND_TASK_QUEUE": settings.task_queue,
    }
    for name, value in used.items():
        assert name not in env or env[name] == value, f"{name}={env[name]!r} in the file, but the worker uses {value!r}"
    # OPENAI_API_KEY / OPENAI_BASE_URL / REWIND_MODEL unset in the shell: empty, read as unset.
    assert settings.offline_model and settings.model_base_url is None and settings.model == Settings().model


def test_the_readme_and_the_compose_header_give_the_host_the_same_cli_environment():
    header = ct.COMPOSE_FILE.read_text().split("\nservices:", 1)[0]
    exports = {}
    for line in header.splitlines():
        line = line.lstrip("#").strip()
        if line.startswith("export "):
            for word in line.split("#", 1)[0].split()[1:]:
                key, _, value = word.partition("=")
                exports[key] = value
    assert exports == ct.readme_host_environment()


async def _worker_exit(stack: Stack, workdir, compose: dict) -> tuple[int | None, str, str]:
    env = stack.worker_env(workdir, compose)
    argv = ct.resolve_executable(compose["services"]["worker"]["command"], env)
    proc = await asyncio.create_subprocess_exec(*argv, cwd=workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        return None, out.decode(), err.decode()
    return proc.returncode, out.decode(), err.decode()


async def test_changing_the_worker_environment_breaks_the_worker(stack: Stack, new_dir):
    """Each change to the file's worker environment (in memory) stops the worker before it
    polls, with exit 1 and one line on stderr naming the variable."""
    bucket = stack.buckets[0]
    closed = f"127.0.0.1:{free_port()}"
    changes = {
        "REWIND_STORE": ({"REWIND_STORE": f"s3://{bucket}-missing/checkpoints"}, f"{bucket}-missing"),
        "AWS_ENDPOINT_URL": ({"AWS_ENDPOINT_URL": f"http://{closed}"}, "REWIND_STORE"),
        "REWIND_PAYLOADS": ({"REWIND_PAYLOADS": f"s3://{bucket}-gone/payloads"}, f"{bucket}-gone"),
    }
    runs = {
        name: _worker_exit(stack, new_dir(f"mutated-{name.lower()}"), ct.mutated(stack.compose, "worker", **change))
        for name, (change, _) in changes.items()
    }
    results = dict(zip(runs, await asyncio.gather(*runs.values())))
    for name, (code, out, err) in results.items():
        variable = "REWIND_PAYLOADS" if name == "REWIND_PAYLOADS" else "REWIND_STORE"
        needle = changes[name][1]
        lines = err.strip().splitlines()
        assert code not in (None, 0), f"{name} changed: the worker did not stop (exit {code})\n{err[-2000:]}"
        # The worker logs to stderr (INFO by default); the error is one line of its own, the last.
        errors = [line for line in lines if not _LOG_RECORD.match(line)]
        assert len(errors) == 1 and errors[0] == lines[-1], (
            f"{name} changed: expected log records and then one error line on stderr, got:\n{err[-2000:]}")
        assert errors[0].startswith(f"rewind: {variable}=") and needle in errors[0], (
            f"{name} changed: the error line does not name {variable} ({needle}): {errors[0]}")
        assert "Traceback" not in err + out, (name, err)
