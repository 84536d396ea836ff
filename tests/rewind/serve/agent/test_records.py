"""The Agent Server API's records: two writers of one record both land (a version written
meanwhile is read again, never an error for the request that lost the race)."""

import asyncio

from checkpoint_bridge.stores.urls import open_object_store
from rewind.serve.agent.records import Records, RunRecord


async def test_a_write_that_lost_the_race_reads_again_and_both_edits_land(tmp_path):
    runs = Records(open_object_store(f"file://{tmp_path}")).runs
    await runs.put(RunRecord(run_id="r1", thread_id="t1", assistant_id="g:graph", graph_id="g:graph"), "t1", "r1")
    read_first = asyncio.Event()
    other_wrote = asyncio.Event()
    tries = []

    async def slow(record: RunRecord) -> RunRecord:
        tries.append(record.version)
        read_first.set()
        await other_wrote.wait()  # the other writer writes the version this one is about to write
        return record.model_copy(update={"metadata": {**record.metadata, "webhook": "sent"}})

    def fast(record: RunRecord) -> RunRecord:
        return record.model_copy(update={"status": "success"})

    slow_change = asyncio.create_task(runs.change(("t1", "r1"), slow))
    await read_first.wait()
    await runs.change(("t1", "r1"), fast)
    other_wrote.set()
    await slow_change
    final = await runs.get("t1", "r1")
    assert final is not None and final.version == 3 and tries == [1, 2]
    assert final.status == "success" and final.metadata == {"webhook": "sent"}
