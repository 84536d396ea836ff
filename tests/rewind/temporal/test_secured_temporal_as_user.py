"""Rewind against a Temporal that wants TLS: mTLS client certificates and API
keys, configured as the `temporal` CLI is (environment or profile file only).

No Temporal Cloud is reachable here, so tests/temporal_standin.py stands one
in: a TLS endpoint of the test's own (the standard library's `ssl`,
CERT_REQUIRED for mTLS, ALPN h2, certificates made by the test) in front of
the session's plaintext dev server, reading the HTTP/2 request headers it
forwards (for the API key), and refusing a wrong key with gRPC
UNAUTHENTICATED as Temporal Cloud does.

As a user: `rewind` and `rewind worker` are subprocesses in empty folders,
configured only through their environment (or a profile file):
  1. mTLS from the environment: the research demo's run, a fork and a status,
     the worker and the CLI both through the TLS endpoint; the key never stored.
  2. mTLS from a profile file (the default location for the CLI,
     TEMPORAL_CONFIG_FILE for the worker; TEMPORAL_PROFILE picks it); the
     `temporal` CLI itself reads the same profile and lists the run.
  3. An API key: every request carries it (seen by the endpoint); it is in no
     history, store, log or `status --json`, even when a tool returns it; a
     wrong one is refused in one line by the CLI and the worker.
  4. Every connection error a user can make: one line naming the setting.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import uuid
from pathlib import Path

import pytest
from as_user import empty_dir, one_line_error, rewind, rewind_json, user_workers
from helpers import folder_bytes
from temporal_standin import Certs, TLSTerminator, make_certs
from temporalio.api.history.v1 import History

TESTS_DIR = Path(__file__).parents[2]
TASK = "Research these companies: Acme, Globex"
TOOLS = "examples.research_agent"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def mtls(temporal_server, certs):
    with TLSTerminator(temporal_server.address, certs, client_ca=certs.client_ca) as endpoint:
        yield endpoint


def _mtls_env(endpoint: TLSTerminator, certs: Certs) -> dict[str, str]:
    return {"TEMPORAL_ADDRESS": endpoint.address, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.server_ca),
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(certs.client_cert), "TEMPORAL_TLS_CLIENT_KEY_PATH": str(certs.client_key)}


def _key_body(path: Path) -> list[bytes]:
    """The base64 lines of a PEM key: what must never be found anywhere."""
    return [line.encode() for line in path.read_text().splitlines() if line and not line.startswith("-----")]


async def _history(client, run_id: str) -> bytes:
    """Every branch's history of the run, straight from the dev server (plaintext, the test's own client)."""
    out = b""
    async for wf in client.list_workflows(f'WorkflowId STARTS_WITH "{run_id}"'):
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        out += History(events=history.events).SerializeToString() + history.to_json().encode()  # raw payloads too
    return out


def _dev_server_files(server) -> bytes:
    files = [Path(f"{server.db_file}{suffix}") for suffix in ("", "-wal")]
    return b"".join(p.read_bytes() for p in files if p.exists())


def _paths(stream: list[dict[str, str]]) -> set[str]:
    return {h.get(":path", "").rsplit("/", 1)[-1] for h in stream}


async def _demo_run_fork_status(cli: Path, env: dict[str, str], run: str) -> dict:
    """The research demo's run, a fork from step 1, the run's status: all must work."""
    started = await rewind_json(cli, env, "start", "--task", TASK, "--run-id", run, "--wait")
    assert started["status"]["state"] == "completed", started
    forked = await rewind_json(cli, env, "fork", run, "--step", "1", "--branch", "again", "--wait")
    assert forked["status"]["state"] == "completed", forked
    view = await rewind_json(cli, env, "status", run)
    assert view["state"] == view["workflow_status"] == "completed" and view["status"]["step"] == 3, view
    return view


# -- 1. mTLS from the environment ------------------------------------------------------


async def test_mtls_client_certificates_from_the_environment(world, mtls, certs, client, temporal_server, tmp_path):
    cli, wdir = empty_dir(tmp_path, "cli"), empty_dir(tmp_path, "worker")
    env = world.env(cli, **_mtls_env(mtls, certs))
    # The worker takes the PEM text itself (the _DATA forms), as a container given secrets in variables does.
    worker_env = world.env(wdir, TEMPORAL_ADDRESS=mtls.address,
                           TEMPORAL_TLS_SERVER_CA_CERT_DATA=certs.server_ca.read_text(),
                           TEMPORAL_TLS_CLIENT_CERT_DATA=certs.client_cert.read_text(),
                           TEMPORAL_TLS_CLIENT_KEY_DATA=certs.client_key.read_text())
    run = f"mtls-{uuid.uuid4().hex[:6]}"
    async with user_workers() as start:
        worker = start(wdir, worker_env, "--tool-modules", TOOLS)
        await worker.wait_ready()
        view = await _demo_run_fork_status(cli, env, run)
    # Both went through the TLS endpoint: the worker's polls and the CLI's calls.
    seen = _paths(mtls.requests)
    assert {"PollWorkflowTaskQueue", "PollActivityTaskQueue", "StartWorkflowExecution", "QueryWorkflow"} <= seen, seen
    assert "TLS, client certificate (inline PEM data)" in worker.log(), worker.log()[-2000:]

    # The private key is nowhere: history, stores, the dev server's database, logs, status.
    places = {
        "history": await _history(client, run), "checkpoints": folder_bytes(Path(env["REWIND_STORE"][7:])),
        "payloads": folder_bytes(Path(env["REWIND_PAYLOADS"][7:])), "worker log": worker.log().encode(),
        "status": json.dumps(view).encode(), "worker folder": folder_bytes(wdir), "cli folder": folder_bytes(cli),
        "dev server db": _dev_server_files(temporal_server),
    }
    assert run.encode() in places["history"] and run.encode() in places["checkpoints"]
    leaks = [where for where, data in places.items() for line in _key_body(certs.client_key) if line in data]
    assert not leaks, f"the client key is in: {sorted(set(leaks))}"


# -- 2. mTLS from a profile file --------------------------------------------------------


def _profile(path: Path, endpoint: TLSTerminator, certs: Certs, **tls: str) -> Path:
    """A `temporal` CLI profile file: `standin` is the TLS endpoint (by IP, which its
    certificate is not for, so with a server name it is for); `default` points where
    nothing listens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = {"server_name": "temporal.test", "server_ca_cert_path": str(certs.server_ca),
            "client_cert_path": str(certs.client_cert), "client_key_path": str(certs.client_key), **tls}
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items())
    path.write_text(f'[profile.default]\naddress = "127.0.0.1:1"\n\n'
                    f'[profile.standin]\naddress = "127.0.0.1:{endpoint.port}"\nnamespace = "default"\n\n'
                    f'[profile.standin.tls]\n{lines}\n')
    return path


