"""Fixtures of the checkpoint-store conformance suite.

Every behavioural test takes ``store`` (or ``backend``) and therefore runs once
per backend: a local folder, S3, SQLite, PostgreSQL and DynamoDB. S3 (and DynamoDB) is a real HTTP server (moto's
``ThreadedMotoServer`` on a free port), not a mock of boto calls, so requests,
conditional writes, pagination and error responses go over the wire.

PostgreSQL and Redis are real servers too (Debian's packages, started on private
ports by the session fixtures ``postgres_url`` and ``redis_url``): ``redis`` is
Redis alone, ``hot`` is Redis as the hot tier in front of a folder. The session
fixtures live in ``tests/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest
from store_backends import (
    Backend,
    dynamodb_backend,
    file_backend,
    hot_backend,
    postgres_backend,
    redis_backend,
    s3_backend,
    sqlite_backend,
)

from checkpoint_bridge.checkpoints.store import CheckpointStore

@pytest.fixture(params=["file", "s3", "sqlite", "postgres", "dynamodb", "hot", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "file":
        chosen = file_backend(tmp_path)
    elif request.param == "sqlite":
        chosen = sqlite_backend(tmp_path)
    elif request.param == "postgres":
        chosen = postgres_backend(request.getfixturevalue("postgres_url"))
    elif request.param == "dynamodb":
        chosen = dynamodb_backend(request.getfixturevalue("moto_endpoint"))
    elif request.param == "hot":
        chosen = hot_backend(request.getfixturevalue("redis_url"), tmp_path)
    elif request.param == "redis":
        chosen = redis_backend(request.getfixturevalue("redis_url"))
    else:
        chosen = s3_backend(request.getfixturevalue("moto_endpoint"))
    yield chosen
    for store in chosen.opened:
        await store.aclose()


@pytest.fixture
def store(backend: Backend) -> CheckpointStore:
    """A fresh CheckpointStore with default options on the backend under test."""
    return backend.checkpoint_store()
