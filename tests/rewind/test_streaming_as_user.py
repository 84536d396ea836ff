"""Tokens as the model writes them, as a user meets them: `rewind worker` (its own offline
model, the user's scripts.json) and `rewind watch --json` as subprocesses in empty folders,
configured by environment only; and a provider that cannot stream, which the worker falls
back from, saying so once per model in its log."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from as_user import BIN, rewind, rewind_json, user_workers

from rewind.worker.scripted_stream import pieces

TOOLS = '''
import asyncio, os
from pathlib import Path

from rewind import tool


@tool(timeout_s=120)
async def wait_for(name: str) -> str:
    """Wait until the file GATES/<name> exists."""
    path = Path(os.environ["GATES"]) / name
    while not path.exists():
        await asyncio.sleep(0.05)
    return f"{name} is open"


@tool
async def search_company(company: str) -> str:
    """Look up one company."""
    return f"{company} sells widgets."
'''

ANSWER = "Acme sells widgets and gadgets, and its customers come back for more every single year."
SEARCH = {"name": "search_company", "arguments": {"company": "Acme"}}
SCRIPTS = {
    "streams": [
        {"tool_calls": [{"name": "wait_for", "arguments": {"name": "go"}}]},  # holds the run until the watcher reads
        {"content": "Let me search.", "tool_calls": [SEARCH], "stream": {"tokens_per_s": 30}},
        {"content": ANSWER, "stream": {"tokens_per_s": 30}},
    ],
    "refuses": [  # a provider that answers stream: true with a 400 naming stream
        {"tool_calls": [SEARCH], "stream": {"mode": "refuse"}},
        {"content": "Acme sells widgets.", "stream": {"mode": "refuse"}},
    ],
    "whole": [  # one that ignores stream: true and answers the whole completion as JSON
        {"tool_calls": [SEARCH], "stream": {"mode": "whole"}},
        {"content": "Acme sells widgets.", "stream": {"mode": "whole"}},
    ],
}


async def _watch(cli: Any, env: dict[str, str], run_id: str, gate: Any) -> list[dict[str, Any]]:
    """`rewind watch RUN --json`'s events; the gate opens once the watcher shows the call that
    waits for it (so it reads the calls after that one from their first token)."""
    watch = await asyncio.create_subprocess_exec(
        str(BIN / "rewind"), "watch", run_id, "--json", cwd=cli, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert watch.stdout is not None and watch.stderr is not None
    seen: list[dict[str, Any]] = []
    while not (seen and seen[-1]["type"] == "tool.started" and seen[-1]["data"].get("tool") == "wait_for"):
        line = await asyncio.wait_for(watch.stdout.readline(), 120)
        assert line, (await watch.stderr.read()).decode()
        seen.append(json.loads(line))
    gate.touch()
    out, err = await asyncio.wait_for(watch.communicate(), 120)
    assert watch.returncode == 0, err.decode()
    return seen + [json.loads(line) for line in out.decode().splitlines()]


async def test_the_watcher_gets_each_token_before_the_call_completes_and_a_provider_that_cannot_stream_still_answers(
        world) -> None:
    work, cli, gates = world.folder("worker"), world.folder("cli"), world.folder("gates")
    (work / "shoptools.py").write_text(TOOLS)
    (work / "scripts.json").write_text(json.dumps(SCRIPTS))
    # The worker's own offline model (no key), and the worker's REWIND_HOME for the watcher too:
    # the local bus is announced there.
    shared = dict(OPENAI_API_KEY=None, OPENAI_BASE_URL=None, REWIND_HOME=str(work / ".rewind"))
    env = world.env(cli, **shared)
    async with user_workers() as start:
        worker = start(work, world.env(work, **shared, REWIND_SCRIPTS="scripts.json", GATES=str(gates)),
                       "--tool-modules", "shoptools")
        await worker.wait_ready()
        code, _, err = await rewind(cli, env, "start", "--task", "Research Acme", "--model", "script:streams",
                                    "--run-id", "streams-1")
        assert code == 0, err
        seen = await _watch(cli, env, "streams-1", gates / "go")
        assert seen[-1]["type"] == "run.completed", seen[-1]
        for call in ("2/model", "3/model"):
            of_call = [(i, e) for i, e in enumerate(seen) if e["data"].get("call") == call]
            deltas = [e["data"] for _, e in of_call if e["type"] == "model.delta"]
            (done,) = [(i, e["data"]) for i, e in of_call if e["type"] == "model.completed"]
            assert max(i for i, e in of_call if e["type"] == "model.delta") < done[0]  # every token before the call's end
            assert {d["attempt"] for d in deltas} == {1} and [d["index"] for d in deltas] == list(range(1, len(deltas) + 1))
            message = done[1]["message"]
            text = [d["text"] for d in deltas if "text" in d]
            assert text == pieces(message["content"])  # a token a delta, in order: joined, the final content
            for i, tool_call in enumerate(message.get("tool_calls") or []):
                parts = [d["tool_call"] for d in deltas if "tool_call" in d and d["tool_call"]["index"] == i]
                assert (parts[0]["id"], parts[0]["name"]) == (tool_call["id"], tool_call["function"]["name"])
                assert "".join(p["arguments"] for p in parts) == tool_call["function"]["arguments"]
        assert seen[-1]["data"]["answer"] == ANSWER

        for model in ("refuses", "whole"):
            done = await rewind_json(cli, env, "start", "--task", "Research Acme", "--model", f"script:{model}",
                                     "--run-id", f"{model}-1", "--wait")
            assert done["status"]["state"] == "completed" and done["final_answer"] == "Acme sells widgets.", done
        log = worker.log()
        for model in ("refuses", "whole"):  # two model calls each: said once
            assert log.count(f"does not stream for model 'script:{model}'") == 1, log[-3000:]
