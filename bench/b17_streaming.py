"""17. Streaming: what watching a run live costs, and how fast the tokens arrive (issue 59).

Real servers throughout: a Temporal dev server, Rewind workers as processes of their own
(`python worker.py --tool-modules bench.tools`, the local event bus), the scripted model in a
process of its own (bench.stream_model) streaming a token a chunk at a pace a script turn sets
and noting when it wrote each chunk (`chunk_times`), `rewind watch --json` and `rewind serve`
as subprocesses. Five parts:

1. History: a one-call run (the model answers with text) on a streaming worker, watched, against
   the same run on a worker with REWIND_MODEL_STREAM=0, and a 200-word answer against a 20-word
   one: events and bytes of the workflow's history.
2. Delivered rate: a run held at a gate tool until its readers are connected (rewind.events in
   this process and `rewind watch --json` as a subprocess), then an answer streamed at 50 and at
   500 tokens/s. Rate = tokens per second between the first and the last token, on the reader
   (the time the delta carrying the token arrived) over the server's own (the time it wrote the
   token's chunk).
3. Added latency per delta, from the same runs: a token's arrival at the reader minus the time
   the server wrote its chunk (joined by offset in the text: a delta the redactor held back is
   timed by the delta that carried it).
4. N concurrent runs streaming at once (one gate opens them all), each watched over SSE through
   one `rewind serve` (httpx): each watcher's durable events against the store's replay of its
   run, its deltas put together against each call's recorded message, and the lag of what it got
   after the gate opened (arrival minus the event's `time`).
5. The same streamed call on `temporalio.contrib.workflow_streams` (bench.workflow_streams_baseline):
   its history per call (publishing off, with its defaults, with force_flush on every delta) and
   its latency per delta, read by its own subscriber, against Rewind's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import (REPO, ProcSampler, Section, WorkerProcess, history_breakdown, history_events, log, median,
                          percentile, start_agent, wait_floor_polling, wait_polling)
from bench.stream_model import ModelProcess
from rewind.local.testing import LoggedProcess
from rewind.worker.scripted_stream import pieces

RATES = (50, 500)
RATE_TARGET = 0.95
END_TYPES = ("run.completed", "run.failed", "run.cancelled")
REWIND_BIN = Path(sys.executable).parent / "rewind"
READY_S = 300.0  # how long readers may take to connect before a gate opens anyway


# ---------------------------------------------------------------- texts and joins


def words(n: int, seed: int) -> str:
    """`n` made-up words of prose (bench.tools' vocabulary), ending with a full stop."""
    from bench.tools import _vocabulary

    vocabulary, weights = _vocabulary()
    chosen = random.Random(seed).choices(vocabulary, cum_weights=weights, k=n)
    return " ".join(chosen).capitalize() + "."


def text_of_tokens(tokens: int, seed: int) -> str:
    """Prose of at least `tokens` tokens (as the scripted model cuts it: a token a chunk)."""
    n = max(tokens // 2, 1)
    while len(pieces(text := words(n, seed))) < tokens:
        n += max((tokens - len(pieces(text))) // 2, 1)
    return text


def token_arrivals(text: str, written: list[float], deltas: list[tuple[float, str]]) -> list[float] | None:
    """When each token of `text` reached the reader: the arrival of the delta that carried its
    last character. None if the deltas do not put `text` back together."""
    if "".join(d for _, d in deltas) != text or len(written) != len(pieces(text)):
        return None
    arrivals, ends, end = [], [], 0
    for _, piece in deltas:
        end += len(piece)
        ends.append(end)
    j, end = 0, 0
    for token in pieces(text):
        end += len(token)
        while ends[j] < end:
            j += 1
        arrivals.append(deltas[j][0])
    return arrivals


def rate(times: list[float]) -> float | None:
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None


def measured(text: str, written: list[float], deltas: list[tuple[float, str]]) -> dict[str, Any]:
    """A reader's delivered rate over the server's, and its added latency per token (seconds)."""
    arrivals = token_arrivals(text, written, deltas)
    if arrivals is None:
        return {"complete": False, "deltas": len(deltas), "tokens": len(written)}
    server, delivered = rate(written), rate(arrivals)
    return {"complete": True, "deltas": len(deltas), "tokens": len(written), "server_rate": server,
            "delivered_rate": delivered,
            "ratio": delivered / server if server and delivered else None,
            "latencies": [a - w for a, w in zip(arrivals, written)]}


def text_deltas(events: list[tuple[float, dict[str, Any]]], text: str) -> list[tuple[float, str]]:
    """The text deltas (arrival, text) of the call whose recorded message is `text`, its last attempt."""
    done = [e for _, e in events if e["type"] == "model.completed"
            and (e["data"].get("message") or {}).get("content") == text]
    if not done:
        return []
    call, attempt = done[-1]["data"]["call"], done[-1]["data"].get("attempts", 1)
    return [(t, e["data"]["text"]) for t, e in events if e["type"] == "model.delta" and e["data"].get("call") == call
            and e["data"].get("attempt") == attempt and "text" in e["data"]]


def when(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["time"]).replace("Z", "+00:00")).timestamp()


def chunk_times_of(model: ModelProcess, name: str, text: str) -> list[float]:
    """The server's chunk times of script `name`'s streamed answer `text`."""
    for entry in model.requests():
        message = (((entry.get("response") or {}).get("choices") or [{}])[0]).get("message") or {}
        if entry.get("model") == f"script:{name}" and message.get("content") == text and entry.get("chunk_times"):
            return entry["chunk_times"]
    raise RuntimeError(f"the scripted model has no streamed answer of script {name!r}")


def pct_ms(values: list[float], p: float) -> float | None:
    got = percentile(values, p)
    return None if got is None else got * 1000


# ---------------------------------------------------------------- the stack


def user_env(settings: Any) -> dict[str, str]:
    """What `rewind watch` and `rewind serve` read: the worker's Temporal, store and home."""
    return {**os.environ, "TEMPORAL_ADDRESS": settings.temporal_address, "REWIND_TASK_QUEUE": settings.task_queue,
            "REWIND_STORE": settings.store_url, "REWIND_PAYLOADS": settings.payload_url,
            "REWIND_HOME": str(settings.home), "REWIND_LOG_LEVEL": "WARNING"}


class Stack:
    """The dev server, the model process, a streaming worker (and, for part 1, one that does not stream)."""

    def __init__(self, suite: Any) -> None:
        self.suite = suite
        self.folder = suite.tmp / f"streaming-{uuid.uuid4().hex[:4]}"
        self.procs: list[Any] = []

    async def start(self) -> "Stack":
        suite = self.suite
        self.server = suite.start_temporal("streaming")
        self.client = await suite.client(self.server)
        self.model = ModelProcess(self.folder / "model.log")
        self.procs.append(self.model)
        self.settings = suite.settings(self.server, "streaming")
        self.gate_log = self.folder / "gates.jsonl"  # bench.tools.gate's starts
        self.worker = await self.worker_process(self.settings, "worker", {"BENCH_EVENTS": str(self.gate_log)})
        return self

    async def worker_process(self, settings: Any, name: str, extra_env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(settings, self.model, self.folder / f"{name}.log", extra_env=extra_env)
        self.procs.append(worker)
        await wait_polling(self.client, settings.task_queue, worker)
        return worker

    def gate_starts(self, gate: Path) -> list[float]:
        """When runs reached `gate` (time.time()), as the gate tool logged it."""
        if not self.gate_log.exists():
            return []
        lines = [json.loads(line) for line in self.gate_log.read_text().splitlines() if line.strip()]
        return [e["at"] for e in lines if e.get("kind") == "gate_start" and e.get("gate") == str(gate)]

    def pids(self) -> dict[str, int]:
        """The processes part 4 samples: the worker, the dev server, the model, this one (the watchers)."""
        return {"worker": self.worker.pid, "dev server": self.server.process.pid, "model": self.model.process.pid,
                "benchmark (watchers)": os.getpid()}

    def stop(self, proc: Any) -> None:
        with contextlib.suppress(Exception):
            proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc)
        self.suite.stop_temporal(self.server)


async def collect(source: Any, into: list[tuple[float, dict[str, Any]]]) -> None:
    async for event in source:
        into.append((time.time(), event.model_dump(mode="json") if hasattr(event, "model_dump") else event))


async def cli_watch(run_id: str, settings: Any, into: list[tuple[float, dict[str, Any]]]) -> int:
    """`rewind watch RUN --json` as a user runs it, each line timed as it arrives; its exit code."""
    proc = await asyncio.create_subprocess_exec(str(REWIND_BIN), "watch", run_id, "--json", env=user_env(settings),
                                                cwd=str(settings.home), stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        while line := await proc.stdout.readline():
            into.append((time.time(), json.loads(line)))
        return await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout_s:.0f} s")
        await asyncio.sleep(0.02)


def at_gate(events: list[tuple[float, dict[str, Any]]]) -> bool:
    return any(e["type"] == "tool.started" and e["data"].get("tool") == "gate" for _, e in events)


def gated_script(gate: Path, text: str, tokens_per_s: float) -> list[dict[str, Any]]:
    """A call to the gate tool, then the answer streamed at `tokens_per_s`."""
    return [{"tool_calls": [{"name": "gate", "arguments": {"path": str(gate)}}]},
            {"content": text, "stream": {"tokens_per_s": tokens_per_s}}]


# ---------------------------------------------------------------- 1. history


async def _history_run(stack: Stack, settings: Any, text: str, watch: bool) -> dict[str, Any]:
    from rewind.watching import events

    name = f"hist-{uuid.uuid4().hex[:8]}"
    stack.model.add_script(name, [{"content": text, "stream": {"tokens_per_s": 500}}])
    handle = await start_agent(stack.client, settings, f"script:{name}", 1, run_id=f"bench-{name}")
    seen: list[tuple[float, dict[str, Any]]] = []
    reader = asyncio.create_task(collect(events(handle.id, settings=settings, client=stack.client), seen)) \
        if watch else None
    result = await handle.result()
    if reader is not None:
        await asyncio.wait_for(reader, 120)
    assert result.status.state == "completed", result.status
    history = await history_events(stack.client, handle.id)
    (entry,) = [e for e in stack.model.requests() if e.get("model") == f"script:{name}"]
    return {"events": len(history), "bytes": sum(e.ByteSize() for e in history),
            "model_result_bytes": history_breakdown(history).get("call_llm result", 0),
            "streamed": entry.get("stream") == "sse", "tokens": entry.get("tokens", 0),
            "deltas_seen": sum(1 for _, e in seen if e["type"] == "model.delta")}


async def part_history(stack: Stack, reps: int) -> dict[str, Any]:
    # A task queue name as long as the streaming worker's: the histories' bytes compare as they are.
    plain_settings = stack.suite.settings(stack.server, "streaming-off", store_url=stack.settings.store_url,
                                          home=stack.settings.home,
                                          task_queue=f"bench-streamoff-{uuid.uuid4().hex[:6]}")
    assert len(plain_settings.task_queue) == len(stack.settings.task_queue)
    plain = await stack.worker_process(plain_settings, "worker-unstreamed", {"REWIND_MODEL_STREAM": "0"})
    texts = {200: words(200, 1), 20: words(20, 2)}
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(reps):
            log(f"streaming: history, repetition {rep + 1}/{reps}")
            for size, text in texts.items():
                runs.setdefault(f"streamed-{size}", []).append(await _history_run(stack, stack.settings, text, True))
                runs.setdefault(f"unstreamed-{size}", []).append(await _history_run(stack, plain_settings, text, False))
    finally:
        stack.stop(plain)
    stack.model.reset()
    out = {}
    for key, rs in runs.items():
        out[key] = {"events": median([r["events"] for r in rs]), "events_min": min(r["events"] for r in rs),
                    "events_max": max(r["events"] for r in rs), "bytes": median([r["bytes"] for r in rs]),
                    "bytes_min": min(r["bytes"] for r in rs), "bytes_max": max(r["bytes"] for r in rs),
                    "model_result_bytes": median([r["model_result_bytes"] for r in rs]),
                    "streamed": all(r["streamed"] for r in rs), "tokens": rs[0]["tokens"],
                    "deltas_seen": median([r["deltas_seen"] for r in rs])}
    out["text_chars"] = {size: len(text) for size, text in texts.items()}
    return out


# ---------------------------------------------------------------- 2-3. rate and latency


async def _rated_run(stack: Stack, tokens_per_s: int, text: str, cli: bool) -> dict[str, Any]:
    from rewind.watching import events

    name = f"rate-{uuid.uuid4().hex[:8]}"
    gate = stack.folder / "gates" / name
    gate.parent.mkdir(parents=True, exist_ok=True)
    stack.model.add_script(name, gated_script(gate, text, tokens_per_s))
    handle = await start_agent(stack.client, stack.settings, f"script:{name}", 2, run_id=f"bench-{name}")
    seen: dict[str, list[tuple[float, dict[str, Any]]]] = {"rewind.events": []}
    tasks = [asyncio.create_task(collect(events(handle.id, settings=stack.settings, client=stack.client),
                                         seen["rewind.events"]))]
    if cli:
        seen["rewind watch --json"] = []
        tasks.append(asyncio.create_task(cli_watch(handle.id, stack.settings, seen["rewind watch --json"])))
    await until(lambda: all(at_gate(s) for s in seen.values()) or any(t.done() for t in tasks), READY_S,
                "the readers at the gate")
    gate.touch()
    result = await handle.result()
    assert result.status.state == "completed", result.status
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    written = chunk_times_of(stack.model, name, text)
    return {reader: measured(text, written, text_deltas(got, text)) for reader, got in seen.items()}


async def part_rates(stack: Stack, tokens: dict[int, int], reps: int) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {r: [] for r in RATES}
    for rep in range(reps):
        for tokens_per_s in RATES:  # interleaved: the machine's load falls on both alike
            log(f"streaming: {tokens_per_s} tokens/s, repetition {rep + 1}/{reps}")
            text = text_of_tokens(tokens[tokens_per_s], 100 + rep)
            runs[tokens_per_s].append(await _rated_run(stack, tokens_per_s, text, cli=True))
    stack.model.reset()
    out: dict[str, Any] = {}
    for tokens_per_s, rs in runs.items():
        for reader in rs[0]:
            got = [r[reader] for r in rs]
            complete = [g for g in got if g["complete"]]
            lat = [x for g in complete for x in g["latencies"]]
            out.setdefault(str(tokens_per_s), {})[reader] = {
                "runs": len(got), "complete": len(complete), "tokens": median([g["tokens"] for g in got]),
                "server_rate": median([g["server_rate"] for g in complete if g.get("server_rate")]),
                "delivered_rate": median([g["delivered_rate"] for g in complete if g.get("delivered_rate")]),
                "ratio": median([g["ratio"] for g in complete if g.get("ratio")]),
                "ratio_min": min((g["ratio"] for g in complete if g.get("ratio")), default=None),
                "p50_ms": pct_ms(lat, 50), "p99_ms": pct_ms(lat, 99), "max_ms": pct_ms(lat, 100)}
    return out


# ---------------------------------------------------------------- 4. concurrent runs through rewind serve


async def _sse_watch(http: httpx.AsyncClient, url: str, into: list[tuple[float, dict[str, Any]]]) -> None:
    async with http.stream("GET", url) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                into.append((time.time(), event))
                if event["type"] in END_TYPES and not event.get("path"):
                    return


async def _replayed(stack: Stack, run_id: str) -> list[str]:
    from rewind.watching import events

    return [e.id async for e in events(run_id, settings=stack.settings, client=stack.client, follow=False)
            if e.durable]


def _deltas_match(events: list[tuple[float, dict[str, Any]]]) -> tuple[int, int]:
    """(calls watched from their start, those whose deltas do not put their recorded message back
    together). A call that ended before the watcher connected is left out: its deltas are not
    told again (docs/streaming.md, Resuming)."""
    calls = bad = 0
    for _, done in events:
        if done["type"] != "model.completed":
            continue
        call, attempt = done["data"]["call"], done["data"].get("attempts", 1)
        if not any(e["type"] in ("model.started", "model.retrying") and e["data"].get("call") == call
                   and e["data"].get("attempt") == attempt for _, e in events):
            continue  # it ended before this watcher connected: its deltas are not told again
        calls += 1
        mine = [e["data"] for _, e in events if e["type"] == "model.delta" and e["data"].get("call") == call
                and e["data"].get("attempt") == attempt]
        message = done["data"].get("message") or {}
        text = "".join(d.get("text", "") for d in mine)
        args: dict[int, str] = {}
        for d in mine:
            if "tool_call" in d:
                args[d["tool_call"]["index"]] = args.get(d["tool_call"]["index"], "") + (d["tool_call"]["arguments"] or "")
        recorded = {i: c["function"]["arguments"] for i, c in enumerate(message.get("tool_calls") or [])}
        if text != (message.get("content") or "") or args != recorded:
            bad += 1
    return calls, bad


async def _serve(stack: Stack) -> tuple[LoggedProcess, str]:
    """`rewind serve --json --port 0` as a user runs it, and its URL once it listens."""
    folder = stack.folder / "serve"
    folder.mkdir(parents=True, exist_ok=True)
    serve = LoggedProcess([str(REWIND_BIN), "serve", "--json", "--port", "0"], stack.folder / "serve.out",
                          env=user_env(stack.settings), cwd=folder, err_log=stack.folder / "serve.err")
    stack.procs.append(serve)
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(ValueError):
            return serve, json.loads(serve.log_path.read_text())["url"]
        if serve.process.poll() is not None or time.monotonic() > deadline:
            stack.stop(serve)
            raise RuntimeError(f"rewind serve did not start: {serve.log()[-2000:]}")
        await asyncio.sleep(0.1)


async def _gated_batch(stack: Stack, runs: int, tokens: int, tokens_per_s: int, prefix: str) -> dict[str, Any]:
    """`runs` runs started at once, held at one gate: their scripts, texts and handles."""
    gate = stack.folder / "gates" / f"{prefix}-{uuid.uuid4().hex[:6]}"
    gate.parent.mkdir(parents=True, exist_ok=True)
    names = [f"{prefix}-{uuid.uuid4().hex[:6]}-{i}" for i in range(runs)]
    texts = {name: text_of_tokens(tokens, 1000 + i) for i, name in enumerate(names)}
    for name in names:
        stack.model.add_script(name, gated_script(gate, texts[name], tokens_per_s))
    began = time.time()
    handles = await asyncio.gather(*(start_agent(stack.client, stack.settings, f"script:{n}", 2, run_id=f"bench-{n}")
                                     for n in names))
    return {"gate": gate, "names": names, "texts": texts, "handles": handles, "began": began}


async def _to_the_end(stack: Stack, batch: dict[str, Any]) -> dict[str, float]:
    """Open the batch's gate once every run is at it; seconds from the start to the last run at the
    gate, and from the gate's opening to the last run's end."""
    await until(lambda: len(stack.gate_starts(batch["gate"])) >= len(batch["names"]), READY_S, "every run at its gate")
    at_gate = max(stack.gate_starts(batch["gate"])) - batch["began"]
    return {"at_gate_s": at_gate, **await _release(batch, stack.pids())}


async def _release(batch: dict[str, Any], pids: dict[str, int]) -> dict[str, Any]:
    """Open the gate; how long until every run ended, and the CPU of `pids` meanwhile (% of a core)."""
    samplers = {name: ProcSampler(pid, 0.1).start() for name, pid in pids.items()}
    released = time.time()
    batch["gate"].touch()
    results = await asyncio.gather(*(h.result() for h in batch["handles"]))
    ended = time.time()
    for sampler in samplers.values():
        sampler.stop()
    return {"released": released, "open_to_end_s": ended - released,
            "failed_runs": sum(1 for r in results if r.status.state != "completed"),
            "cpu_pct": {name: sampler.summary()["cpu_avg_pct"] for name, sampler in samplers.items()}}


async def part_concurrent(stack: Stack, runs: int, tokens: int, tokens_per_s: int) -> dict[str, Any]:
    log(f"streaming: {runs} concurrent runs, not watched (the baseline)")
    alone = await _to_the_end(stack, await _gated_batch(stack, runs, tokens, tokens_per_s, "alone"))
    serve, url = await _serve(stack)
    try:
        log(f"streaming: {runs} concurrent runs, each watched through rewind serve")
        batch = await _gated_batch(stack, runs, tokens, tokens_per_s, "many")
        names, texts, handles = batch["names"], batch["texts"], batch["handles"]
        seen: dict[str, list[tuple[float, dict[str, Any]]]] = {n: [] for n in names}
        async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=60),
                                     limits=httpx.Limits(max_connections=runs + 10)) as http:
            tasks = [asyncio.create_task(_sse_watch(http, f"{url}/runs/{h.id}/events", seen[n]))
                     for n, h in zip(names, handles)]
            not_ready = 0
            try:
                await until(lambda: all(at_gate(s_) for s_ in seen.values()), READY_S, "every SSE watcher at the gate")
            except TimeoutError:
                not_ready = sum(1 for s_ in seen.values() if not at_gate(s_))
            watched = {"at_gate_s": max(stack.gate_starts(batch["gate"]), default=batch["began"]) - batch["began"],
                       "watchers_at_gate_s": time.time() - batch["began"]}
            watched.update(await _release(batch, {**stack.pids(), "rewind serve": serve.pid}))
            done, pending = await asyncio.wait(tasks, timeout=120)
            for t in pending:
                t.cancel()
        checked = await _check_watchers(stack, batch, seen, watched["released"])
    finally:
        stack.stop(serve)
    stack.model.reset()
    return {"runs": runs, "tokens": tokens, "tokens_per_s": tokens_per_s, "alone": alone, "watched": watched,
            "not_ready": not_ready, "unfinished_watchers": len(pending), **checked}


