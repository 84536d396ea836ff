"""Opening the Temporal connection the settings describe, and saying why it failed.

`connect_options(settings)`: the keyword arguments of `Client.connect`, made
by the SDK's own `ClientConfigProfile.to_client_connect_config()`. The
certificate material is read and checked here first, so that a missing file,
a file without a certificate, an encrypted key or a key that is not the
certificate's is one line naming its setting, not a failed handshake.

`connection_error(settings, exc)`: what a failed `Client.connect` means, as
one line naming the setting to change and how: from what the probe
(rewind/temporal/probe.py) sees at the address, never from the SDK's dump of
its transport's state. A gRPC status the server answered with (a refused API
key) is read from the SDK's error itself.

`open_connection(settings)`: what `connect` (rewind/client.py) makes, a
`Connection`: the SDK's service client with the namespace, data converter and
interceptors of the settings, and the SDK's `Client` built on them on first use.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS

from rewind.settings.temporal import Pem, TemporalConnection
from rewind.temporal.probe import probe
from workflows.vocabulary.errors import ConfigError, TemporalConnectionError, TemporalUnreachableError

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.converter import DataConverter
    from temporalio.service import ServiceClient, WorkflowService

    from rewind.settings.config import Settings


# -- before connecting --------------------------------------------------------

def split_address(address: str, variable: str) -> tuple[str, int]:
    """(host, port) of a `host:port` address; anything else is an error naming `variable`."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^\s:/\[\]]+):(\d{1,5})", address)
    port = int(match.group(2) or match.group(4)) if match else 0
    if not match or not 0 < port < 65536:
        raise ConfigError(f"{variable}={address!r} is not host:port; set it like localhost:7233 "
                          "or <namespace>.<account>.tmprl.cloud:7233 (no scheme, no path)")
    return match.group(1) or match.group(3), port


def _read(conn: TemporalConnection, name: str, what: str) -> bytes:
    pem: Pem = getattr(conn, name)
    if pem.data is not None:
        return pem.data
    assert pem.path is not None
    setting = conn.origin(name)
    try:
        return pem.path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{setting}={pem.path}: no such file; set it to the PEM file of the {what}") from None
    except IsADirectoryError:
        raise ConfigError(f"{setting}={pem.path} is a folder; set it to the PEM file of the {what}") from None
    except OSError as exc:
        raise ConfigError(f"{setting}={pem.path} cannot be read ({exc.strerror}); "
                          f"give this user read access to the {what}") from None


def _named(conn: TemporalConnection, name: str) -> str:
    """`SETTING=path` (or just the setting, for inline PEM data)."""
    pem: Pem = getattr(conn, name)
    return f"{conn.origin(name)}={pem.path}" if pem.path is not None else conn.origin(name)


def _certificates(conn: TemporalConnection, name: str, what: str) -> tuple[bytes, list[Any]]:
    from cryptography import x509

    data = _read(conn, name, what)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise ConfigError(f"{_named(conn, name)} holds no PEM certificate (-----BEGIN CERTIFICATE-----); "
                          f"set it to the {what} in PEM form")
    return data, certificates


def _private_key(conn: TemporalConnection) -> tuple[bytes, Any]:
    from cryptography.hazmat.primitives import serialization

    data = _read(conn, "client_key", "client certificate's private key")
    try:
        return data, serialization.load_pem_private_key(data, password=None)
    except TypeError:  # "Password was not given but private key is encrypted"
        raise ConfigError(f"{_named(conn, 'client_key')} is encrypted with a passphrase, which Temporal clients "
                          "cannot use; decrypt it (`openssl pkey -in KEY -out KEY.plain`) and point it there") from None
    except (ValueError, Exception):  # noqa: BLE001 - cryptography reports a malformed key in several ways
        raise ConfigError(f"{_named(conn, 'client_key')} holds no PEM private key (-----BEGIN PRIVATE KEY-----); "
                          "set it to the client certificate's private key") from None


