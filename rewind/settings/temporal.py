"""How to reach Temporal: the `temporal` CLI's own client configuration.

Read with the SDK's environment configuration (`temporalio.envconfig`), as
the `temporal` CLI reads it: a profile of a TOML file
(`TEMPORAL_CONFIG_FILE`, else `~/.config/temporalio/temporal.toml`; the
profile `TEMPORAL_PROFILE`, else `default`), then the environment over it
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS`,
`TEMPORAL_TLS_CLIENT_CERT_PATH` / `_DATA`, `TEMPORAL_TLS_CLIENT_KEY_PATH` /
`_DATA`, `TEMPORAL_TLS_SERVER_CA_CERT_PATH` / `_DATA`,
`TEMPORAL_TLS_SERVER_NAME`, `TEMPORAL_GRPC_META_<NAME>`). A shell where
`temporal workflow list` works needs nothing else for Rewind.

rewind/settings/config.py calls `load_temporal_config` with the environment it read;
nothing here reads the process environment. The result remembers which
setting (a variable, or a key of a profile) gave each value, so that an
error names the one to fix. Certificate files are read when connecting
(rewind/temporal/connect.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from workflows.vocabulary.errors import ConfigError

if TYPE_CHECKING:
    from temporalio.envconfig import ClientConfigProfile

# The SDK's loader (temporalio.envconfig) imports the SDK's service client and all its
# protobuf modules (the larger part of any command that talks to Temporal), and every
# `rewind` command reads these settings, including those that only read the store: it
# is imported only when a profile file or a TLS / API key / gRPC metadata setting is
# there to interpret. Address and namespace alone need no SDK.
_PLAIN = ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE")

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_PROFILE = "default"

# Each value: its variable, and its key in a profile. The PEM values have a
# _PATH and a _DATA form (a file, or the PEM text itself).
VARIABLES = {
    "address": ("TEMPORAL_ADDRESS", "address"),
    "namespace": ("TEMPORAL_NAMESPACE", "namespace"),
    "api_key": ("TEMPORAL_API_KEY", "api_key"),
    "tls": ("TEMPORAL_TLS", "tls.disabled"),
    "server_name": ("TEMPORAL_TLS_SERVER_NAME", "tls.server_name"),
    "disable_host_verification": ("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", "tls.disable_host_verification"),
    "server_ca_cert": ("TEMPORAL_TLS_SERVER_CA_CERT", "tls.server_ca_cert"),
    "client_cert": ("TEMPORAL_TLS_CLIENT_CERT", "tls.client_cert"),
    "client_key": ("TEMPORAL_TLS_CLIENT_KEY", "tls.client_key"),
    "rpc_metadata": ("TEMPORAL_GRPC_META_<NAME>", "grpc_meta"),
}
_PEM_FIELDS = ("server_ca_cert", "client_cert", "client_key")
_METADATA_PREFIX = "TEMPORAL_GRPC_META_"
# Every variable read by name (the gRPC metadata ones by their prefix).
_NAMED = ("TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE", *(
    form for field_name, (variable, _) in VARIABLES.items() if field_name != "rpc_metadata"
    for form in ((f"{variable}_PATH", f"{variable}_DATA") if field_name in _PEM_FIELDS else (variable,))))
_TRUE, _FALSE = {"true", "1"}, {"false", "0"}


@dataclass(frozen=True)
class Pem:
    """A certificate or key: a file (`path`), or the PEM text itself (`data`, from a *_DATA setting)."""

    path: Path | None = None
    data: bytes | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else "(inline PEM data)"


@dataclass
class TemporalConnection:
    """Everything about the Temporal connection but its address and namespace
    (which `Settings` holds as `temporal_address` and `namespace`).

    `tls`: connect with TLS. As in the SDK and the `temporal` CLI, it is on when
    an API key or any TLS setting is given, unless TEMPORAL_TLS=false (or the
    profile's tls.disabled = true) turns it off. None of the secrets shows in a
    repr: the API key, an inline key, the gRPC metadata.
    """

    tls: bool = False
    server_name: str | None = None
    server_ca_cert: Pem | None = None
    client_cert: Pem | None = None
    client_key: Pem | None = field(default=None, repr=False)
    api_key: str = field(default="", repr=False)
    rpc_metadata: dict[str, str] = field(default_factory=dict, repr=False)
    disable_host_verification: bool = False
    # Which setting gave each value: field name -> "TEMPORAL_TLS_CLIENT_CERT_PATH" or
    # "tls.client_cert_path in profile 'default' of /home/me/.config/temporalio/temporal.toml".
    origins: dict[str, str] = field(default_factory=dict)
    # The profile file read (None: there was none) and the profile's name.
    config_file: Path | None = None
    profile: str = DEFAULT_PROFILE

    def origin(self, name: str) -> str:
        """The setting that gave `name` (its variable when nothing was given)."""
        if name in self.origins:
            return self.origins[name]
        variable = VARIABLES[name][0]
        return f"{variable}_PATH" if name in _PEM_FIELDS else variable

    def describe(self) -> str:
        """How this client connects, for logs and messages (no secret)."""
        if not self.tls:
            return "plaintext" + (", API key" if self.api_key else "")
        parts = ["TLS"]
        if self.client_cert is not None:
            parts.append(f"client certificate {self.client_cert}")
        if self.api_key:
            parts.append(f"API key from {self.origin('api_key')}")
        return ", ".join(parts)

    def secrets(self) -> dict[str, str]:
        """Values no log, history or store may hold in clear (for the redactor)."""
        found = {"TEMPORAL_API_KEY": self.api_key} if self.api_key else {}
        for name, value in self.rpc_metadata.items():
            if name.lower() == "authorization":
                found[f"TEMPORAL_GRPC_META_{name.upper()}"] = value
        return found


def default_config_file(env: Mapping[str, str]) -> Path | None:
    """Where the `temporal` CLI looks for its profiles when TEMPORAL_CONFIG_FILE is unset."""
    if sys.platform == "darwin" and env.get("HOME"):
        return Path(env["HOME"]) / "Library" / "Application Support" / "temporalio" / "temporal.toml"
    base = env.get("XDG_CONFIG_HOME") or (str(Path(env["HOME"]) / ".config") if env.get("HOME") else None)
    if base is None and sys.platform.startswith("win") and env.get("APPDATA"):
        base = env["APPDATA"]
    return Path(base) / "temporalio" / "temporal.toml" if base else None


def _config_file(env: Mapping[str, str]) -> Path | None:
    named = env.get("TEMPORAL_CONFIG_FILE")
    if named:
        path = Path(named).expanduser()
        if not path.exists() or path.is_dir():  # /dev/null is a fine empty file
            raise ConfigError(f"TEMPORAL_CONFIG_FILE={named}: no such file; point it at the `temporal` CLI's "
                              "profile file (temporal.toml) or unset it")
        return path
    path = default_config_file(env)
    return path if path is not None and path.is_file() else None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _file_profiles(path: Path) -> tuple[dict[str, ClientConfigProfile], dict[str, Any]]:
    """The profiles of the file as the SDK reads them, and as plain TOML (for the keys the
    SDK's types leave out, such as tls.disable_host_verification)."""
    import tomllib  # here: only a profile file needs it, and every command reads these settings

    from temporalio.envconfig import ClientConfig

    try:
        profiles = dict(ClientConfig.load(config_source=path, override_env_vars={}).profiles)
        raw = tomllib.loads(path.read_text(encoding="utf-8")).get("profile", {})
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the Temporal profile file {path} ({exc.__class__.__name__}: {exc}); "
                          "fix its permissions or set TEMPORAL_CONFIG_FILE to another file") from None
    except (RuntimeError, tomllib.TOMLDecodeError) as exc:  # the SDK's ConfigError is a RuntimeError
        raise ConfigError(f"the Temporal profile file {path} is not valid: {_one_line(exc)}; fix it "
                          "(`temporal config` edits it) or set TEMPORAL_CONFIG_FILE to another file") from None
    return profiles, raw if isinstance(raw, dict) else {}


def _flag(name: str, text: str | None) -> bool | None:
    if text is None:
        return None
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={text!r} is not true or false; set it to true or false")


def _pem(source: Any) -> Pem | None:
    if source is None:
        return None
    if isinstance(source, Path):
        return Pem(path=source.expanduser())
    return Pem(data=source if isinstance(source, bytes) else str(source).encode())


def _pem_key(name: str, source: Any) -> str:
    return f"{VARIABLES[name][1]}_{'path' if isinstance(source, Path) else 'data'}"


def _tls_on(profile: ClientConfigProfile) -> bool:
    """Whether the SDK connects this profile with TLS (ClientConfigProfile.to_client_connect_config's
    rule, without reading the certificate files it names): a TLS setting, or an API key, turns
    it on; TEMPORAL_TLS=false / tls.disabled = true turns it off."""
    if profile.tls is not None:
        return profile.tls.disabled is not True
    return profile.api_key is not None


def load_temporal_config(env: Mapping[str, str]) -> tuple[str, str, TemporalConnection]:
    """(address, namespace, the rest) from the profile file and `env`, the environment winning.
    Empty variables are unset ones (as everywhere in Rewind)."""
    names = [*_NAMED, *(k for k in env if k.startswith(_METADATA_PREFIX))]
    temporal = {k: v for k in names if (v := env.get(k)) is not None and v.strip()}
    path = _config_file(temporal | {k: env[k] for k in ("HOME", "XDG_CONFIG_HOME", "APPDATA") if env.get(k)})
    profile_name = temporal.get("TEMPORAL_PROFILE", DEFAULT_PROFILE).strip()
    if path is None and set(temporal) <= set(_PLAIN):
        # What the SDK would make of it too: plaintext, the address and namespace as given.
        origins = {name: VARIABLES[name][0] for name in ("address", "namespace") if VARIABLES[name][0] in temporal}
        return (temporal.get("TEMPORAL_ADDRESS", DEFAULT_ADDRESS), temporal.get("TEMPORAL_NAMESPACE", DEFAULT_NAMESPACE),
                TemporalConnection(origins=origins, config_file=None, profile=profile_name))
    from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS

    file_profile, raw_profile, profiles = ClientConfigProfile(), {}, {}
    if path is not None:
        profiles, raw = _file_profiles(path)
        if profile_name not in profiles and profile_name != DEFAULT_PROFILE:
            raise ConfigError(f"TEMPORAL_PROFILE={profile_name}: {path} has no such profile "
                              f"(it has: {', '.join(sorted(profiles)) or 'none'}); use one of them or unset TEMPORAL_PROFILE")
        file_profile = profiles.get(profile_name, ClientConfigProfile())
        raw_profile = raw.get(profile_name, {}) if isinstance(raw.get(profile_name), dict) else {}
    elif profile_name != DEFAULT_PROFILE:
        where = temporal.get("TEMPORAL_CONFIG_FILE") or default_config_file(env) or "~/.config/temporalio/temporal.toml"
        raise ConfigError(f"TEMPORAL_PROFILE={profile_name}: there is no profile file ({where}); create it with "
                          "`temporal config set --profile NAME --prop address --value HOST:PORT` or set TEMPORAL_CONFIG_FILE")
    _flag("TEMPORAL_TLS", temporal.get("TEMPORAL_TLS"))  # the SDK would read any other word as "on"
    # The profile is named here, not by TEMPORAL_PROFILE: a file without a `default`
    # profile is no error (the SDK refuses a named profile that is not there).
    sdk_env = {k: v for k, v in temporal.items() if k not in ("TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE")}
    in_file = path is not None and profile_name in profiles
    try:
        merged = ClientConfigProfile.load(profile=profile_name if in_file else None, config_source=path,
                                          disable_file=not in_file, override_env_vars=sdk_env)
    except RuntimeError as exc:  # the SDK's ConfigError: both a _PATH and a _DATA form given, and the like
        raise ConfigError(f"Temporal client configuration: {_one_line(exc)}; set only one of them") from None

    def origin(name: str, env_names: tuple[str, ...], in_file: Any, key: str) -> None:
        given = next((n for n in env_names if n in temporal), None)
        if given is not None:
            origins[name] = given
        elif in_file is not None and in_file != {}:
            origins[name] = f"{key} in profile {profile_name!r} of {path}"

    origins: dict[str, str] = {}
    file_tls = file_profile.tls or ClientConfigTLS()
    for name, in_file in (("address", file_profile.address), ("namespace", file_profile.namespace),
                          ("api_key", file_profile.api_key), ("server_name", file_tls.server_name),
                          ("tls", file_tls.disabled), ("rpc_metadata", file_profile.grpc_meta or None)):
        variable, key = VARIABLES[name]
        env_names = tuple(k for k in temporal if k.startswith(_METADATA_PREFIX)) if name == "rpc_metadata" else (variable,)
        origin(name, env_names, in_file, key)
    for name, in_file in (("server_ca_cert", file_tls.server_root_ca_cert), ("client_cert", file_tls.client_cert),
                          ("client_key", file_tls.client_private_key)):
        variable = VARIABLES[name][0]
        origin(name, (f"{variable}_PATH", f"{variable}_DATA"), in_file, _pem_key(name, in_file))

    raw_tls = raw_profile.get("tls") if isinstance(raw_profile.get("tls"), dict) else {}
    no_verification = _flag("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION", temporal.get("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"))
    if no_verification is not None:
        origins["disable_host_verification"] = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
    elif raw_tls.get("disable_host_verification") is not None:
        no_verification = bool(raw_tls["disable_host_verification"])
        origins["disable_host_verification"] = f"tls.disable_host_verification in profile {profile_name!r} of {path}"

    tls_settings = merged.tls or ClientConfigTLS()
    connection = TemporalConnection(
        tls=_tls_on(merged),
        server_name=tls_settings.server_name or None,
        server_ca_cert=_pem(tls_settings.server_root_ca_cert),
        client_cert=_pem(tls_settings.client_cert),
        client_key=_pem(tls_settings.client_private_key),
        api_key=merged.api_key or "",
        rpc_metadata=dict(merged.grpc_meta),
        disable_host_verification=bool(no_verification),
        origins=origins,
        config_file=path,
        profile=profile_name,
    )
    return merged.address or DEFAULT_ADDRESS, merged.namespace or DEFAULT_NAMESPACE, connection


__all__ = ["TemporalConnection", "Pem", "load_temporal_config", "default_config_file", "VARIABLES"]
