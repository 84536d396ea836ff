"""LangGraph's own checkpointer conformance suite (the `langgraph-checkpoint-conformance`
package, run as published) against RewindSaver on a local folder and on S3.

Every capability the suite knows is implemented, so every one must be detected
and pass: put, put_writes, get_tuple, list, delete_thread (required) and
copy_thread, prune, delete_for_runs (optional). Both savers run it: the async
one in the test's event loop, the sync one through its own store thread.
"""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from store_backends import Backend

from checkpoint_bridge.langgraph.saver import AsyncRewindSaver, RewindSaver


@pytest.mark.parametrize("kind", [AsyncRewindSaver, RewindSaver], ids=["async", "sync"])
async def test_the_conformance_suite_passes_every_capability(backend: Backend, kind: type) -> None:
    savers = []

    @checkpointer_test(name=f"{kind.__name__} on {backend.name}")
    async def rewind_saver():
        # A fresh store (own folder / S3 prefix) for each capability's tests, as the suite asks.
        saver = kind(backend.objects())
        savers.append(saver)
        yield saver
        await saver.__aexit__(None, None, None)

    report = await validate(rewind_saver)
    report.print_report()
    results = report.to_dict()["results"]
    summary = {name: (r["detected"], r["tests_passed"], r["tests_failed"], r["failures"]) for name, r in results.items()}
    assert set(results) == {c.value for c in ALL_CAPABILITIES}, summary
    assert all(r["detected"] for r in results.values()), f"capabilities not detected: {summary}"
    assert report.passed_all(), f"failures: {summary}"
    assert all(r["tests_passed"] > 0 and r["tests_failed"] == 0 for r in results.values()), summary
    assert len(savers) == len(ALL_CAPABILITIES)
    # The suite really went through the store: what its tests left is there as objects.
    left = [len(await s.objects.list(s.layout.all_threads())) for s in savers]
    assert sum(left) > 0, left
    for s in savers:
        await s.objects.aclose()
