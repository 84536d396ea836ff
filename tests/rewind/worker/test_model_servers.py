"""Any OpenAI-compatible server: a whole run against each server's strictness.

The scripted model runs as its own process (`python -m rewind.worker.scripted_model
--dialect D`) and rejects requests the way OpenAI, vLLM, Ollama and
llama.cpp do; the worker (a subprocess configured only through the
environment) talks to it through the openai client. The research agent's
second request replays the assistant message with `content: null` and
`tool_calls`, which llama.cpp refuses: Rewind must send what every server
accepts (activities/model/wire_format.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from as_user import UserWorker, rewind, user_env


@pytest.fixture
def model_process(tmp_path):
    started = []

    def start(dialect: str) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "rewind.worker.scripted_model", "--dialect", dialect],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        started.append(proc)
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http://"), proc.stderr.read()  # type: ignore[union-attr]
        return url

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("dialect", ["openai", "vllm", "ollama", "llamacpp"])
async def test_a_run_completes_against_each_server(dialect, model_process, temporal_server, tmp_path):
    url = model_process(dialect)
    env = user_env(tmp_path, TEMPORAL_ADDRESS=temporal_server.address, REWIND_TASK_QUEUE=f"d-{uuid.uuid4().hex[:8]}",
                   REWIND_STORE=f"file://{tmp_path / 'store'}", REWIND_PAYLOADS=f"file://{tmp_path / 'payloads'}",
                   OPENAI_API_KEY="any-key", OPENAI_BASE_URL=url, REWIND_DEMO_FAILURE_RATE="0")
    with UserWorker(tmp_path / "worker", env, "--tool-modules", "examples.research_agent") as worker:
        await worker.wait_ready()
        cli = tmp_path / "cli"
        cli.mkdir()
        code, out, err = await rewind(cli, env, "start", "--task", "Research these companies: Acme, Globex",
                                      "--run-id", f"{dialect}-run", "--wait", "--json", timeout_s=120)
        assert code == 0, err + worker.log()[-3000:]
        doc = json.loads(out)
        assert doc["status"]["state"] == "completed" and doc["status"]["step"] == 3, doc
        assert "saved to" in doc["final_answer"]
        # One model call per step, each accepted by this server's rules.
        code, out, err = await rewind(cli, env, "show", f"{dialect}-run:main:3", "--json")
        assert json.loads(out)["ledger"]["total"]["model_calls"] == 3
