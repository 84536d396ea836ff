"""Issue 7, item 3: the Temporal server dies for 30 s mid-run and comes back on the same database.

Our own dev server (not the session one) on a fixed port with its own sqlite
file, one subprocess worker, three runs with slow steps. The server is
SIGKILLed (the harsher of stop/kill: no chance to flush anything), stays down
30 s, and is restarted on the same db file and port. The same worker process
must reconnect by itself, every run must complete, and every checkpoint
0..N of every run must be in the store with an unbroken parent chain.
"""

from __future__ import annotations

import asyncio
import json
import time

from as_user import empty_dir, rewind, user_env, user_workers
from fault_helpers import add_script, assert_chain, assert_well_formed, port_free, wait_until
from helpers import final_transcript, read_events, start_agent
from checkpoint_bridge.checkpoints.store import open_checkpoint_store
from rewind.client import connect
from rewind.settings.config import Settings
from rewind.temporal.dev_server import DevServer, _PortTaken, free_port

OUTAGE_S = 30.0
TOOL_STEPS = 6
RUNS = 3
SCRIPT = [
    *({"tool_calls": [{"name": "slow", "arguments": {"label": f"step-{i}", "seconds": 1.0}}]} for i in range(TOOL_STEPS)),
    {"content": "finished every slow step"},
]
LAST_STEP = len(SCRIPT)


def _on_fixed_ports(db):  # type: ignore[no-untyped-def]
    """A dev server on ports picked here (the restart below must reuse them): picked again if
    another process took one between picking and binding, as DevServer.start does itself
    when it picks them."""
    for attempt in range(3):
        try:
            return DevServer.start(db, port=free_port(), ui_port=free_port(), headless=True)
        except _PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def test_server_killed_for_30s_mid_run_then_restarted_on_same_db(
    tmp_path, settings, model, events_file, spawn_worker, payload_url
):
    db = tmp_path / "outage-server" / "temporal.db"
    server = _on_fixed_ports(db)
    port, ui_port = server.port, server.ui_port
    worker = None
    try:
        settings.temporal_address = server.address  # the worker below connects to our server
        client = await connect(Settings(temporal_address=server.address, payload_url=payload_url))
        model_name = add_script(model, SCRIPT)
        worker = spawn_worker()
        handles = [await start_agent(client, settings, f"outage run {i}", model=model_name) for i in range(RUNS)]
        run_ids = [h.id for h in handles]

        async with open_checkpoint_store(settings.store_url) as store:
            async def all_past_step_2() -> bool:
                return all([{0, 1, 2} <= await store.existing_steps(r, "main") for r in run_ids])

            await wait_until(all_past_step_2, "every run to mirror step 2", 60, poll_s=0.05)
            before = {r: max(await store.existing_steps(r, "main")) for r in run_ids}
        assert max(before.values()) < LAST_STEP - 1, f"runs nearly done before the outage: {before}"

        server.kill()
        down_at = time.time()
        await wait_until(lambda: port_free(port), "the killed server's port to close", 15)
        # The worker keeps running while the server is away (it retries its polls).
        while time.time() - down_at < OUTAGE_S:
            assert worker.process.poll() is None, (
                f"the worker exited {time.time() - down_at:.1f}s into the server outage "
                f"(code {worker.process.returncode}); see its log"
            )
            await asyncio.sleep(1.0)
        events_during = [e for e in read_events(events_file) if e["at"] > down_at]

        server = DevServer.start(db, port=port, ui_port=ui_port, headless=True)
        up_at = time.time()
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 120)
        done_at = time.time()

        assert worker.process.poll() is None, "the worker died after the server came back"
        for run_id, result in zip(run_ids, results):
            assert result.status.state == "completed", (run_id, result.status)
            assert result.status.mirror_pending == 0 and result.status.mirror_error is None, result.status
        events = read_events(events_file)
        # The one worker (no other was started) did the work after the restart: it reconnected.
        after = [e for e in events if e["at"] > up_at]
        assert after and {e["pid"] for e in after} == {worker.process.pid}, {e["pid"] for e in after}

        async with open_checkpoint_store(settings.store_url) as store:
            for run_id in run_ids:
                await assert_chain(store, run_id, LAST_STEP)
                transcript = await final_transcript(settings, run_id)
                assert_well_formed(transcript)
                tool_results = [m["content"] for m in transcript if m["role"] == "tool"]
                assert tool_results == [f"step-{i} done" for i in range(TOOL_STEPS)], tool_results
        retried = [e for e in events if e["kind"] == "slow_start" and e["attempt"] > 1]
        print(
            f"\n[server outage] {RUNS} runs at steps {sorted(before.values())} when the server was SIGKILLed; "
            f"down {up_at - down_at:.1f}s ({len(events_during)} tool events on the worker meanwhile); "
            f"all runs completed {done_at - up_at:.1f}s after the restart; "
            f"{len(retried)} tool attempts retried after the outage; same worker pid {worker.process.pid} throughout"
        )
    finally:
        if worker is not None:
            worker.stop()  # while its server is still up, so it shuts down at once
        server.kill()


async def test_a_worker_started_before_temporal_waits_for_it(tmp_path):
    """A deployment starts the worker before the Temporal server answers (or the server
    restarts meanwhile): the worker says once that it waits, naming the address and
    REWIND_STARTUP_WAIT_S, polls as soon as the server answers, and a run completes on it."""
    port, ui_port = free_port(), free_port()
    wdir, cli = empty_dir(tmp_path, "worker"), empty_dir(tmp_path, "cli")
    variables = dict(TEMPORAL_ADDRESS=f"127.0.0.1:{port}", REWIND_TASK_QUEUE="late-server")
    server = None
    async with user_workers() as start:
        worker = start(wdir, user_env(wdir, **variables), "--tool-modules", "examples.research_agent")
        try:
            said = await wait_until(lambda: "REWIND_STARTUP_WAIT_S" in worker.stderr() and worker.stderr(),
                                    "the worker saying that it waits", 60)
            assert f"cannot reach Temporal at 127.0.0.1:{port}" in said and "waiting up to" in said, said
            assert worker.process.poll() is None, worker.log()
            server = await asyncio.to_thread(DevServer.start, tmp_path / "late" / "temporal.db", port=port,
                                             ui_port=ui_port, headless=True)
            await worker.wait_ready()
            assert worker.stderr().count("REWIND_STARTUP_WAIT_S") == 1, worker.stderr()
            code, out, err = await rewind(cli, user_env(cli, **variables), "start", "--task",
                                          "Research these companies: Acme", "--run-id", "late-server-1", "--wait", "--json")
            assert code == 0, err
            assert json.loads(out)["status"]["state"] == "completed", out
        finally:
            if server is not None:
                server.kill()
