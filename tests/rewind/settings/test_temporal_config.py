"""The Temporal connection settings: the `temporal` CLI's profile file and
TEMPORAL_* variables, read through the SDK's envconfig into `Settings`.

Pinned down here, without a server: the environment wins over the profile;
the default file location and TEMPORAL_CONFIG_FILE / TEMPORAL_PROFILE; TLS on
for an API key or any TLS setting and off by TEMPORAL_TLS=false; which
setting gave each value (what an error names); secrets out of every repr and
in the redactor; each malformed setting one ConfigError naming it.
(tests/rewind/temporal/test_secured_temporal_as_user.py connects through all of it.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rewind.settings.config import Settings
from rewind.temporal.connect import connect_options
from workflows.vocabulary.errors import ConfigError

PROFILES = """
[profile.default]
address = "default.example:7233"
namespace = "default-ns"

[profile.cloud]
address = "ns.acct.tmprl.cloud:7233"
namespace = "ns.acct"
api_key = "profile-api-key-0123456789"

[profile.cloud.grpc_meta]
x-team = "blue"

[profile.mtls]
address = "10.0.0.5:7233"
namespace = "prod"

[profile.mtls.tls]
server_name = "temporal.internal"
server_ca_cert_path = "/etc/temporal/ca.pem"
client_cert_path = "/etc/temporal/client.pem"
client_key_path = "/etc/temporal/client.key"
"""


def _file(tmp_path: Path, text: str = PROFILES) -> Path:
    path = tmp_path / "temporal.toml"
    path.write_text(text)
    return path


def test_nothing_set_is_the_local_plaintext_server(tmp_path):
    s = Settings.from_env({"HOME": str(tmp_path)})
    assert (s.temporal_address, s.namespace) == ("localhost:7233", "default")
    assert not s.temporal.tls and s.temporal.config_file is None
    options = connect_options(s)
    assert options["target_host"] == "localhost:7233" and options["tls"] is False and "api_key" not in options


def test_the_default_profile_file_of_the_temporal_cli_is_read(tmp_path):
    folder = tmp_path / ".config" / "temporalio"
    folder.mkdir(parents=True)
    _file(folder)
    s = Settings.from_env({"HOME": str(tmp_path)})
    assert (s.temporal_address, s.namespace) == ("default.example:7233", "default-ns")
    assert s.temporal.config_file == folder / "temporal.toml"
    assert s.temporal.origin("address") == f"address in profile 'default' of {folder / 'temporal.toml'}"
    xdg = tmp_path / "xdg" / "temporalio"
    xdg.mkdir(parents=True)
    _file(xdg, '[profile.default]\naddress = "xdg.example:7233"\n')
    assert Settings.from_env({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}).temporal_address == "xdg.example:7233"


def test_the_environment_wins_over_the_profile(tmp_path):
    path = _file(tmp_path)
    s = Settings.from_env({"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "mtls",
                           "TEMPORAL_NAMESPACE": "from-env", "TEMPORAL_TLS_CLIENT_CERT_PATH": "/env/client.pem",
                           "TEMPORAL_ADDRESS": ""})  # empty is unset: the profile's address stays
    assert (s.temporal_address, s.namespace) == ("10.0.0.5:7233", "from-env")
    t = s.temporal
    assert t.tls and t.server_name == "temporal.internal"
    assert str(t.client_cert) == "/env/client.pem" and str(t.client_key) == "/etc/temporal/client.key"
    assert t.origin("namespace") == "TEMPORAL_NAMESPACE"
    assert t.origin("client_cert") == "TEMPORAL_TLS_CLIENT_CERT_PATH"
    assert t.origin("client_key") == f"tls.client_key_path in profile 'mtls' of {path}"


def test_an_api_key_turns_tls_on_unless_tls_is_off(tmp_path):
    path = _file(tmp_path)
    cloud = Settings.from_env({"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "cloud"})
    assert cloud.temporal.tls and cloud.temporal.api_key == "profile-api-key-0123456789"
    assert cloud.temporal.rpc_metadata == {"x-team": "blue"}
    options = connect_options(cloud)
    assert options["api_key"] == "profile-api-key-0123456789" and options["tls"] is not False
    assert options["rpc_metadata"] == {"x-team": "blue"} and options["namespace"] == "ns.acct"
    plain = Settings.from_env({"TEMPORAL_API_KEY": "k" * 20, "TEMPORAL_TLS": "false"})
    assert not plain.temporal.tls and connect_options(plain)["tls"] is False
    assert Settings.from_env({"TEMPORAL_TLS_SERVER_NAME": "x"}).temporal.tls
    assert Settings.from_env({"TEMPORAL_TLS": "TRUE"}).temporal.tls
    meta = Settings.from_env({"TEMPORAL_GRPC_META_X_ROUTE": "eu"}).temporal
    assert meta.rpc_metadata == {"x-route": "eu"} and meta.origin("rpc_metadata") == "TEMPORAL_GRPC_META_X_ROUTE"


def test_no_secret_in_a_repr_and_the_key_is_redacted(tmp_path):
    key, meta = "tmprl-canary-0123456789abcdef", "Bearer meta-canary-0123456789"
    s = Settings.from_env({"TEMPORAL_API_KEY": key, "TEMPORAL_GRPC_META_AUTHORIZATION": meta,
                           "TEMPORAL_TLS_CLIENT_CERT_DATA": "CERT", "TEMPORAL_TLS_CLIENT_KEY_DATA": "KEY-canary-data"})
    for text in (repr(s), str(s), repr(s.temporal), s.temporal.describe()):
        assert key not in text and "meta-canary" not in text and "KEY-canary-data" not in text
    redacted = s.redactor().redact_text(f"key={key} header={meta}")
    assert key not in redacted and "meta-canary" not in redacted
    assert "[REDACTED:TEMPORAL_API_KEY]" in redacted
    # REWIND_SECRET_ENV replaces the default list: the Temporal key stays redacted all the same.
    own = Settings.from_env({"TEMPORAL_API_KEY": key, "REWIND_SECRET_ENV": "MINE", "MINE": "x" * 12})
    assert own.redactor().redact_text(key) == "[REDACTED:TEMPORAL_API_KEY]"


@pytest.mark.parametrize("env, needles", [
    ({"TEMPORAL_TLS": "maybe"}, ["TEMPORAL_TLS='maybe'", "true or false"]),
    ({"TEMPORAL_CONFIG_FILE": "/no/such/temporal.toml"}, ["TEMPORAL_CONFIG_FILE=/no/such/temporal.toml", "no such file"]),
    ({"TEMPORAL_PROFILE": "nope", "HOME": "/no/such/home"}, ["TEMPORAL_PROFILE=nope", "no profile file"]),
    ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "/a.pem", "TEMPORAL_TLS_CLIENT_CERT_DATA": "x"},
     ["TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA", "only one"]),
    ({"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "yes"}, ["TEMPORAL_TLS_DISABLE_HOST_VERIFICATION='yes'"]),
])
def test_a_malformed_setting_names_itself(env, needles):
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    assert "\n" not in str(info.value)
    for needle in needles:
        assert needle in str(info.value)


def test_a_profile_file_problem_names_the_file(tmp_path):
    path = _file(tmp_path)
    with pytest.raises(ConfigError, match=r"TEMPORAL_PROFILE=staging: .* has no such profile \(it has: cloud, default, mtls\)"):
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(path), "TEMPORAL_PROFILE": "staging"})
    broken = tmp_path / "broken.toml"
    broken.write_text("[profile.default\naddress=1")
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"TEMPORAL_CONFIG_FILE": str(broken)})
    assert f"the Temporal profile file {broken} is not valid" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("env, needles", [
    ({"TEMPORAL_ADDRESS": "https://ns.acct.tmprl.cloud:7233"}, ["TEMPORAL_ADDRESS='https://", "host:port"]),
    ({"TEMPORAL_ADDRESS": "localhost"}, ["TEMPORAL_ADDRESS='localhost'", "host:port"]),
    ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "/no/client.pem", "TEMPORAL_TLS_CLIENT_KEY_PATH": "/no/client.key"},
     ["TEMPORAL_TLS_CLIENT_CERT_PATH=/no/client.pem: no such file"]),
    ({"TEMPORAL_TLS_CLIENT_KEY_DATA": "x"}, ["TEMPORAL_TLS_CLIENT_KEY_DATA is set but TEMPORAL_TLS_CLIENT_CERT_PATH is not"]),
    ({"TEMPORAL_TLS_CLIENT_CERT_DATA": "not a certificate", "TEMPORAL_TLS_CLIENT_KEY_DATA": "x"},
     ["TEMPORAL_TLS_CLIENT_CERT_DATA holds no PEM certificate"]),
    ({"TEMPORAL_TLS_SERVER_NAME": "a", "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"},
     ["TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "TEMPORAL_TLS_SERVER_NAME"]),
])
def test_connection_settings_are_checked_before_connecting(env, needles):
    with pytest.raises(ConfigError) as info:
        connect_options(Settings.from_env(env))
    assert "\n" not in str(info.value)
    for needle in needles:
        assert needle in str(info.value)


@pytest.mark.parametrize("sdk_error, phrase", [
    ('Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(Custom '
     '{ kind: InvalidData, error: InvalidMessage(InvalidContentType) }))', "invalid content type"),
    ('Failed client connect: `get_system_info` call error after connection: Status { code: Unknown, message: '
     '"transport error", source: Some(tonic::transport::Error(Transport, hyper::Error(Io, Kind(ConnectionReset)))) }',
     "connection reset"),
    ('Failed client connect: `get_system_info` call error after connection: Status { code: Unavailable, message: '
     '"Frontend is not healthy yet", metadata: MetadataMap { headers: {} }, source: None }', "Frontend is not healthy yet"),
    ("something else entirely", "the connection failed"),
])
def test_an_unrecognised_failure_is_a_phrase_not_the_sdk_dump(sdk_error, phrase):
    """When the probe finds nothing to name, the line still carries no tonic/gRPC dump."""
    from rewind.temporal.connect import _reason

    assert _reason(sdk_error) == phrase