async def _check_watchers(stack: Stack, batch: dict[str, Any], seen: dict[str, list[tuple[float, dict[str, Any]]]],
                          released: float) -> dict[str, Any]:
    """Each watcher against the store's replay of its run, its deltas against each call's message,
    its lag after the gate opened, and its tokens against the server's chunk times."""
    lost = dup = out_of_order = not_equal = calls = bad_calls = 0
    delta_lag: list[float] = []
    durable_lag: list[float] = []
    latencies: list[float] = []
    ratios: list[float] = []
    requests = stack.model.requests()
    for name, handle in zip(batch["names"], batch["handles"]):
        got, text = seen[name], batch["texts"][name]
        mine = [e["id"] for _, e in got if "~" not in e["id"]]
        replay = await _replayed(stack, handle.id)
        lost += len(set(replay) - set(mine))
        not_equal += int(mine != replay)
        dup += len(mine) - len(set(mine))
        out_of_order += int([i for i in mine if i in set(replay)] != [i for i in replay if i in set(mine)])
        c, b = _deltas_match(got)
        calls, bad_calls = calls + c, bad_calls + b
        for t, e in got:
            if t >= released:
                (delta_lag if e["type"] == "model.delta" else durable_lag if "~" not in e["id"] else []
                 ).append(t - when(e))
        written = next((r["chunk_times"] for r in requests if r.get("model") == f"script:{name}"
                        and r.get("chunk_times") and ((r["response"]["choices"][0]["message"] or {}).get("content")
                                                      == text)), [])
        m = measured(text, written, text_deltas(got, text))
        if m["complete"]:
            latencies += m["latencies"]
            if m.get("ratio"):
                ratios.append(m["ratio"])
    return {"durable_events": sum(len([1 for _, e in s_ if "~" not in e["id"]]) for s_ in seen.values()),
            "deltas": sum(len([1 for _, e in s_ if e["type"] == "model.delta"]) for s_ in seen.values()),
            "lost": lost, "duplicated": dup, "out_of_order": out_of_order, "not_equal": not_equal, "calls": calls,
            "calls_bad": bad_calls,
            "delta_lag_p50_ms": pct_ms(delta_lag, 50), "delta_lag_p99_ms": pct_ms(delta_lag, 99),
            "durable_lag_p50_ms": pct_ms(durable_lag, 50), "durable_lag_p99_ms": pct_ms(durable_lag, 99),
            "latency_p50_ms": pct_ms(latencies, 50), "latency_p99_ms": pct_ms(latencies, 99),
            "ratio_median": median(ratios), "ratio_min": min(ratios, default=None), "ratio_runs": len(ratios)}


