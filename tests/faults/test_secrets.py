"""Secrets never reach Temporal history, logs or the stores in clear.

- Redaction: canary secrets planted in the worker's environment (the
  Temporal API key among them), in a tool's output, in a ToolError, in a raised exception, in the model's own reply and
  in a 401 body are found nowhere afterwards: not in the histories (raw
  protobuf), the dev server's sqlite files, the worker's logs and stderr, the
  checkpoint store or the payload store; `[REDACTED:<name>]` is there instead.
- Encryption: with REWIND_ENCRYPTION_KEYS every payload (and failure message)
  is ciphertext in history and in external payload storage; keys rotate;
  plaintext and unknown key ids are refused with clear errors.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import secrets
import uuid
from pathlib import Path

import pytest
from helpers import folder_bytes, start_agent
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowFailureError

from activities.model.llm import ModelEndpoint
from activities.tools.registry import ToolRegistry
from rewind.client import connect
from rewind.settings.config import Settings
from rewind.temporal.encryption import EncryptionCodec, PayloadEncryptionError, parse_keys
from rewind.temporal.payloads import data_converter
from worker import build_worker
from workflows.vocabulary.contracts import AgentResult
from workflows.vocabulary.errors import ConfigError


def _script(model, turns) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    model.add_script(name, turns)
    return f"script:{name}"


async def _history_bytes(client: Client, workflow_id: str) -> bytes:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return History(events=history.events).SerializeToString() + history.to_json().encode()


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def root_log():
    capture, root = _Capture(), logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    yield capture
    root.removeHandler(capture)
    root.setLevel(level)


async def test_secrets_are_redacted_before_anything_is_persisted(
    client, settings, model, temporal_server, monkeypatch, root_log, capfd
):
    key = "sk-canary" + secrets.token_hex(16)                                          # env + model key
    akia = "AKIA" + "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))  # pattern only
    internal = "internal-" + secrets.token_hex(16)                                     # custom pattern only
    temporal_key = "tmprl-canary-" + secrets.token_hex(16)                             # the Temporal API key
    canaries = [key.encode(), akia.encode(), internal.encode(), key[3:].encode(), temporal_key.encode()]  # key[3:]: also without "sk-"
    monkeypatch.setenv("REWIND_TEST_API_KEY", key)
    # The worker's own Temporal API key (sent with every request; the dev server is plaintext,
    # so TLS is off): redacted though REWIND_SECRET_ENV does not list it.
    monkeypatch.setenv("TEMPORAL_API_KEY", temporal_key)
    monkeypatch.setenv("TEMPORAL_TLS", "false")
    monkeypatch.setenv("REWIND_TEST_AKIA", akia)
    monkeypatch.setenv("REWIND_TEST_INTERNAL", internal)
    monkeypatch.setenv("REWIND_SECRET_ENV", "OPENAI_API_KEY,REWIND_TEST_API_KEY")
    monkeypatch.setenv("REWIND_REDACT_PATTERNS", json.dumps([r"internal-[0-9a-f]{32}"]))
    from_env = Settings.from_env()  # the worker and client take their secrets from the settings
    settings.secret_values, settings.redact_patterns = from_env.secret_values, from_env.redact_patterns
    settings.temporal = from_env.temporal
    keyed = await connect(settings)
    marker = f"task-marker-{uuid.uuid4().hex}"  # not a secret: proves the searched bytes hold the runs

    leaky_model = _script(model, [
        {"content": f"I will use the key {key} I remember", "tool_calls": [
            {"name": "show_config", "arguments": {"section": "api"}},
            {"name": "login", "arguments": {"user": "ada"}},
            {"name": "connect_db", "arguments": {"name": "main"}},
            {"name": "echo", "arguments": {"text": f"the model repeats {key}"}},
            {"name": "show_temporal_env", "arguments": {"prefix": "TEMPORAL_"}},
        ]},
        {"content": None, "echo_tool_results": True},
    ])
    registry = ToolRegistry.from_modules(["secret_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key=key)
    async with build_worker(keyed, settings, registry, endpoint):
        ok = await start_agent(keyed, settings, f"Leak everything {marker}", model=leaky_model)
        result = await ok.result()
        model.inject_fault(401, message=f"Incorrect API key provided: {key}. Find your key at platform.openai.com.")
        denied = await start_agent(keyed, settings, f"Research these companies: Acme {marker}")
        with pytest.raises(WorkflowFailureError) as info:
            await denied.result()

    history = await _history_bytes(client, ok.id) + await _history_bytes(client, denied.id)
    db = temporal_server.db_file
    sqlite = b"".join(Path(f"{db}{suffix}").read_bytes() for suffix in ("", "-wal") if Path(f"{db}{suffix}").exists())
    store = folder_bytes(settings.store_url)
    payloads = folder_bytes(settings.payload_url)
    sent = json.dumps([r["messages"] for r in model.requests()]).encode()
    logs = "\n".join(root_log.lines).encode()
    out, err = capfd.readouterr()
    server_log = temporal_server.log_file.read_bytes() if temporal_server.log_file.exists() else b""
    # The searches look at the right bytes: the runs' (non-secret) task text is there.
    for data in (history, sqlite, store, sent):
        assert marker.encode() in data

    places = {"history": history, "sqlite": sqlite, "checkpoint store": store, "payload store": payloads,
              "model requests": sent, "logs": logs, "stdout/stderr": (out + err).encode(), "server log": server_log}
    leaks = [(where, c.decode()[:12]) for where, data in places.items() for c in canaries if c in data]
    assert not leaks, f"canaries found: {leaks}"

    assert result.status.state == "completed"
    answer = result.final_answer or ""
    for name in ("REWIND_TEST_API_KEY", "aws_access_key_id", "pattern_1", "TEMPORAL_API_KEY"):
        assert f"[REDACTED:{name}]" in answer
    assert "401" in str(info.value.cause) and "[REDACTED:REWIND_TEST_API_KEY]" in str(info.value.cause)
    for data in (history, store, sent, logs):  # logs: the retried tool's failure
        assert b"[REDACTED:REWIND_TEST_API_KEY]" in data


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


async def _encrypted_run(client: Client, settings: Settings, model, marker: str) -> tuple[str, AgentResult]:
    name = _script(model, [
        {"tool_calls": [
            {"name": "big_text", "arguments": {"marker": marker, "size": 6000}},
            {"name": "fail_with", "arguments": {"marker": marker}},
        ]},
        {"content": None, "echo_tool_results": True},
    ])
    handle = await start_agent(client, settings, f"Handle {marker}", model=name)
    return handle.id, await handle.result()


async def test_payloads_are_encrypted_and_keys_rotate(settings, model, tmp_path):
    k1, k2 = _key(), _key()
    enc = dataclasses.replace(
        settings, payload_url=f"file://{tmp_path / 'payloads'}", payload_threshold=2048,
        encryption_keys=f"kid1:{k1}", require_encryption=True,
    )
    registry = ToolRegistry.from_modules(["secret_tools"])
    endpoint = ModelEndpoint(base_url=model.base_url, api_key="test-key")
    marker = f"plain-marker-{uuid.uuid4().hex}"

    client1 = await connect(enc)
    async with build_worker(client1, enc, registry, endpoint):
        old_id, result = await _encrypted_run(client1, enc, model, marker)
    assert result.status.state == "completed"
    assert f"failed on {marker}" in (result.final_answer or "")  # the workflow decrypted the failure text
    history = await _history_bytes(client1, old_id)
    assert marker.encode() not in history  # inputs, results and the tool's failure text
    assert b"binary/encrypted" in history and b"kid1" in history
    offloaded = tmp_path / "payloads" / "temporal"
    assert any(p.is_file() for p in offloaded.rglob("*"))  # the 6 KB result went to external storage...
    assert marker.encode() not in folder_bytes(offloaded)  # ...encrypted

    # Rotation: kid2 encrypts from now on, kid1 still decrypts the old run.
    rotated = dataclasses.replace(enc, encryption_keys=f"kid2:{k2},kid1:{k1}")
    client2 = await connect(rotated)
    old = await client2.get_workflow_handle(old_id, result_type=AgentResult).result()
    assert old.final_answer == result.final_answer
    async with build_worker(client2, rotated, registry, endpoint):
        new_id, new = await _encrypted_run(client2, rotated, model, marker + "-2")
    assert new.status.state == "completed"
    new_history = await _history_bytes(client2, new_id)
    assert b"kid2" in new_history and b"kid1" not in new_history

    # A process without kid1 cannot read the old run, and says what to add.
    client3 = await connect(dataclasses.replace(enc, encryption_keys=f"kid2:{k2}"))
    with pytest.raises(Exception) as info:
        await client3.get_workflow_handle(old_id, result_type=AgentResult).result()
    chain = _messages(info.value)
    assert "'kid1'" in chain and "REWIND_ENCRYPTION_KEYS" in chain


def _messages(exc: BaseException | None) -> str:
    out = []
    while exc is not None:
        out.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return " | ".join(out)


async def test_plaintext_is_refused_when_encryption_is_required(settings):
    keys = parse_keys(f"kid1:{_key()}")
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')
    assert await EncryptionCodec(keys).decode([plain]) == [plain]  # migration: old plaintext still reads
    with pytest.raises(PayloadEncryptionError, match="plaintext.*REWIND_REQUIRE_ENCRYPTION"):
        await EncryptionCodec(keys, require_encryption=True).decode([plain])
    converter = data_converter(settings.payload_url, encryption_keys=f"kid1:{_key()}", require_encryption=True)
    with pytest.raises(PayloadEncryptionError):
        await converter.decode([plain], [str])
    with pytest.raises(ConfigError, match="REWIND_ENCRYPTION_KEYS is empty"):
        await connect(dataclasses.replace(settings, require_encryption=True))
    for bad in ("kid1", f"kid1:{base64.b64encode(b'short').decode()}", "kid1:not base64!"):
        with pytest.raises(ConfigError, match="REWIND_ENCRYPTION_KEYS"):
            parse_keys(bad)


def test_redactor_rules():
    env = {"OPENAI_API_KEY": "abcdefgh12345678", "AWS_SECRET_ACCESS_KEY": "testing",
           "REWIND_REDACT_PATTERNS": "token-\\d{6}\nx-[a-z]{10}"}
    r = Settings.from_env(env).redactor()
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    text = f"k=abcdefgh12345678 t=testing sk-{'a' * 20} AKIAABCDEFGHIJKLMNOP Bearer eyJhbGciOi.x {pem} token-123456"
    assert r.redact_text(text) == (
        "k=[REDACTED:OPENAI_API_KEY] t=testing [REDACTED:openai_key] [REDACTED:aws_access_key_id] "
        "[REDACTED:bearer_token] [REDACTED:private_key] [REDACTED:pattern_1]"
    )  # "testing" is shorter than 8 characters: not treated as a secret
    value = {"abcdefgh12345678": ["abcdefgh12345678", 3, None, {"k": "x-abcdefghij"}]}
    assert r.redact_json(value) == {"abcdefgh12345678": ["[REDACTED:OPENAI_API_KEY]", 3, None, {"k": "[REDACTED:pattern_2]"}]}
    assert r.redact_text(r.redact_text(text)) == r.redact_text(text)  # idempotent
    assert Settings.from_env({"REWIND_SECRET_ENV": "MINE", "MINE": "my-secret-value",
                              "OPENAI_API_KEY": "not-listed-anymore"}).redactor().redact_text(
        "my-secret-value not-listed-anymore") == "[REDACTED:MINE] not-listed-anymore"
