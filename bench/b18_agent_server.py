"""18. The Agent Server API: one graph served by `rewind serve` and by LangGraph's own `langgraph dev`.

The same graph (bench.agent_server_graph: STEPS nodes in a row, then one ChatOpenAI call the
scripted model streams) and the same client (langgraph-sdk's get_client, `runs.stream` with
stream modes updates and messages-tuple) against:

  rewind serve   the Agent Server API of `rewind serve` (under /langgraph), a Rewind worker
                 process, a Temporal dev server (real servers, each a process)
  langgraph dev  LangGraph's in-memory dev server (langgraph-cli[inmem]), started offline

Measured per run (medians of the repeats): time to the first part after `metadata`, time per
super-step (between the first and the last step node's `updates` part over STEPS - 1), tokens
delivered per second on the client (between its first and last token part). Then each server
is killed (SIGKILL) while a run streams, and started again: what it still has of the thread and
the run. Nothing here asserts a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.common import Section, log, median
from bench.stream_model import ModelProcess
from rewind.local.testing import LoggedProcess
from rewind.local.testing import WorkerProcess as SharedWorkerProcess
from rewind.temporal.dev_server import free_port

BIN = Path(sys.executable).parent
GRAPH_FILE = Path(__file__).with_name("agent_server_graph.py")


def _text(tokens: int) -> str:
    return " ".join(f"w{i}" for i in range(tokens))


class Served:
    """One server of the graph: its URL for get_client, its assistant id, start() and kill()."""

    name: str
    assistant: str
    url: str
    process: LoggedProcess

    async def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.process.stop()


async def _until_ok(url: str, process: LoggedProcess, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            if process.process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.process.returncode}; see {process.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.post(url + "/threads/search", json={"limit": 1})).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{what} did not answer within {timeout_s:.0f}s; see {process.log_path}")


class RewindServed(Served):
    name = "rewind serve"
    assistant = "bench.agent_server_graph:graph"

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env, self.port = folder, env, free_port()
        self.url = f"http://127.0.0.1:{self.port}/langgraph"

    async def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = LoggedProcess([str(BIN / "rewind"), "serve", "--port", str(self.port)],
                                     self.folder / f"serve-{uuid.uuid4().hex[:4]}.log", env=self.env, cwd=self.folder)
        await _until_ok(self.url, self.process, "rewind serve")


class DevServed(Served):
    name = "langgraph dev"
    assistant = "agent"

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env, self.port = folder, env, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(GRAPH_FILE, folder / "agent_server_graph.py")
        (folder / "langgraph.json").write_text(json.dumps({"dependencies": ["."],
                                                           "graphs": {"agent": "./agent_server_graph.py:graph"}}))

    async def start(self) -> None:
        self.process = LoggedProcess([str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--port",
                                      str(self.port)], self.folder / f"dev-{uuid.uuid4().hex[:4]}.log", env=self.env,
                                     cwd=self.folder)
        await _until_ok(self.url, self.process, "langgraph dev")


async def _one_run(served: Served, steps: int) -> dict[str, Any]:
    from langgraph_sdk import get_client

    client = get_client(url=served.url)
    thread = await client.threads.create()
    began = time.perf_counter()
    seen: list[tuple[float, str, Any]] = []
    async for part in client.runs.stream(thread["thread_id"], served.assistant, input={"n": 0},
                                         stream_mode=["updates", "messages-tuple"]):
        seen.append((time.perf_counter(), part.event, part.data))
    first = next(t for t, event, _ in seen if event != "metadata")
    step_times = [t for t, event, data in seen if event == "updates" and isinstance(data, dict)
                  and any(str(k).startswith("step_") for k in data)]
    token_times = [t for t, event, data in seen if event == "messages" and isinstance(data, list)
                   and isinstance(data[0], dict) and data[0].get("content")]
    tokens = len(token_times)  # a token a part: the scripted model streams one a chunk
    return {"first_ms": (first - began) * 1000,
            "per_step_ms": (step_times[-1] - step_times[0]) * 1000 / (steps - 1) if len(step_times) == steps else None,
            "steps_seen": len(step_times),
            "tokens_per_s": tokens / (token_times[-1] - token_times[0]) if len(token_times) > 1 else None,
            "tokens": tokens, "total_ms": (seen[-1][0] - began) * 1000}


async def _killed(served: Served, model: ModelProcess, tokens: int, rate: int) -> dict[str, Any]:
    """A run streams; the server is SIGKILLed at its first token and started again: what it has then."""
    from langgraph_sdk import get_client

    model.add_script("agent-server-bench", [{"content": _text(tokens), "stream": {"tokens_per_s": rate}}])
    client = get_client(url=served.url)
    thread = await client.threads.create()
    tid = thread["thread_id"]
    run_id = None
    with contextlib.suppress(Exception):
        async for part in client.runs.stream(tid, served.assistant, input={"n": 0},
                                             stream_mode=["updates", "messages-tuple"]):
            if part.event == "metadata":
                run_id = part.data.get("run_id")
            if part.event == "messages":
                served.kill()
                break
    await asyncio.sleep(0.5)
    await served.start()
    client = get_client(url=served.url)
    out: dict[str, Any] = {"thread": "kept", "history": None, "run": None, "answer": "no"}
    try:
        await client.threads.get(tid)
    except Exception as exc:  # noqa: BLE001 - what a server that lost the thread answers
        out["thread"] = f"lost ({type(exc).__name__})"
        return out
    with contextlib.suppress(Exception):
        out["history"] = len(await client.threads.get_history(tid, limit=100))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            out["run"] = (await client.runs.get(tid, run_id))["status"] if run_id else None
        if out["run"] not in ("pending", "running"):
            break
        await asyncio.sleep(0.5)
    with contextlib.suppress(Exception):
        values = (await client.threads.get_state(tid))["values"]
        messages = values.get("messages") or []
        out["answer"] = "whole" if messages and messages[-1].get("content") == _text(tokens) else "no"
        out["n"] = values.get("n")
    return out


async def run(suite) -> Section:  # type: ignore[no-untyped-def]
    from bench.agent_server_graph import STEPS

    quick = suite.quick
    reps = 2 if quick else 5
    tokens, rate = (100, 200) if quick else (300, 300)
    sec = Section("agent_server", "18. The Agent Server API: rewind serve against langgraph dev",
                  f"One graph ({STEPS} step nodes in a row, then one ChatOpenAI call the scripted model streams, "
                  f"a {tokens}-word answer, streamed at {rate} tokens/s) served by `rewind serve` (its Agent Server API, a Rewind "
                  "worker process, a Temporal dev server) and by `langgraph dev` (LangGraph's in-memory dev server, "
                  "started offline), read by the same langgraph-sdk client (`runs.stream`, updates and "
                  f"messages-tuple), {reps} runs each, interleaved. Then each server is SIGKILLed at a run's first "
                  "token and started again.")
    folder = suite.tmp / f"agent-server-{uuid.uuid4().hex[:4]}"
    server = suite.start_temporal("agent-server")
    model = ModelProcess(folder / "model.log")
    model.add_script("agent-server-bench", [{"content": _text(tokens), "stream": {"tokens_per_s": rate}}])
    settings = suite.settings(server, "agent-server")
    home = folder / "home"
    base_env = {**os.environ, "OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "test-key",
                "LANGSMITH_TRACING": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1",
                "PYTHONPATH": os.pathsep.join([str(GRAPH_FILE.parent.parent), os.environ.get("PYTHONPATH", "")])}
    rewind_env = {**base_env, "TEMPORAL_ADDRESS": settings.temporal_address, "REWIND_TASK_QUEUE": settings.task_queue,
                  "REWIND_STORE": settings.store_url, "REWIND_PAYLOADS": settings.payload_url, "REWIND_HOME": str(home),
                  "REWIND_LOG_LEVEL": "WARNING"}
    worker = SharedWorkerProcess(settings, model.base_url, "bench.tools,bench.agent_server_graph",
                                 folder / "worker.log", extra_env={"REWIND_HOME": str(home), "REWIND_LOG_LEVEL": "WARNING"},
                                 cwd=folder)
    servers: list[Served] = [RewindServed(folder / "rewind-serve", rewind_env), DevServed(folder / "dev", base_env)]
    results: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
    killed: dict[str, Any] = {}
    try:
        for served in servers:
            await served.start()
        for served in servers:  # one run each first: imports, connections
            await _one_run(served, STEPS)
        for _ in range(reps):
            for served in servers:
                results[served.name].append(await _one_run(served, STEPS))
        for served in servers:
            killed[served.name] = await _killed(served, model, tokens, max(rate // 10, 10))
    finally:
        for served in servers:
            served.stop()
        with contextlib.suppress(Exception):
            worker.stop()
        model.stop()
        suite.stop_temporal(server)
    sec.data = {"runs": results, "killed": killed}
    log(f"agent_server: {json.dumps(sec.data)[:2000]}")

    def med(name: str, key: str) -> float | None:
        values = [r[key] for r in results[name] if r.get(key) is not None]
        return median(values) if values else None

    rows, rw, dv = [], "rewind serve", "langgraph dev"
    for key, label, unit in (("first_ms", "time to the first part", "ms"), ("per_step_ms", "time per super-step", "ms"),
                             ("tokens_per_s", "tokens delivered per second", "tokens/s"),
                             ("total_ms", "whole run, request to last part", "ms")):
        a, b = med(rw, key), med(dv, key)
        ratio = f"**{a / b:.2f}x**" if a is not None and b else "–"
        rows.append([label, f"{a:.1f} {unit}" if a is not None else "–", f"{b:.1f} {unit}" if b is not None else "–",
                     ratio])
        sec.headline.append(["18 agent server", f"{label}, rewind serve / langgraph dev",
                             f"{a:.1f} / {b:.1f} {unit}" if a is not None and b is not None else "–", ratio, "–", "–"])
    sec.table(f"Per run, medians of {reps} (the model streams {rate} tokens/s)",
              ["figure", "rewind serve", "langgraph dev", "rewind / dev"], rows)
    sec.table("After a SIGKILL of the server at a run's first token, and a restart",
              ["server", "the thread", "checkpoints in get_history", "the run's status", "the answer in the state"],
              [[name, k.get("thread"), k.get("history"), k.get("run"), k.get("answer")] for name, k in killed.items()])
    sec.notes.append("`langgraph dev` runs the graph in the server's own process, without a durable store; "
                     "`rewind serve` only reads: the run is the worker's, its record Temporal's and the store's. "
                     "Tokens per second is the client's count of token parts over their span; the model's own pace "
                     f"is {rate} tokens/s.")
    return sec