# ---------------------------------------------------------------- 5. temporalio.contrib.workflow_streams


def workflow_streams_available() -> str | None:
    try:
        import temporalio.contrib.workflow_streams  # noqa: F401
    except ImportError as exc:
        return f"temporalio.contrib.workflow_streams is not in the installed temporalio ({exc})"
    return None


async def _ws_run(stack: Stack, queue: str, mode: str, text: str, tokens_per_s: int) -> dict[str, Any]:
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowFailureError
    from temporalio.contrib.workflow_streams import WorkflowStreamClient

    from bench.workflow_streams_baseline import TOPIC, StreamedCall

    name = f"ws-{uuid.uuid4().hex[:8]}"
    gate = stack.folder / "gates" / name
    gate.parent.mkdir(parents=True, exist_ok=True)
    stack.model.add_script(name, [{"content": text, "stream": {"tokens_per_s": tokens_per_s}}])
    handle = await stack.client.start_workflow("WorkflowStreamsCall", StreamedCall(f"script:{name}", str(gate), mode),
                                               id=f"bench-{name}", task_queue=queue)
    got: list[tuple[float, dict[str, Any]]] = []

    async def subscribe() -> None:
        async for item in WorkflowStreamClient.create(stack.client, handle.id).subscribe([TOPIC], result_type=dict):
            got.append((time.time(), item.data))

    reader = asyncio.create_task(subscribe()) if mode != "off" else None
    if reader is not None:  # attached: its first long poll is accepted (in history) before the call starts
        deadline = time.monotonic() + READY_S
        while not [e async for e in handle.fetch_history_events()
                   if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]:
            if time.monotonic() > deadline:
                raise TimeoutError("the Workflow Streams subscriber did not attach")
            await asyncio.sleep(0.05)
    gate.touch()
    try:
        answered = await handle.result() == text
    except WorkflowFailureError:  # its activity hung (bench.workflow_streams_baseline says how) and timed out
        answered = False
    if reader is not None:
        await asyncio.wait_for(reader, 120)
    history = await history_events(stack.client, handle.id)
    kinds = [e.event_type for e in history]
    out = {"events": len(history), "bytes": sum(e.ByteSize() for e in history), "failed": not answered,
           "signals": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
           "updates": kinds.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)}
    if reader is not None:
        out.update(measured(text, chunk_times_of(stack.model, name, text), [(t, d["text"]) for t, d in got]))
    return out