def _public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _tls_material(conn: TemporalConnection) -> dict[str, bytes]:
    """The PEM bytes the TLS connection uses, each checked (see the module docstring)."""
    out: dict[str, bytes] = {}
    if conn.server_ca_cert is not None:
        out["server_root_ca_cert"], _ = _certificates(conn, "server_ca_cert", "CA certificate that signed the server's")
    if (conn.client_cert is None) != (conn.client_key is None):
        given, missing = ("client_cert", "client_key") if conn.client_key is None else ("client_key", "client_cert")
        wanted = conn.origin(missing)
        raise ConfigError(f"{_named(conn, given)} is set but {wanted} is not: mTLS needs both the client "
                          f"certificate and its private key; set {wanted}")
    if conn.client_cert is not None:
        out["client_cert"], chain = _certificates(conn, "client_cert", "client certificate")
        out["client_private_key"], key = _private_key(conn)
        if _public(chain[0].public_key()) != _public(key.public_key()):
            raise ConfigError(f"{_named(conn, 'client_key')} is not the private key of the certificate in "
                              f"{_named(conn, 'client_cert')}; set them to a certificate and its own key")
        expires = chain[0].not_valid_after_utc
        if expires < datetime.datetime.now(datetime.timezone.utc):
            raise ConfigError(f"the client certificate in {_named(conn, 'client_cert')} expired on "
                              f"{expires:%Y-%m-%d %H:%M} UTC; renew it and point {conn.origin('client_cert')} at the new one")
    return out


def connect_options(settings: "Settings") -> dict[str, Any]:
    """`Client.connect` keyword arguments for the settings (target_host, namespace, tls, api_key, rpc_metadata)."""
    conn = settings.temporal
    split_address(settings.temporal_address, conn.origin("address"))
    if conn.tls and conn.disable_host_verification:
        raise ConfigError(f"{conn.origin('disable_host_verification')}: the Temporal Python SDK always verifies the "
                          "server's name; unset it, and set TEMPORAL_TLS_SERVER_NAME to a name in the server's "
                          "certificate (with TEMPORAL_TLS_SERVER_CA_CERT_PATH for a private CA)")
    material = _tls_material(conn) if conn.tls else {}
    tls = ClientConfigTLS(
        disabled=not conn.tls, server_name=conn.server_name,
        server_root_ca_cert=material.get("server_root_ca_cert"), client_cert=material.get("client_cert"),
        client_private_key=material.get("client_private_key"),
    )
    profile = ClientConfigProfile(address=settings.temporal_address, namespace=settings.namespace,
                                  api_key=conn.api_key or None, tls=tls, grpc_meta=dict(conn.rpc_metadata))
    return dict(profile.to_client_connect_config())


_STATUS = re.compile(r'code: (\w+), message: "((?:[^"\\]|\\.)*)"')
_GENERIC = {"Error", "ConnectError", "Custom", "InvalidData", "InvalidCertificate", "Transport", "Status", "Some",
            "Io", "Kind", "Unknown", "MetadataMap"}


