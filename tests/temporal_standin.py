"""A stand-in for Temporal Cloud (or any mTLS / API-key cluster): a TLS endpoint
of the tests' own in front of the plaintext dev server.

- `make_certs(folder)` writes PEM files the tests need: a server CA and a
  server certificate (for `localhost` and `temporal.test`, not 127.0.0.1), a
  client CA and a client certificate it signed, a client certificate from a
  CA the server does not know, and a key that belongs to no certificate.
- `TLSTerminator` listens on a free loopback port with the standard library's
  `ssl` (TLS 1.2+, ALPN `h2`; with `client_ca`, CERT_REQUIRED: a handshake
  without a client certificate of that CA is refused, as an mTLS namespace
  does) and forwards the decrypted bytes to the dev server's plaintext port.
  It decodes the HTTP/2 request headers the client sends (the `h2` package,
  fed a copy of the client's bytes) so a test can see the `authorization`
  metadata. With `api_key`, it holds each connection until its first request
  and answers every request of a connection whose `authorization` is not
  `Bearer <api_key>` itself, with gRPC status UNAUTHENTICATED and Temporal
  Cloud's message: the dev server never sees those requests.

The terminator serves from its own threads, so it keeps serving while a test
blocks (a subprocess wait, a synchronous helper).
"""

from __future__ import annotations

import datetime
import select
import socket
import ssl
import threading
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAMES = ("localhost", "temporal.test")
UNAUTHENTICATED = 16  # gRPC status code


@dataclass(frozen=True)
class Certs:
    server_ca: Path          # signs the server certificate: what a client sets as its server CA
    server_cert: Path
    server_key: Path
    client_ca: Path          # the CA the endpoint accepts client certificates of
    client_cert: Path
    client_key: Path
    stranger_cert: Path      # a client certificate of a CA the endpoint does not accept
    stranger_key: Path
    unrelated_key: Path      # a private key that matches none of the certificates


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _certificate(name: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
                 *, ca: bool = False, sans: list[x509.GeneralName] | None = None,
                 usage: x509.ObjectIdentifier | None = None) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, signer = issuer if issuer else (subject, key)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False, content_commitment=False,
            data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                                        critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _ca(folder: Path, name: str) -> tuple[Path, x509.Name, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = _certificate(name, key, None, ca=True)
    return _write_cert(folder / f"{name.lower().replace(' ', '-')}.pem", cert), cert.subject, key


def _leaf(folder: Path, stem: str, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey], **options) -> tuple[Path, Path]:
    key = _key()
    cert = _certificate(stem, key, issuer, **options)
    return _write_cert(folder / f"{stem}.pem", cert), _write_key(folder / f"{stem}.key", key)


