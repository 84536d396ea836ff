"""The seeded fault schedule and the injector that plays it against the stack.

The schedule (kinds, moments, lengths) is a pure function of the seed and the
sizes, printed with every violation; the moments are offsets from the start
of the soak phase, so a replay hits the same kinds at the same times, though
not necessarily at the same instruction of a run (the runs race each other).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.soaking.s3proxy import MODES
from bench.soaking.shapes import LLM_TIMEOUT_S
from bench.soaking.stack import Stack

KINDS = {  # kind -> weight
    "worker_kill": 4, "server_kill": 1, "s3_window": 3, "model_429": 2, "model_500": 2, "model_hang": 1,
}
# After an outage a resource stays up for a while before the next one: at least as long as
# the outage lasted (S3: up at least half of any stretch of the soak), the Temporal server
# SERVER_RECOVERY_S after it is back (its restart takes a few seconds more than the pause).
# A fault drawn for a resource still down or recovering is drawn again from the other kinds.
# Without this, outages queued back to back: the first large soak had S3 down 86-94% of its
# first 400 s (and half of the workers started then exiting at their store check), so
# nothing could progress and every run of those minutes missed the driver's deadline.
SERVER_RECOVERY_S = 10.0
SERVER_RESTART_S = 3.0  # what a restart adds to the scheduled pause, about
# A model fault fails the next requests that come within this window of its injection, then
# lapses: a provider's outage lasts a while, it does not wait for traffic. Count-based faults
# without it queued up while few runs were left; the last run of a large soak (seed 466088)
# absorbed 117 of them, one per retry backoff, past the driver's deadline.
MODEL_FAULT_WINDOW_S = 30.0


@dataclass
class Fault:
    at_s: float  # offset from the soak's start
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    started: float | None = None  # wall clock (time.time()) when it was injected
    ended: float | None = None  # when its outage ended (None: instantaneous or never injected)

    def line(self, origin: float) -> str:
        when = f"{self.started - origin:7.1f}s" if self.started is not None else "   (not injected)"
        span = f" for {self.ended - self.started:.1f}s" if self.ended is not None and self.started is not None else ""
        params = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{when} {self.kind} {params}{span}"


def schedule(seed: int, count: int, duration_s: float, *, s3: bool) -> list[Fault]:
    """`count` faults over `duration_s`, a pure function of the arguments."""
    rng = random.Random(f"soak-faults-{seed}")
    kinds = {k: w for k, w in KINDS.items() if s3 or k != "s3_window"}
    moments = sorted(rng.uniform(1.0, duration_s) for _ in range(count))
    busy_until = {"server_kill": 0.0, "s3_window": 0.0}  # a resource's outage and recovery end
    out = []
    for at in moments:
        free = {k: w for k, w in kinds.items() if busy_until.get(k, 0.0) <= at}
        kind = rng.choices(list(free), list(free.values()))[0]
        params: dict[str, Any] = {}
        if kind == "worker_kill":
            params = {"victim": rng.randrange(1000), "replace_after_s": round(rng.uniform(0.0, 3.0), 1)}
        elif kind == "server_kill":
            params = {"down_s": round(rng.uniform(1.0, 6.0), 1)}
            busy_until[kind] = at + params["down_s"] + SERVER_RESTART_S + SERVER_RECOVERY_S
        elif kind == "s3_window":
            params = {"mode": rng.choice(MODES), "seconds": round(rng.uniform(1.0, 8.0), 1)}
            busy_until[kind] = at + 2 * params["seconds"]
        elif kind == "model_429":
            params = {"count": rng.randint(1, 3), "retry_after": rng.choice([0.5, 1, 2])}
        elif kind == "model_500":
            params = {"count": rng.randint(1, 3)}
        elif kind == "model_hang":
            params = {"hang_s": round(LLM_TIMEOUT_S + rng.uniform(1.0, 3.0), 1)}
        out.append(Fault(round(at, 2), kind, params))
    return out


def downtime(faults: list[Fault], origin: float, end: float) -> dict[str, float]:
    """The share of [origin, end] each resource was down (outages as injected)."""
    span = max(end - origin, 1e-9)
    out = {}
    for kind, name in (("s3_window", "s3"), ("server_kill", "temporal")):
        down = sum((f.ended or end) - f.started for f in faults if f.kind == kind and f.started is not None)
        out[name] = round(down / span, 3)
    return out


class Injector:
    """Plays a schedule; outages of one resource (the server, the S3 endpoint) never overlap
    themselves, but outages of different resources do."""

    def __init__(self, stack: Stack, faults: list[Fault]) -> None:
        self.stack, self.faults = stack, faults
        self._server_lock, self._s3_lock = asyncio.Lock(), asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self.origin = 0.0
        self.errors: list[str] = []
        self.restarts = 0  # workers that exited on their own and were started again

    async def run(self, origin: float, stop: asyncio.Event) -> None:
        self.origin = origin
        supervisor = asyncio.create_task(self._supervise(stop))
        try:
            await self._play(stop)
            await stop.wait()
        finally:
            supervisor.cancel()

    async def _supervise(self, stop: asyncio.Event) -> None:
        """A worker that exits on its own (one started while Temporal or S3 was down stops
        with one line, as it should) is started again after a pause, as a deployment's
        restart policy would (compose's `restart: unless-stopped`, a Kubernetes
        Deployment). Without this, every worker could be gone and runs wait forever."""
        seen: set[int] = set()
        while not stop.is_set():
            for worker in list(self.stack.workers):
                if worker.process.poll() is not None and worker.pid not in self.stack.killed \
                        and worker.pid not in seen:
                    seen.add(worker.pid)
                    self.restarts += 1
                    self.stack.start_worker()
            try:
                await asyncio.wait_for(stop.wait(), 2.0)
            except TimeoutError:
                pass

    async def _play(self, stop: asyncio.Event) -> None:
        for fault in self.faults:
            delay = self.origin + fault.at_s - time.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break  # the soak is over: the rest is not injected
                except TimeoutError:
                    pass
            if stop.is_set():
                break
            self._tasks.append(asyncio.create_task(self._inject(fault)))

    async def settle(self) -> None:
        """Every outage over, the server up, K workers alive."""
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.stack.server is None:
            await self.stack.restart_server()
        while len(self.stack.live_workers()) < self.stack.worker_count:
            self.stack.start_worker()

    async def _inject(self, fault: Fault) -> None:
        stack, p = self.stack, fault.params
        try:
            if fault.kind == "worker_kill":
                if not stack.live_workers():
                    return
                fault.started = time.time()
                p["pid"] = stack.kill_worker(p["victim"])
                await asyncio.sleep(p["replace_after_s"])
                stack.start_worker()
            elif fault.kind == "server_kill":
                async with self._server_lock:
                    fault.started = time.time()
                    await stack.kill_server()
                    await asyncio.sleep(p["down_s"])
                    await stack.restart_server()
                    fault.ended = time.time()
            elif fault.kind == "s3_window":
                assert stack.proxy is not None
                async with self._s3_lock:
                    fault.started = time.time()
                    await stack.proxy.window(p["mode"], p["seconds"])
                    fault.ended = time.time()
            elif fault.kind == "model_429":
                fault.started = time.time()
                stack.model.inject_fault(429, count=p["count"], retry_after=p["retry_after"],
                                         within_s=MODEL_FAULT_WINDOW_S)
            elif fault.kind == "model_500":
                fault.started = time.time()
                stack.model.inject_fault(500, count=p["count"], within_s=MODEL_FAULT_WINDOW_S)
            elif fault.kind == "model_hang":
                fault.started = time.time()
                stack.model.inject_fault(200, delay_s=p["hang_s"], within_s=MODEL_FAULT_WINDOW_S)
        except Exception as exc:  # noqa: BLE001 - reported, never a silent skip
            self.errors.append(f"{fault.kind} at {fault.at_s}s could not be injected: {exc!r}")


def as_json(faults: list[Fault], origin: float) -> list[dict[str, Any]]:
    return [{**asdict(f), "started_s": None if f.started is None else round(f.started - origin, 2)} for f in faults]
