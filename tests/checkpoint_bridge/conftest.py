"""Fixtures of the checkpoint-store conformance suite.

Every behavioural test takes ``store`` (or ``backend``) and therefore runs once
per backend: a local folder and S3. S3 is a real HTTP server (moto's
``ThreadedMotoServer`` on a free port), not a mock of boto calls, so requests,
conditional writes, pagination and error responses go over the wire.

Self-contained on purpose: the session server fixture can move to
``tests/conftest.py`` unchanged when other suites need S3.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from moto.server import ThreadedMotoServer
from store_backends import Backend, file_backend, s3_backend

from checkpoint_bridge.store import CheckpointStore

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


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server running for the whole session, with fake credentials set."""
    with pytest.MonkeyPatch.context() as patch:
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


@pytest.fixture(params=["file", "s3"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "file":
        chosen = file_backend(tmp_path)
    else:
        chosen = s3_backend(request.getfixturevalue("moto_endpoint"))
    yield chosen
    for store in chosen.opened:
        await store.aclose()


@pytest.fixture
def store(backend: Backend) -> CheckpointStore:
    """A fresh CheckpointStore with default options on the backend under test."""
    return backend.checkpoint_store()