async def test_mtls_from_a_temporal_cli_profile_file(world, mtls, certs, tmp_path):
    cli, wdir = empty_dir(tmp_path, "cli"), empty_dir(tmp_path, "worker")
    # The CLI: the profile file where the `temporal` CLI keeps it ($HOME/.config/temporalio/temporal.toml).
    _profile(cli / ".config" / "temporalio" / "temporal.toml", mtls, certs)
    env = world.env(cli, TEMPORAL_ADDRESS=None, TEMPORAL_PROFILE="standin")
    # The worker: a profile file named by TEMPORAL_CONFIG_FILE.
    worker_file = _profile(tmp_path / "etc" / "temporal.toml", mtls, certs)
    worker_env = world.env(wdir, TEMPORAL_ADDRESS=None, TEMPORAL_PROFILE="standin", TEMPORAL_CONFIG_FILE=str(worker_file))
    run = f"prof-{uuid.uuid4().hex[:6]}"
    async with user_workers() as start:
        worker = start(wdir, worker_env, "--tool-modules", TOOLS)
        await worker.wait_ready()
        await _demo_run_fork_status(cli, env, run)
    seen = _paths(mtls.requests)
    assert {"PollWorkflowTaskQueue", "StartWorkflowExecution"} <= seen, seen
    assert {h.get(":authority") for h in mtls.requests} == {"temporal.test"}  # tls.server_name, as SNI and authority

    # The same shell runs the `temporal` CLI with the same profile, and it sees the run.
    proc = await asyncio.create_subprocess_exec(
        "temporal", "workflow", "list", "--query", f'WorkflowId = "{run}"', "-o", "json", cwd=cli, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    assert [w["execution"]["workflowId"] for w in json.loads(out)] == [run]

    # Without TEMPORAL_PROFILE the default profile is used (nothing listens there): one line naming it
    # (for a run the checkpoint store does not have either: `status` of a known run falls back to it).
    code, _, err = await rewind(cli, world.env(cli, TEMPORAL_ADDRESS=None), "status", "not-stored")
    one_line_error(code, err, "cannot reach Temporal at 127.0.0.1:1",
                   f"address in profile 'default' of {cli / '.config' / 'temporalio' / 'temporal.toml'}")


# -- 3. an API key -----------------------------------------------------------------------


async def test_an_api_key_is_sent_and_never_stored(world, temporal_server, certs, client, tmp_path):
    key = "tmprl-canary-" + secrets.token_hex(16)
    script = f"s-{uuid.uuid4().hex[:8]}"
    world.model.add_script(script, [
        {"tool_calls": [{"name": "show_temporal_env", "arguments": {"prefix": "TEMPORAL_"}}]},
        {"content": None, "echo_tool_results": True},
    ])
    cli, wdir = empty_dir(tmp_path, "cli"), empty_dir(tmp_path, "worker")
    with TLSTerminator(temporal_server.address, certs, api_key=key) as endpoint:
        base = {"TEMPORAL_ADDRESS": endpoint.address, "TEMPORAL_API_KEY": key,
                "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(certs.server_ca)}  # Cloud's certificate is public: no CA there
        env = world.env(cli, **base)
        worker_env = world.env(wdir, **base)
        shutil.copy(TESTS_DIR / "secret_tools.py", wdir)  # a tool module of the worker's folder, as a user's is
        run, leaky = f"key-{uuid.uuid4().hex[:6]}", f"leak-{uuid.uuid4().hex[:6]}"
        async with user_workers() as start:
            worker = start(wdir, worker_env, "--tool-modules", f"{TOOLS},secret_tools")
            await worker.wait_ready()
            view = await _demo_run_fork_status(cli, env, run)
            leaked = await rewind_json(cli, env, "start", "--task", "show me the Temporal settings", "--run-id", leaky,
                                       "--model", f"script:{script}", "--wait")
            leaked_view = await rewind_json(cli, env, "status", leaky)

            # A wrong key: refused in one line, by the CLI and by a worker; the wrong key is not printed.
            wrong = "tmprl-wrong-" + secrets.token_hex(8)
            code, _, err = await rewind(cli, world.env(cli, **{**base, "TEMPORAL_API_KEY": wrong}), "status", run)
            one_line_error(code, err, f"Temporal at {endpoint.address} refused the API key from TEMPORAL_API_KEY",
                           "Request unauthorized", prefix="rewind:")
            assert wrong not in err and key not in err
            rdir = empty_dir(tmp_path, "refused")
            refused = start(rdir, world.env(rdir, **{**base, "TEMPORAL_API_KEY": wrong}), "--tool-modules", TOOLS)
            assert await refused.wait_exit() == 1
            one_line_error(1, refused.stderr(), "refused the API key from TEMPORAL_API_KEY", prefix="rewind:")
            assert wrong not in refused.log()
        auths = endpoint.authorizations()
    # Every request, the worker's and the CLI's, carried the key; only the wrong key's were refused.
    assert len(auths) == len(endpoint.requests) > 20
    assert set(auths) == {f"Bearer {key}", f"Bearer {wrong}"} and auths.count(f"Bearer {wrong}") == endpoint.refused
    assert {"PollWorkflowTaskQueue", "StartWorkflowExecution"} <= _paths(endpoint.requests)

    # The tool returned the key: what was kept is the redaction, and the key is nowhere.
    assert "[REDACTED:TEMPORAL_API_KEY]" in (leaked["final_answer"] or ""), leaked["final_answer"]
    places = {
        "history": await _history(client, run) + await _history(client, leaky),
        "checkpoints": folder_bytes(Path(env["REWIND_STORE"][7:])), "payloads": folder_bytes(Path(env["REWIND_PAYLOADS"][7:])),
        "worker log": worker.log().encode(), "status --json": json.dumps([view, leaked_view, leaked]).encode(),
        "worker folder": folder_bytes(wdir), "cli folder": folder_bytes(cli),
        "dev server db": _dev_server_files(temporal_server),
    }
    assert b"[REDACTED:TEMPORAL_API_KEY]" in places["history"] and b"[REDACTED:TEMPORAL_API_KEY]" in places["checkpoints"]
    leaks = [where for where, data in places.items() if key.encode() in data or key[13:].encode() in data]
    assert not leaks, f"the API key is in: {leaks}"


# -- 4. every connection error: one line naming the setting ------------------------------

def _cases(mtls: TLSTerminator, certs: Certs, plain: str, profile: Path) -> dict[str, tuple[dict[str, str | None], list[str]]]:
    good = _mtls_env(mtls, certs)
    at = f"Temporal at {mtls.address}"
    return {
        "missing certificate file": ({**good, "TEMPORAL_TLS_CLIENT_CERT_PATH": "/no/such/client.pem"},
                                     ["TEMPORAL_TLS_CLIENT_CERT_PATH=/no/such/client.pem: no such file"]),
        "key of another certificate": ({**good, "TEMPORAL_TLS_CLIENT_KEY_PATH": str(certs.unrelated_key)},
                                       [f"TEMPORAL_TLS_CLIENT_KEY_PATH={certs.unrelated_key} is not the private key",
                                        f"TEMPORAL_TLS_CLIENT_CERT_PATH={certs.client_cert}"]),
        "client certificate refused": ({**good, "TEMPORAL_TLS_CLIENT_CERT_PATH": str(certs.stranger_cert),
                                        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(certs.stranger_key)},
                                       [f"{at} refused the client certificate in TEMPORAL_TLS_CLIENT_CERT_PATH="
                                        f"{certs.stranger_cert}", "unknown ca"]),
        "no client certificate": ({**good, "TEMPORAL_TLS_CLIENT_CERT_PATH": None, "TEMPORAL_TLS_CLIENT_KEY_PATH": None},
                                  [f"{at} requires a client certificate", "TEMPORAL_TLS_CLIENT_CERT_PATH"]),
        "wrong server name": ({**good, "TEMPORAL_TLS_SERVER_NAME": "wrong.example"},
                              ["is not for 'wrong.example' (it is for localhost, temporal.test)",
                               "set TEMPORAL_TLS_SERVER_NAME to one of those, or unset it"]),
        "address not in the certificate": ({**good, "TEMPORAL_ADDRESS": f"127.0.0.1:{mtls.port}"},
                                           ["is not for '127.0.0.1' (it is for localhost, temporal.test)",
                                            "connect by one of those names in TEMPORAL_ADDRESS",
                                            "or set TEMPORAL_TLS_SERVER_NAME to one"]),
        "server CA not trusted": ({**good, "TEMPORAL_TLS_SERVER_CA_CERT_PATH": None},
                                  ["issued by CN=Standin Server CA", "set TEMPORAL_TLS_SERVER_CA_CERT_PATH"]),
        "plaintext client, TLS endpoint": ({"TEMPORAL_ADDRESS": mtls.address},
                                           [f"{at} expects TLS but this client connects in plaintext", "TEMPORAL_TLS=true"]),
        "TLS client, plaintext endpoint": ({**good, "TEMPORAL_ADDRESS": plain},
                                           [f"Temporal at {plain} does not speak TLS", "TEMPORAL_TLS=false"]),
        "TLS turned off": ({**good, "TEMPORAL_TLS": "false"}, ["(TLS is off by TEMPORAL_TLS)", "TEMPORAL_TLS=true"]),
        "unreachable": ({"TEMPORAL_ADDRESS": "127.0.0.1:1"}, ["cannot reach Temporal at 127.0.0.1:1", "TEMPORAL_ADDRESS"]),
        "no such namespace": ({**good, "TEMPORAL_NAMESPACE": "nope.a1b2c"},
                              [f"{at} has no namespace 'nope.a1b2c' (from TEMPORAL_NAMESPACE)"]),
        "no host name verification": ({**good, "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"},
                                      ["TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "TEMPORAL_TLS_SERVER_NAME"]),
        "profile key names itself": ({"TEMPORAL_ADDRESS": None, "TEMPORAL_CONFIG_FILE": str(profile),
                                      "TEMPORAL_PROFILE": "standin"},
                                     [f"tls.client_cert_path in profile 'standin' of {profile}=/gone/client.pem: no such file"]),
    }


CASES = ["missing certificate file", "key of another certificate", "client certificate refused", "no client certificate",
         "wrong server name", "address not in the certificate", "server CA not trusted", "plaintext client, TLS endpoint", "TLS client, plaintext endpoint",
         "TLS turned off", "unreachable", "no such namespace", "no host name verification", "profile key names itself"]


@pytest.mark.parametrize("case", CASES)
async def test_a_connection_error_is_one_line_naming_the_setting(world, mtls, certs, temporal_server, tmp_path, case):
    profile = _profile(tmp_path / "temporal.toml", mtls, certs, client_cert_path="/gone/client.pem")
    variables, needles = _cases(mtls, certs, temporal_server.address, profile)[case]
    cli = empty_dir(tmp_path, "cli")
    code, out, err = await rewind(cli, world.env(cli, **variables), "status", "some-run")
    one_line_error(code, err, *needles, prefix="rewind:")
    assert "tonic" not in err and "Status {" not in err and "Failed client connect" not in err, err
    assert out == ""


@pytest.mark.parametrize("case, variables, needle", [
    ("refused certificate", {"TEMPORAL_TLS_CLIENT_CERT_PATH": "stranger_cert", "TEMPORAL_TLS_CLIENT_KEY_PATH": "stranger_key"},
     "refused the client certificate in TEMPORAL_TLS_CLIENT_CERT_PATH"),
    ("no such namespace", {"TEMPORAL_NAMESPACE": "nope.a1b2c"}, "has no namespace 'nope.a1b2c' (from TEMPORAL_NAMESPACE)"),
])
async def test_a_worker_that_cannot_connect_says_why_in_one_line(world, mtls, certs, tmp_path, case, variables, needle):
    wdir = empty_dir(tmp_path, "worker")
    given = {k: str(getattr(certs, v)) if k.endswith("_PATH") else v for k, v in variables.items()}
    env = world.env(wdir, **{**_mtls_env(mtls, certs), **given})
    async with user_workers() as start:
        worker = start(wdir, env, "--tool-modules", TOOLS)
        assert await worker.wait_exit() == 1
    one_line_error(1, worker.stderr(), needle, prefix="rewind:")


async def test_the_python_api_connects_as_the_cli_does(mtls, certs, monkeypatch):
    """`rewind.connect()` without settings: the same environment, the same one-line errors."""
    from rewind import TemporalConnectionError, connect

    for name, value in _mtls_env(mtls, certs).items():
        monkeypatch.setenv(name, value)
    client = await connect()
    assert (await client.count_workflows()).count >= 0
    assert "CountWorkflowExecutions" in _paths(mtls.requests)
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(certs.stranger_cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(certs.stranger_key))
    with pytest.raises(TemporalConnectionError, match="refused the client certificate in TEMPORAL_TLS_CLIENT_CERT_PATH"):
        await connect()
