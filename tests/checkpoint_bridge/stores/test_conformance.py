"""The object-store conformance suite (checkpoint_bridge/stores/conformance.py), every
check on every backend: a local folder, S3 (moto's server), SQLite, PostgreSQL.

Each check is its own test, so a failure names the backend and the guarantee.
"""

from __future__ import annotations

import pytest
from store_backends import Backend

from checkpoint_bridge.stores import S3ObjectStore, conformance


def subject_of(backend: Backend) -> conformance.Subject:
    subject = conformance.Subject(name=backend.name, new_store=backend.new_objects, reopen=backend.reopen,
                                  unreachable=backend.broken, reads_need_a_server=backend.name not in ("file", "hot"))
    if backend.name == "s3":
        # Small pages: the paginator's path without moto taking 10 s for 1,000+ PUTs.
        def small_pages() -> S3ObjectStore:
            made = backend.new_objects()
            assert isinstance(made, S3ObjectStore)
            return S3ObjectStore(made.bucket, made.prefix, endpoint_url=made.endpoint_url, list_page_size=40)

        subject.new_store, subject.many = small_pages, 130
    return subject


@pytest.mark.parametrize("check", conformance.CHECKS, ids=[c.__name__.removeprefix("check_") for c in conformance.CHECKS])
async def test_conformance(backend: Backend, check) -> None:  # type: ignore[no-untyped-def]
    await conformance.run_check(subject_of(backend), check)


async def test_validate_reports_every_check_and_a_broken_backend_fails(backend: Backend) -> None:
    """validate() as a third party runs it: a report of every check; a backend that
    overwrites on conflict is caught."""
    if backend.name != "file":
        pytest.skip("the report itself is backend-independent")

    class Overwriting:
        """A store that ignores conditional creates: what an S3 server ignoring If-None-Match does."""

        def __init__(self, inner):  # type: ignore[no-untyped-def]
            self.inner, self.url = inner, inner.url

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        async def put_if_absent(self, key: str, data: bytes) -> bool:
            await self.inner.delete(key)
            return await self.inner.put_if_absent(key, data)

    good = await conformance.validate(subject_of(backend), [conformance.check_conditional_create, conformance.check_listing])
    assert good.passed, good.text()
    assert "2 of 2 checks passed" in good.text()
    bad_subject = conformance.Subject("overwriting", lambda: Overwriting(backend.new_objects()),
                                      lambda s: Overwriting(backend.reopen(s.inner)))
    bad = await conformance.validate(bad_subject, [conformance.check_conditional_create])
    assert not bad.passed
    assert "FAIL check_conditional_create: the same bytes again did not return False" in bad.text()