def make_certs(folder: Path) -> Certs:
    """Fresh CAs, certificates and keys under `folder` (made per test session, never checked in)."""
    folder.mkdir(parents=True, exist_ok=True)
    server_ca, server_ca_name, server_ca_key = _ca(folder, "Standin Server CA")
    client_ca, client_ca_name, client_ca_key = _ca(folder, "Standin Client CA")
    _, stranger_ca_name, stranger_ca_key = _ca(folder, "Stranger CA")
    # No IP address: a client that dials 127.0.0.1 must name the server (TEMPORAL_TLS_SERVER_NAME).
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
    server_cert, server_key = _leaf(folder, "server", (server_ca_name, server_ca_key), sans=sans,
                                    usage=ExtendedKeyUsageOID.SERVER_AUTH)
    client_cert, client_key = _leaf(folder, "client", (client_ca_name, client_ca_key),
                                    usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger_cert, stranger_key = _leaf(folder, "stranger", (stranger_ca_name, stranger_ca_key),
                                        usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    unrelated_key = _write_key(folder / "unrelated.key", _key())
    return Certs(server_ca, server_cert, server_key, client_ca, client_cert, client_key,
                 stranger_cert, stranger_key, unrelated_key)


class _HeaderReader:
    """The request headers in a client's HTTP/2 bytes: a server-side h2 connection.
    While the real server answers the client (`forwarding`), what this one would
    send is dropped; when the terminator answers itself, it is sent."""

    def __init__(self, seen: list[dict[str, str]]) -> None:
        self.connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.connection.initiate_connection()  # a server's first frame is its SETTINGS
        self.streams: list[int] = []  # request streams, in order
        self.first: dict[str, str] | None = None
        self.forwarding = False
        self.broken = False
        self._seen = seen

    def feed(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            for event in self.connection.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)  # type: ignore[arg-type]
                    self.first = self.first or headers
                    self.streams.append(event.stream_id)
                    self._seen.append(headers)
                elif isinstance(event, h2.events.DataReceived):
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        except h2.exceptions.ProtocolError:
            # A copy cannot follow the real server's flow-control windows on a busy
            # connection; the requests read so far stay, later ones are not read.
            self.broken = True
        if self.forwarding:
            self.connection.data_to_send()


class TLSTerminator:
    """A TLS endpoint on 127.0.0.1 forwarding to the plaintext `upstream` (host:port).

    Blocking sockets, a thread per connection: unlike asyncio's TLS transport, a
    blocking handshake that refuses a client certificate sends the TLS alert
    first, as a real server does, so the client sees why."""

    def __init__(self, upstream: str, certs: Certs, *, client_ca: Path | None = None, api_key: str | None = None) -> None:
        self.upstream_host, port = upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.api_key = api_key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(certs.server_cert, certs.server_key)
        self.context.set_alpn_protocols(["h2"])
        if client_ca is not None:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(client_ca)
        self.requests: list[dict[str, str]] = []  # headers of every request read, in order
        self.refused = 0                          # requests answered UNAUTHENTICATED
        self.handshakes_refused = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tls-terminator", daemon=True)

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def authorizations(self) -> list[str]:
        return [h["authorization"] for h in list(self.requests) if "authorization" in h]

    def __enter__(self) -> "TLSTerminator":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._listener.close()
        with self._lock:
            for sock in list(self._open):
                with suppress(OSError):
                    sock.close()

    def _track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._open.add(sock)
        return sock

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(self._track(raw),), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        upstream = None
        try:
            raw.settimeout(30)
            try:
                client = self._track(self.context.wrap_socket(raw, server_side=True))
            except (ssl.SSLError, OSError):
                self.handshakes_refused += 1  # the client saw the alert (or spoke no TLS at all)
                return
            headers = _HeaderReader(self.requests)
            held = b""
            if self.api_key is not None:
                # Hold the connection until its first request: its key decides where it goes.
                while headers.first is None and not headers.broken:
                    data = client.recv(65536)
                    if not data:
                        return
                    held += data
                    headers.feed(data)
                if headers.first is not None and headers.first.get("authorization") != f"Bearer {self.api_key}":
                    self._refuse(client, headers)
                    return
            headers.forwarding = True
            headers.connection.data_to_send()
            upstream = self._track(socket.create_connection((self.upstream_host, self.upstream_port), timeout=30))
            upstream.sendall(held)
            self._pump(client, upstream, headers)
        except (OSError, ssl.SSLError):
            pass
        finally:
            for sock in (raw, upstream):
                if sock is not None:
                    with suppress(OSError):
                        sock.close()

    def _pump(self, client: ssl.SSLSocket, upstream: socket.socket, headers: _HeaderReader) -> None:
        """Both directions in one thread (an SSL socket is not for two threads at once)."""
        client.settimeout(None)
        upstream.settimeout(None)
        while not self._stop.is_set():
            ready, _, _ = select.select([client, upstream], [], [], 0.5)
            if client in ready or client.pending():
                while True:
                    data = client.recv(65536)
                    if not data:
                        return
                    headers.feed(data)
                    upstream.sendall(data)
                    if not client.pending():
                        break
            if upstream in ready:
                data = upstream.recv(65536)
                if not data:
                    return
                client.sendall(data)

    def _refuse(self, client: ssl.SSLSocket, headers: _HeaderReader) -> None:
        """Answer every request on this connection as Temporal Cloud answers a wrong API key."""
        answered = 0
        while not self._stop.is_set():
            for stream_id in headers.streams[answered:]:
                headers.connection.send_headers(stream_id, [
                    (":status", "200"), ("content-type", "application/grpc"),
                    ("grpc-status", str(UNAUTHENTICATED)), ("grpc-message", "Request unauthorized."),
                ], end_stream=True)
                self.refused += 1
            answered = len(headers.streams)
            client.sendall(headers.connection.data_to_send())
            data = client.recv(65536)
            if not data or headers.broken:
                return
            headers.feed(data)
