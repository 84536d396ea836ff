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
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from checkpoint_bridge.objects import FileObjectStore, ObjectStore, S3ObjectStore
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


def make_bucket(endpoint: str) -> tuple[Any, str]:
    """A new, empty bucket on the moto server, and a boto3 client to inspect it."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    bucket = f"rewind-test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    return s3, bucket


@dataclass
class Backend:
    """One storage backend under test, plus ways to look at it from outside."""

    name: str
    new_objects: Callable[[], ObjectStore]
    """A fresh, empty ObjectStore in its own folder / prefix."""
    all_keys: Callable[[], list[str]]
    """Every file / key in the backend's whole space, not just under the store."""
    opened: list[ObjectStore] = field(default_factory=list)

    def objects(self) -> ObjectStore:
        store = self.new_objects()
        self.opened.append(store)
        return store

    def checkpoint_store(self, **options: Any) -> CheckpointStore:
        return CheckpointStore(self.objects(), **options)


def _file_backend(tmp_path: Path) -> Backend:
    space = tmp_path / "space"
    space.mkdir()
    counter = iter(range(1_000_000))

    def all_keys() -> list[str]:
        return sorted(p.relative_to(space).as_posix() for p in space.rglob("*") if p.is_file())

    return Backend("file", lambda: FileObjectStore(space / f"store-{next(counter)}"), all_keys)


def _s3_backend(endpoint: str) -> Backend:
    s3, bucket = make_bucket(endpoint)

    def all_keys() -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def new_objects() -> S3ObjectStore:
        return S3ObjectStore(bucket, f"tests/{uuid.uuid4().hex[:8]}", endpoint_url=endpoint)

    return Backend("s3", new_objects, all_keys)


@pytest.fixture(params=["file", "s3"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "file":
        chosen = _file_backend(tmp_path)
    else:
        chosen = _s3_backend(request.getfixturevalue("moto_endpoint"))
    yield chosen
    for store in chosen.opened:
        await store.aclose()


@pytest.fixture
def store(backend: Backend) -> CheckpointStore:
    """A fresh CheckpointStore with default options on the backend under test."""
    return backend.checkpoint_store()