async def part_workflow_streams(stack: Stack, text: str, tokens_per_s: int, reps: int) -> dict[str, Any]:
    from bench.workflow_streams_baseline import MODES

    queue = f"bench-ws-{uuid.uuid4().hex[:6]}"
    log_path = stack.folder / "ws-worker.log"
    with open(log_path, "ab") as f:
        proc = subprocess.Popen([sys.executable, "-m", "bench.workflow_streams_baseline", stack.server.address, queue,
                                 stack.model.base_url], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        await wait_floor_polling(stack.client, queue, proc, log_path)
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for rep in range(reps):
            log(f"streaming: Workflow Streams, repetition {rep + 1}/{reps}")
            for mode in MODES:
                runs[mode].append(await _ws_run(stack, queue, mode, text, tokens_per_s))
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    stack.model.reset()
    out: dict[str, Any] = {}
    for mode, all_runs in runs.items():
        rs = [r for r in all_runs if not r["failed"]] or all_runs
        complete = [r for r in rs if r.get("complete")]
        lat = [x for r in complete for x in r["latencies"]]
        out[mode] = {"events": median([r["events"] for r in rs]), "events_min": min(r["events"] for r in rs),
                     "events_max": max(r["events"] for r in rs), "bytes": median([r["bytes"] for r in rs]),
                     "signals": median([r["signals"] for r in rs]), "updates": median([r["updates"] for r in rs]),
                     "complete": len(complete), "runs": len(all_runs),
                     "failed": sum(1 for r in all_runs if r["failed"]),
                     "ratio": median([r["ratio"] for r in complete if r.get("ratio")]),
                     "p50_ms": pct_ms(lat, 50), "p99_ms": pct_ms(lat, 99)}
    return out


# ---------------------------------------------------------------- the section


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    quick = suite.quick
    reps = 2 if quick else 5
    hist_reps = 1 if quick else 3
    tokens = {50: 100, 500: 500} if quick else {50: 250, 500: 1500}
    # 100 watchers of runs waiting at their gate take a minute or more to connect on 2 loaded cores
    # (part 4's second table says why): the quick mode watches 20.
    many, many_tokens, many_rate = (20, 40, 50) if quick else (100, 100, 50)
    sec = Section("streaming", "17. Streaming: watching a run live",
                  "Real servers: a dev server, a Rewind worker process (local event bus), the scripted model in a "
                  "process of its own streaming a token a chunk and noting when it wrote each, `rewind watch` and "
                  "`rewind serve` as subprocesses. (1) History of a one-call run streamed and watched against the "
                  "same run on a worker with REWIND_MODEL_STREAM=0, 200-word and 20-word answers "
                  f"({hist_reps} each). (2-3) Runs held at a gate tool until their readers are connected, then an "
                  f"answer streamed at 50 ({tokens[50]} tokens) and 500 tokens/s ({tokens[500]} tokens), {reps} runs "
                  "each, interleaved, read at once by `rewind.events` in the benchmark's process and by `rewind watch "
                  "--json` as a subprocess. (4) "
                  f"{many} runs streaming at once ({many_tokens} tokens at {many_rate} tokens/s each, one gate opens "
                  "them all), each watched over SSE through one `rewind serve`, after the same batch with no "
                  "watcher. (5) The same streamed call on "
                  f"`temporalio.contrib.workflow_streams`, read by its own subscriber ({reps} runs a mode).")
    load_before = os.getloadavg()
    stack = await Stack(suite).start()
    try:
        hist = await part_history(stack, hist_reps)
        rates = await part_rates(stack, tokens, reps)
        conc = await part_concurrent(stack, many, many_tokens, many_rate)
        ws_skipped = workflow_streams_available()
        ws = None
        if ws_skipped is None:
            ws = await part_workflow_streams(stack, text_of_tokens(tokens[50], 100), 50, reps)
    finally:
        stack.close()
    load_after = os.getloadavg()
    sec.data = {"history": hist, "rates": rates, "concurrent": conc, "workflow_streams": ws,
                "load_before": load_before, "load_after": load_after}
    _report(sec, hist, rates, conc, ws, ws_skipped, tokens)
    sec.notes.append(f"Load average (1/5/15 min) when the section began: {' / '.join(f'{x:.1f}' for x in load_before)}; "
                     f"when it ended: {' / '.join(f'{x:.1f}' for x in load_after)} (2 cores shared with other work: "
                     "figures are medians of repeats, percentiles over every token of every repeat).")
    return sec


def _met(ok: bool | None) -> str:
    return "–" if ok is None else "met" if ok else "**not met**"


def _report(sec: Section, hist: dict, rates: dict, conc: dict, ws: dict | None, ws_skipped: str | None,
            tokens: dict[int, int]) -> None:
    # 1. history
    rows = []
    for size in (200, 20):
        s, u = hist[f"streamed-{size}"], hist[f"unstreamed-{size}"]
        rows.append([f"{size}-word answer ({hist['text_chars'][size]} chars, {s['tokens']} tokens)",
                     s["events"], u["events"], f"**{s['events'] / u['events']:.2f}x**", s["bytes"], u["bytes"],
                     f"{s['bytes'] / u['bytes']:.3f}x", s["model_result_bytes"], s["deltas_seen"]])
    sec.table("1. History of a one-call run: streamed (and watched) against unstreamed (REWIND_MODEL_STREAM=0); medians",
              ["answer", "events streamed", "events unstreamed", "ratio", "bytes streamed", "bytes unstreamed",
               "ratio", "model call's result bytes (streamed)", "deltas the watcher got"], rows)
    s200, s20 = hist["streamed-200"], hist["streamed-20"]
    u200 = hist["unstreamed-200"]
    same_call = s200["events"] == u200["events"]
    same_size = s200["events"] == s20["events"]
    spread = all(hist[k]["events_min"] == hist[k]["events_max"] for k in hist if k != "text_chars")
    sec.headline.append(["17 streaming", "history events per run of one model call, streamed / unstreamed",
                         f"{s200['events']} / {u200['events']}", f"**{s200['events'] / u200['events']:.2f}x**",
                         "= 1.00x", _met(same_call)])
    sec.headline.append(["17 streaming", "history events, 200-word streamed answer / 20-word",
                         f"{s200['events']} / {s20['events']}", f"**{s200['events'] / s20['events']:.2f}x**",
                         "= 1.00x", _met(same_size)])
    sec.verdicts.append(
        f"History per streamed call equal to the unstreamed call's: {_met(same_call)} ({s200['events']} events "
        f"against {u200['events']}; {s200['bytes_min']:,}-{s200['bytes_max']:,} bytes against "
        f"{u200['bytes_min']:,}-{u200['bytes_max']:,} over the repeats: ids and times recorded in history vary by a few "
        f"tens of bytes from run to run, streamed or not); a 200-word answer as many "
        f"events as a 20-word one: {_met(same_size)} ({s200['events']} and {s20['events']}; the bytes differ by the "
        f"answer's own text in the model call's recorded result, {s200['model_result_bytes'] - s20['model_result_bytes']:,} "
        "bytes, streamed or not)."
        + ("" if spread else " Some repeats differed in their event count (min/max in results.json)."))
    # 2-3. rates and latency
    rows = []
    for tokens_per_s in RATES:
        for reader, r in rates[str(tokens_per_s)].items():
            rows.append([f"{tokens_per_s} tokens/s ({tokens[tokens_per_s]} tokens)", reader, r["server_rate"],
                         r["delivered_rate"], f"**{r['ratio']:.3f}**" if r["ratio"] else "–", _f(r["ratio_min"], 3),
                         r["p50_ms"], r["p99_ms"], f"{r['complete']}/{r['runs']}"])
    sec.table("2-3. Delivered token rate over the provider's, and the added latency per delta (ms: a token's arrival "
              "at the reader minus the server writing its chunk; percentiles over every token of every run)",
              ["pace", "reader", "server tokens/s", "delivered tokens/s", "ratio (median)", "ratio (worst run)",
               "latency p50", "latency p99", "runs complete"], rows)
    for tokens_per_s in RATES:
        r = rates[str(tokens_per_s)]["rewind.events"]
        ok = r["ratio"] is not None and r["ratio"] >= RATE_TARGET
        sec.headline.append(["17 streaming", f"delivered token rate / the provider's at {tokens_per_s} tokens/s "
                             "(rewind.events)", f"{r['delivered_rate']:.1f} / {r['server_rate']:.1f} tokens/s",
                             f"**{r['ratio']:.3f}**", f"≥ {RATE_TARGET}", _met(ok)])
        interval = 1000 / tokens_per_s
        sec.headline.append(["17 streaming", f"added latency per delta at {tokens_per_s} tokens/s, p50 / p99 "
                             "(rewind.events), over the provider's interval between tokens",
                             f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} ms; interval {interval:g} ms",
                             f"**{r['p50_ms'] / interval:.2f}x / {r['p99_ms'] / interval:.2f}x**", "–", "–"])
        cli = rates[str(tokens_per_s)].get("rewind watch --json")
        ok_cli = cli is not None and cli["ratio"] is not None and cli["ratio"] >= RATE_TARGET
        sec.verdicts.append(
            f"Delivered rate at {tokens_per_s} tokens/s ≥ {RATE_TARGET} of the provider's: rewind.events "
            f"{_met(ok)} ({r['ratio']:.3f}, worst run {r['ratio_min']:.3f})"
            + (f", rewind watch --json {_met(ok_cli)} ({cli['ratio']:.3f})" if cli and cli["ratio"] else "")
            + f"; added latency per delta p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms.")
    sec.notes.append(
        "Latency per delta: its p50 is the hops themselves (the model's server to the worker's openai client, the "
        "worker's event hub, the reader); its p99 is a few tokens in a hundred that arrive late, up to one token "
        "interval at 50 tokens/s, each together with the next. Timed apart, the worker published them under 1 ms "
        "after the server wrote them: the wait is between the worker's hub and the reader, while one of the two "
        "processes does other work (the redactor holds back none of these texts' tokens). At 500 tokens/s a p99 "
        "token is one of a burst held up in the worker for 10-30 ms on this loaded machine.")
    # 4. concurrent
    c, alone, watched = conc, conc["alone"], conc["watched"]
    cpu_names = list(watched["cpu_pct"])
    sec.table(f"4. {c['runs']} runs streaming at once ({c['tokens']} tokens at {c['tokens_per_s']} tokens/s each), each "
              "watched over SSE through one `rewind serve`: what the watchers got",
              ["runs", "durable events got", "deltas got", "durable events lost", "duplicated",
               "runs not exactly the store's replay", "calls whose deltas ≠ the message", "delta lag p50 / p99 (ms)",
               "durable lag p50 / p99 (ms)", "latency per delta p50 / p99 (ms)",
               "delivered rate / provider's (median, worst run)"],
              [[c["runs"], c["durable_events"], c["deltas"], f"**{c['lost']}**", c["duplicated"], c["not_equal"],
                f"{c['calls_bad']} of {c['calls']}", f"{_f(c['delta_lag_p50_ms'])} / **{_f(c['delta_lag_p99_ms'])}**",
                f"{_f(c['durable_lag_p50_ms'])} / {_f(c['durable_lag_p99_ms'])}",
                f"{_f(c['latency_p50_ms'])} / {_f(c['latency_p99_ms'])}",
                f"{_f(c['ratio_median'], 3)} / {_f(c['ratio_min'], 3)}"]])
    sec.table(f"4. What the {c['runs']} watchers cost the runs: the same batch of gated runs with no watcher (the "
              "baseline, first) and watched (s)",
              ["", "last run at its gate", "every watcher connected", "gate open → last run ended"],
              [["not watched", alone["at_gate_s"], "–", alone["open_to_end_s"]],
               [f"{c['runs']} SSE watchers through rewind serve", watched["at_gate_s"], watched["watchers_at_gate_s"],
                watched["open_to_end_s"]],
               ["ratio", f"**{watched['at_gate_s'] / alone['at_gate_s']:.1f}x**", "–",
                f"**{watched['open_to_end_s'] / alone['open_to_end_s']:.2f}x**"]])
    sec.table("4. CPU from the gate's opening to the last run's end (% of one core, averages)",
              ["process", "not watched", f"{c['runs']} SSE watchers"],
              [[name, alone["cpu_pct"].get(name), watched["cpu_pct"].get(name)] for name in cpu_names])
    lost_ok = c["lost"] == 0 and c["not_equal"] == 0 and c["calls_bad"] == 0 \
        and c["unfinished_watchers"] == 0 and watched["failed_runs"] == 0
    sec.headline.append(["17 streaming", f"{c['runs']} concurrent streaming runs through one rewind serve: events lost",
                         f"{c['lost']} durable lost, {c['calls_bad']} of {c['calls']} calls' deltas short",
                         f"**{c['lost']}**", "0", _met(lost_ok)])
    interval = 1000 / c["tokens_per_s"]
    sec.headline.append(["17 streaming", f"{c['runs']} concurrent runs: lag p99 of a delta (arrival − its time), "
                         "over the provider's interval between tokens",
                         f"{_f(c['delta_lag_p99_ms'])} ms; interval {interval:g} ms",
                         f"**{c['delta_lag_p99_ms'] / interval:.1f}x**" if c["delta_lag_p99_ms"] else "–", "–", "–"])
    sec.headline.append(["17 streaming", f"{c['runs']} runs reaching their first tool call, watched through rewind serve "
                         "/ not watched", f"{watched['at_gate_s']:.1f} s / {alone['at_gate_s']:.1f} s",
                         f"**{watched['at_gate_s'] / alone['at_gate_s']:.1f}x**", "–", "–"])
    sec.verdicts.append(
        f"{c['runs']} concurrent watched runs, events lost 0: {_met(lost_ok)} ({c['lost']} durable events lost, "
        f"{c['duplicated']} duplicated, {c['out_of_order']} runs out of order, {c['not_equal']} runs whose durable "
        f"events are not exactly the store's replay; {c['calls_bad']} of {c['calls']} calls watched from their start "
        f"whose deltas do not put their message back together; {c['unfinished_watchers']} watchers unfinished, "
        f"{watched['failed_runs']} runs failed, {c['not_ready']} watchers not connected when the gate opened). Lag p99 "
        f"{_f(c['delta_lag_p99_ms'])} ms for deltas, {_f(c['durable_lag_p99_ms'])} ms for durable events (their "
        "`time` is their step's record's, written before the checkpoint is stored).")
    cpu = watched["cpu_pct"]
    sec.notes.append(
        f"Part 4: {c['runs']} answers at {c['tokens_per_s']} tokens/s are {c['runs'] * c['tokens_per_s']:,} tokens a "
        "second through one worker process (its openai client parses every chunk, its hub sends every delta to "
        "rewind serve's reader of the run) and one rewind serve (every delta again as an SSE event to its watcher), "
        f"on 2 cores shared with the dev server, the model, the watchers and other engineers' work: from the gate's "
        "opening to the end the "
        + ", ".join(f"{name} used {_f(pct, 0)}% of a core" for name, pct in cpu.items())
        + ". Its lag and its slowest runs' rates are that queue. A durable event's lag runs from its step's record "
        "(the workflow's time) through storing the checkpoint: 100 runs end their steps together.")
    sec.notes.append(
        "Each watcher also asks Temporal for its run's state when it connects and then every 3 s while the bus is "
        "quiet, 9 s otherwise (rewind.watching: a describe, the task queue's pollers, a query the worker answers): "
        "runs that wait at their gate are quiet. In development runs of part 4 with the machine's load average at "
        "9-13, 100 watchers through rewind serve stretched the 100 runs' way to their gate from 9 s (not watched) "
        "to 56-136 s, and 100 rewind.events readers in one process to 17 s; at a load average of 2-4 it is the "
        "ratio in the table above.")
    # 5. workflow streams
    if ws is None:
        sec.notes.append(f"Workflow Streams skipped: {ws_skipped}")
        return
    r50 = rates["50"]["rewind.events"]
    labels = {"off": "Workflow Streams, nothing published (its baseline)",
              "default": "Workflow Streams, defaults (2 s publish batches, 100 ms poll cooldown)",
              "flush": "Workflow Streams, force_flush on every delta"}
    base = ws["off"]["events"]
    rows = [["**Rewind** (part 1: streamed and watched, against unstreamed; part 2-3: rewind.events)", s200["events"],
             f"+{s200['events'] - u200['events']}", "–", "–", f"{r50['ratio']:.3f}", r50["p50_ms"], r50["p99_ms"], "–"]]
    for mode, label in labels.items():
        w = ws[mode]
        rows.append([label, w["events"], f"+{w['events'] - base}" if mode != "off" else "–", w["signals"], w["updates"],
                     f"{w['ratio']:.3f}" if w["ratio"] else "–", w["p50_ms"], w["p99_ms"], f"{w['failed']} of {w['runs']}"])
    sec.table(f"5. The same streamed call at 50 tokens/s ({tokens[50]} tokens) on temporalio.contrib.workflow_streams "
              "(its own subscriber) beside Rewind's (rewind.events, part 2-3); medians",
              ["", "history events per run", "added by streaming", "signals", "updates (polls)",
               "delivered rate / provider's", "latency per delta p50 (ms)", "p99 (ms)", "runs failed"], rows)
    for mode in ("default", "flush"):
        w = ws[mode]
        sec.headline.append(["17 streaming", f"Workflow Streams ({mode}): history events added per streamed call "
                             "/ Rewind's", f"+{w['events'] - base} / +{s200['events'] - u200['events']}", "–", "–", "–"])
        if w["p50_ms"] is not None:
            sec.headline.append(["17 streaming", f"latency per delta at 50 tokens/s, Workflow Streams ({mode}) / Rewind, "
                                 "p50 (p99)", f"{w['p50_ms']:.0f} ms / {r50['p50_ms']:.1f} ms ({w['p99_ms']:.0f} ms / "
                                 f"{r50['p99_ms']:.1f} ms)", f"**{w['p50_ms'] / r50['p50_ms']:.0f}x** "
                                 f"({w['p99_ms'] / r50['p99_ms']:.0f}x)", "–", "–"])
    sec.notes.append(
        "Workflow Streams keeps the stream in the workflow: each publish batch is a signal and each subscriber poll an "
        "update, both in history (with the workflow tasks they cause), so its history grows with the tokens and with "
        "the watchers; Rewind's deltas go over the worker's event bus and never reach Temporal. Its default 2 s "
        "batches set its latency (and its delivered rate above 1: a batch's tokens arrive together, so the first and "
        "the last arrive closer together than they were written); force_flush sends a signal as soon as the one "
        "before it is acknowledged.")
    sec.notes.append(
        "On Python 3.11 Workflow Streams' publisher can hang as it closes after force_flush: its exit cancels the "
        "background flusher, and a cancel that meets the wake-up force_flush has just set is swallowed by the "
        "flusher's asyncio.wait_for (3 of the first 4 force_flush runs hung for their activity's whole timeout). "
        "bench/workflow_streams_baseline.py flushes before it closes and bounds the close at 30 s; `runs failed` "
        "counts what still hung (left out of its figures).")


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"
