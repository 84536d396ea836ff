"""A probe of a Temporal address that a client could not connect to: what is there?

The SDK reports a failed connect as a dump of its Rust transport's state.
Rather than parse that, the probe opens its own connections with the standard
library, configured as the client was (same CA, server name and client
certificate), and sees what the server does: nothing listening, plaintext
HTTP/2 where TLS was expected (or the reverse), a certificate that is not for
that name or not signed by a trusted CA, a TLS alert refusing the client
certificate. rewind/temporal/connect.py turns the finding into one line.
Blocking calls, each bounded by PROBE_TIMEOUT_S: run it off the event loop.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from rewind.settings.temporal import TemporalConnection

PROBE_TIMEOUT_S = 5.0
# A client's first bytes on an HTTP/2 connection: the preface and an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_SETTINGS = 0x4
# TLS alerts a server sends about the client's certificate (OpenSSL's reason names).
_CERT_REQUIRED = ("CERTIFICATE_REQUIRED",)
_CERT_REFUSED = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "ACCESS_DENIED", "CERTIFICATE_EXPIRED",
                 "CERTIFICATE_REVOKED", "UNSUPPORTED_CERTIFICATE", "DECRYPT_ERROR")
# OpenSSL verification results (X509_V_ERR_*) of a server certificate.
_NAME_MISMATCH = {62, 64}
_EXPIRED = {10}


@dataclass
class Finding:
    """What the probe saw at the address."""

    kind: str  # unreachable | tls_server | plaintext_server | untrusted | wrong_name | expired | needs_client_cert
    #            | client_cert_refused | tls_ok | unknown
    detail: str = ""
    names: list[str] = field(default_factory=list)  # what the server's certificate is for
    issuer: str = ""


def _os_reason(exc: OSError, host: str) -> str:
    if isinstance(exc, socket.gaierror):
        return f"the host name {host!r} does not resolve"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused: nothing listens there"
    if isinstance(exc, TimeoutError):
        return f"no answer within {PROBE_TIMEOUT_S:g} s"
    return exc.strerror or type(exc).__name__


def _plain_h2(host: str, port: int) -> bool:
    """Whether a plaintext HTTP/2 server (a Temporal frontend without TLS) answers there."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(_H2_PREFACE)
            header = sock.recv(9)
    except OSError:
        return False
    return len(header) >= 4 and header[3] == _H2_SETTINGS


def _speaks_tls(host: str, port: int, server_name: str) -> bool:
    """Whether a TLS server answers there (any certificate; an alert is an answer too)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock, \
                context.wrap_socket(sock, server_hostname=server_name):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "")
    except OSError:
        return False


def _server_certificate(host: str, port: int, server_name: str) -> tuple[list[str], str]:
    """The names the server's certificate is for, and its issuer (unverified: to explain only)."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock, \
                context.wrap_socket(sock, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
        cert = x509.load_der_x509_certificate(der)  # type: ignore[arg-type]
    except (OSError, ValueError):
        return [], ""
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
        names += [str(n) for n in sans.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)]
    return names, cert.issuer.rfc4514_string()


def _client_context(conn: TemporalConnection, material: dict[str, bytes], folder: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["h2"])
    if "server_root_ca_cert" in material:
        context.load_verify_locations(cadata=material["server_root_ca_cert"].decode("ascii", "replace"))
    else:
        context.load_default_certs()
    if "client_cert" in material:
        # The ssl module loads a certificate chain from files only: private ones, removed at once.
        cert, key = folder / "cert.pem", folder / "key.pem"
        for path, data in ((cert, material["client_cert"]), (key, material["client_private_key"])):
            path.touch(mode=0o600)
            path.write_bytes(data)
        context.load_cert_chain(cert, key)
    return context


def _tls_probe(host: str, port: int, conn: TemporalConnection, material: dict[str, bytes]) -> Finding:
    """A TLS handshake as the client makes it, then an HTTP/2 preface: where does it stop?"""
    server_name = conn.server_name or host
    with tempfile.TemporaryDirectory(prefix="rewind-probe-") as folder:
        context = _client_context(conn, material, Path(folder))
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock, \
                context.wrap_socket(sock, server_hostname=server_name) as tls:
            try:
                tls.sendall(_H2_PREFACE)
            except OSError:
                pass  # the server may have closed already: its alert is still there to read
            tls.recv(9)  # TLS 1.3: a refused client certificate shows here, as the server's alert
        return Finding("tls_ok")
    except ssl.SSLCertVerificationError as exc:
        names, issuer = _server_certificate(host, port, server_name)
        code = exc.verify_code
        kind = "wrong_name" if code in _NAME_MISMATCH else "expired" if code in _EXPIRED else "untrusted"
        return Finding(kind, exc.verify_message or str(exc), names, issuer)
    except ssl.SSLError as exc:
        reason = exc.reason or ""
        if any(a in reason for a in _CERT_REQUIRED) or (conn.client_cert is None and "HANDSHAKE_FAILURE" in reason):
            return Finding("needs_client_cert", reason)
        if any(a in reason for a in (*_CERT_REFUSED, "HANDSHAKE_FAILURE")):
            return Finding("client_cert_refused", reason.split("ALERT_")[-1].replace("_", " ").lower())
        return Finding("plaintext_server") if _plain_h2(host, port) else Finding("unknown", reason)
    except TimeoutError:
        return Finding("tls_ok")  # the handshake went through; the server waits for more
    except OSError as exc:
        return Finding("plaintext_server") if _plain_h2(host, port) else Finding("unknown", _os_reason(exc, host))


def probe(host: str, port: int, conn: TemporalConnection, material: dict[str, bytes]) -> Finding:
    """What happens at host:port for a client configured as `conn` (`material`: its PEM
    bytes, as Client.connect got them: server_root_ca_cert, client_cert, client_private_key)."""
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        return Finding("unreachable", _os_reason(exc, host))
    if conn.tls:
        return _tls_probe(host, port, conn, material)
    if _plain_h2(host, port):
        return Finding("unknown")  # a plaintext server, as the client expects: the trouble is elsewhere
    return Finding("tls_server") if _speaks_tls(host, port, host) else Finding("unknown")


__all__ = ["Finding", "probe", "PROBE_TIMEOUT_S"]
