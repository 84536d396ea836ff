"""Conformance: a store that is down fails with StoreUnavailableError, never a library error."""

from __future__ import annotations

import time

import pytest
from checkpoint_factory import first_step
from store_backends import Backend

from checkpoint_bridge.stores import S3ObjectStore
from checkpoint_bridge.checkpoints.store import CheckpointStore
from workflows.vocabulary.errors import StoreUnavailableError


async def test_writing_to_an_unavailable_store_names_the_store(backend: Backend) -> None:
    store = backend.unavailable()
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await store.save(first_step())
    message = str(caught.value)
    assert store.url in message
    assert "check" in message  # says what to look at
    assert caught.value.retryable
    # The library error is kept as the cause, for logs, but does not leak as the type.
    assert caught.value.__cause__ is not None
    assert not type(caught.value).__module__.startswith(("botocore", "aiohttp"))
    assert time.monotonic() - started < 10, "an unreachable store must fail fast, not hang"


async def test_reading_an_unreachable_s3_store(backend: Backend) -> None:
    if backend.name != "s3":
        pytest.skip("an unusable folder simply holds nothing to read")
    store = backend.unavailable()
    assert isinstance(store.objects, S3ObjectStore)
    for call in (store.load("run-1:main:0"), store.list_checkpoints("run-1"), store.existing_steps("run-1", "main")):
        with pytest.raises(StoreUnavailableError) as caught:
            await call
        assert store.url in str(caught.value)
        assert str(store.objects.endpoint_url) in str(caught.value)


async def test_missing_bucket_says_so(moto_endpoint: str) -> None:
    store = CheckpointStore(S3ObjectStore("no-such-bucket-here", "x", endpoint_url=moto_endpoint))
    try:
        with pytest.raises(StoreUnavailableError, match=r"bucket 'no-such-bucket-here' does not exist"):
            await store.save(first_step())
    finally:
        await store.aclose()