def _reason(text: str) -> str:
    """A short phrase from the SDK's error (the last specific name in it), never the dump."""
    status = _STATUS.search(text)
    if status and status.group(2) not in ("transport error", ""):
        return status.group(2)
    names = [n for n in re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b|\b[A-Z][a-z]{3,}\b", text) if n not in _GENERIC]
    if not names:
        return "the connection failed"
    return re.sub(r"(?<!^)(?=[A-Z])", " ", names[-1]).lower()


def _tls_reasons(conn: TemporalConnection) -> str:
    given = [conn.origin(n) for n in ("tls", "api_key", "client_cert", "server_ca_cert", "server_name")
             if n in conn.origins]
    return ", ".join(given) if given else "TLS settings"


def _refused(settings: "Settings", said: str) -> TemporalConnectionError:
    """The server answered UNAUTHENTICATED / PERMISSION_DENIED: which credential to fix."""
    conn, where, said = settings.temporal, f"Temporal at {settings.temporal_address}", said.rstrip(".")
    if conn.api_key:
        return TemporalConnectionError(
            f"{where} refused the API key from {conn.origin('api_key')} ({said}); set it to a valid, unexpired "
            f"API key with access to namespace {settings.namespace!r} (from {conn.origin('namespace')})")
    if conn.client_cert is not None:
        return TemporalConnectionError(
            f"{where} refused the client certificate in {_named(conn, 'client_cert')} for namespace "
            f"{settings.namespace!r} ({said}); check {conn.origin('namespace')} and that the namespace accepts "
            "the certificate's CA")
    return TemporalConnectionError(
        f"{where} wants credentials ({said}); set TEMPORAL_API_KEY to an API key, or TEMPORAL_TLS_CLIENT_CERT_PATH "
        "and TEMPORAL_TLS_CLIENT_KEY_PATH to a client certificate and its key")


async def check_namespace(client: Any, settings: "Settings") -> None:
    """The namespace exists and this client may use it, or one line naming the setting now
    (not a worker that polls nothing, or the first command refused with the server's words).
    DescribeNamespace is what the SDK's own worker asks first too."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=settings.namespace), timeout=datetime.timedelta(seconds=30))
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise TemporalConnectionError(
                f"Temporal at {settings.temporal_address} has no namespace {settings.namespace!r} (from "
                f"{settings.temporal.origin('namespace')}); set it to one that exists (`temporal operator namespace "
                "list`; on Temporal Cloud: <namespace>.<account id>)") from None
        if exc.status in (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED):
            raise _refused(settings, exc.message) from None
        # Anything else (a busy server): the command's own calls meet it and say so.


def explain(settings: "Settings", error_text: str) -> TemporalConnectionError:
    """The one-line error for a failed connect (see the module docstring); runs the probe."""
    conn, address = settings.temporal, settings.temporal_address
    where = f"Temporal at {address}"
    status = _STATUS.search(error_text)
    if status and status.group(1) in ("Unauthenticated", "PermissionDenied"):
        return _refused(settings, status.group(2))
    host, port = split_address(address, conn.origin("address"))
    found = probe(host, port, conn, _tls_material(conn) if conn.tls else {})
    name = conn.server_name or host
    if found.kind == "unreachable":
        return TemporalUnreachableError(
            f"cannot reach Temporal at {address} ({found.detail}); check {conn.origin('address')}, "
            "or start a local server with `rewind server`")
    if found.kind == "tls_server":
        why = f"TLS is off by {conn.origin('tls')}" if "tls" in conn.origins else "no TLS setting is given"
        return TemporalConnectionError(
            f"{where} expects TLS but this client connects in plaintext ({why}); set TEMPORAL_TLS=true, with "
            "TEMPORAL_API_KEY or TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH as the server requires")
    if found.kind == "plaintext_server":
        return TemporalConnectionError(
            f"{where} does not speak TLS but this client does (from {_tls_reasons(conn)}); for a plaintext server set "
            f"TEMPORAL_TLS=false (or unset the TLS settings), else point {conn.origin('address')} at the TLS endpoint")
    names = ", ".join(found.names) or "other names"
    if found.kind == "wrong_name":
        fix = (f"set {conn.origin('server_name')} to one of those, or unset it" if conn.server_name
               else f"connect by one of those names in {conn.origin('address')}, or set TEMPORAL_TLS_SERVER_NAME to one")
        return TemporalConnectionError(f"the certificate of {where} is not for {name!r} (it is for {names}); {fix}")
    if found.kind == "untrusted":
        if conn.server_ca_cert is not None:
            signer = f"the CA in {_named(conn, 'server_ca_cert')}"
            fix = f"set {conn.origin('server_ca_cert')} to the CA that signed it"
        else:
            signer, fix = "a CA this machine trusts", "set TEMPORAL_TLS_SERVER_CA_CERT_PATH to the PEM file of the CA that signed it"
        issued = f" (issued by {found.issuer})" if found.issuer else ""
        return TemporalConnectionError(f"the certificate of {where}{issued} is not signed by {signer} ({found.detail}); {fix}")
    if found.kind == "expired":
        return TemporalConnectionError(f"the certificate of {where} has expired ({found.detail}); the server's "
                                       "operator must renew it")
    if found.kind == "needs_client_cert":
        return TemporalConnectionError(
            f"{where} requires a client certificate (mTLS) and none is given; set TEMPORAL_TLS_CLIENT_CERT_PATH and "
            "TEMPORAL_TLS_CLIENT_KEY_PATH to a certificate the namespace accepts and its key (or use TEMPORAL_API_KEY)")
    if found.kind == "client_cert_refused":
        return TemporalConnectionError(
            f"{where} refused the client certificate in {_named(conn, 'client_cert')} (TLS alert: {found.detail}); "
            f"use a certificate signed by a CA the namespace accepts, and its key in {conn.origin('client_key')}")
    given = ", ".join(sorted({conn.origin(n) for n in conn.origins})) or conn.origin("address")
    return TemporalConnectionError(f"{where} did not accept the connection ({_reason(error_text)}); check {given} "
                                   f"(this client connects with {conn.describe()})")


async def connection_error(settings: "Settings", exc: BaseException) -> TemporalConnectionError:
    """explain(), off the event loop (the probe blocks for up to a few seconds)."""
    return await asyncio.to_thread(explain, settings, str(exc))


# -- connecting ------------------------------------------------------------------

async def open_connection(settings: "Settings", runtime: Any = None, *, service: str = "rewind-cli") -> Connection:
    """The connection `connect` (rewind/client.py) makes, with its Client still to build:
    the options above, the tracing interceptors, the data converter (rewind/temporal/payloads.py: its
    settings checked now, itself built on first use), then the service client on Rewind's
    runtime and the namespace check. A connection that
    fails is one TemporalConnectionError naming the setting to fix."""
    from temporalio.service import ConnectConfig, ServiceClient

    from rewind.temporal import tracing
    from rewind.temporal.converter import check_converter_settings
    from rewind.temporal.runtime import core_runtime

    if not settings.temporal_read:
        raise RuntimeError("these settings were read without the Temporal connection (Settings.from_env(temporal=False), "
                           "for a command that only reads the store); read them with Settings.from_env()")
    options = connect_options(settings)
    traced = tracing.interceptors(settings, service=service)
    # The converter's settings checked now, the converter imported and built on first use.
    check_converter_settings(settings.payload_url, settings.encryption_keys, settings.require_encryption)

    def converter() -> DataConverter:
        from rewind.temporal.payloads import converter_factory

        return converter_factory(
            settings.payload_url, settings.payload_threshold,
            encryption_keys=settings.encryption_keys, require_encryption=settings.require_encryption,
            s3_endpoint_url=settings.s3_endpoint_url, aws_region=settings.aws_region,
        )()

    # What `Client.connect(**options, ...)` does: connect the service client, then build the
    # Client on it (here: Connection.client) with the namespace, converter and interceptors.
    namespace = options.pop("namespace", "default")
    config = ConnectConfig(**options, runtime=runtime if runtime is not None else core_runtime())
    deadline = asyncio.get_running_loop().time() + DEV_SERVER_START_WAIT_S
    while True:
        try:
            # Not the SDK's default runtime: its core would print warnings on stdout (rewind/temporal/runtime.py).
            service_client = await ServiceClient.connect(config)
            break
        except RuntimeError as exc:
            # `rewind dev &` then `rewind start` at once: the folder's own dev server is still
            # coming up at this address; wait for it rather than fail.
            if asyncio.get_running_loop().time() > deadline or not await asyncio.to_thread(
                    _dev_server_starting, settings, config.target_host):
                raise await connection_error(settings, exc) from exc
            await asyncio.sleep(0.25)
    connection = Connection(service_client, namespace, converter, traced,
                            plain_payloads=not settings.require_encryption)
    await check_namespace(connection, settings)
    return connection


# How long a client waits for its folder's dev server that is still starting.
DEV_SERVER_START_WAIT_S = 30.0


def _dev_server_starting(settings: "Settings", address: str) -> bool:
    from rewind.temporal.dev_server import starting_at

    return starting_at(settings.home / "temporal.db", address)


# -- connected -----------------------------------------------------------------

class Connection:
    """A connection to Temporal: the SDK's service client, with the namespace, data
    converter and interceptors of the settings. That is all `Client.connect` makes before
    it builds its `Client` from them; here the Client is built on first use, as `client`,
    or when the connection is asked for anything else a Client has (so a Connection goes
    where a Client goes), and the data converter too (`converter`: a function that builds
    it, its settings already checked). A command that reads runs with plain service calls
    (checkpoint_bridge/temporal/runs.py: `rewind status` of a finished run, `rewind pending`) thus
    never imports `temporalio.client`, most of such a command's time, nor the pydantic
    converter when it decodes nothing; one that needs more gets the very Client that
    `Client.connect` would have made, on the same connection."""

    def __init__(self, service: ServiceClient, namespace: str, converter: Callable[[], DataConverter],
                 interceptors: Sequence[Any] = (), *, plain_payloads: bool = False) -> None:
        self.service = service
        self.namespace = namespace
        self._converter = converter
        self.interceptors = list(interceptors)
        # Whether the converter takes a plain (unencrypted) JSON payload as it is: then a reader
        # of one may decode it without building the converter (checkpoint_bridge/temporal/runs.py).
        self.plain_payloads = plain_payloads

    @property
    def workflow_service(self) -> WorkflowService:
        return self.service.workflow_service

    @functools.cached_property
    def data_converter(self) -> DataConverter:
        return self._converter()

    @functools.cached_property
    def client(self) -> Client:
        from temporalio.client import Client

        return Client(self.service, namespace=self.namespace, data_converter=self.data_converter,
                      interceptors=self.interceptors)

    def __getattr__(self, name: str) -> Any:
        # Only what the connection itself lacks; never dunders (copy, pickle) nor what it
        # builds itself (an error building one must not recurse here).
        if name.startswith("__") or name in ("client", "data_converter", "_converter"):
            raise AttributeError(name)
        return getattr(self.client, name)


__all__ = ["connect_options", "connection_error", "check_namespace", "explain", "split_address", "open_connection",
           "Connection"]
