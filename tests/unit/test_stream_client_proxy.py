"""The CONNECT tunnel of attach and port-forward (lessor.cli.stream_client) through real proxies
on loopback (review N13): an `https://` proxy is spoken to in TLS, verified against the trust
store SSL_CERT_FILE names, with the credentials inside that TLS and the end-to-end TLS to the
endpoint inside the tunnel (TLS in TLS); an IPv6 endpoint is named `[::1]:port` in the CONNECT.

The endpoint is a small WebSocket server (wsproto, TLS with a CA of its own, as the target's
`caFile`) that echoes stdin frames on stdout, so each test is a whole session: handshake, a
frame each way, close. A tap in front of the proxy plays the network and keeps every byte the
CLI sent to the proxy."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Message, Request

from lessor.cli import stream_client
from lessor.cli.client import Client
from lessor.cli.config import Target
from lessor.cli.errors import UnreachableError
from lessor.cli.stream_client import Closed, StreamClient
from lessor.controlplane.pki import CertificateAuthority
from lessor.protocol.stream_frames import STDIN, STDOUT, SUBPROTOCOL, decode, encode

USER, PASSWORD = "alice", "s3cret:pass word"
NAMES = ("localhost", "127.0.0.1", "::1")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _serve(family: int, address: str, handle: Callable[[socket.socket], None]) -> socket.socket:
    listener = socket.create_server((address, 0), family=family)

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _pump(source: socket.socket, sink: socket.socket, kept: bytearray | None = None) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            if kept is not None:
                kept += chunk
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def server_context(authority: CertificateAuthority, tmp: Path, name: str) -> ssl.SSLContext:
    pair = authority.issue(name, server_names=NAMES)
    (tmp / f"{name}.crt").write_bytes(pair.cert_pem)
    (tmp / f"{name}.key").write_bytes(pair.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp / f"{name}.crt", tmp / f"{name}.key")
    return context


class EchoEndpoint:
    """The endpoint: TLS, a WebSocket upgrade, then each stdin frame back on stdout."""

    def __init__(self, context: ssl.SSLContext, family: int, address: str) -> None:
        self.context = context
        self.listener = _serve(family, address, self._handle)
        self.port: int = self.listener.getsockname()[1]

    def _handle(self, raw: socket.socket) -> None:
        with contextlib.suppress(OSError), self.context.wrap_socket(raw, server_side=True) as sock:
            connection = WSConnection(ConnectionType.SERVER)
            while data := sock.recv(65536):
                connection.receive_data(data)
                for event in connection.events():
                    if isinstance(event, Request):
                        accept = AcceptConnection(subprotocol=SUBPROTOCOL)
                        sock.sendall(connection.send(accept))
                    elif isinstance(event, BytesMessage):
                        _, payload = decode(bytes(event.data))
                        sock.sendall(connection.send(Message(data=encode(STDOUT, payload))))
                    elif isinstance(event, CloseConnection):
                        sock.sendall(connection.send(event.response()))
                        return


@dataclass
class ConnectProxy:
    """A forward proxy that tunnels every CONNECT; TLS on its listener when `context` is given.
    It keeps each request head it read and whether the connection was TLS, and `tapped`: the
    bytes the client sent, as the network carried them."""

    context: ssl.SSLContext | None = None
    heads: list[str] = field(default_factory=list)
    tls: list[bool] = field(default_factory=list)
    tapped: bytearray = field(default_factory=bytearray)

    def __post_init__(self) -> None:
        self._proxy = _serve(socket.AF_INET, "127.0.0.1", self._handle)
        self._tap = _serve(socket.AF_INET, "127.0.0.1", self._relay)
        self.port: int = self._tap.getsockname()[1]

    def close(self) -> None:
        self._tap.close()
        self._proxy.close()

    def _relay(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self._proxy.getsockname()[:2], timeout=30)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream, self.tapped)

    def _handle(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError), contextlib.closing(sock):
            first = sock.recv(1, socket.MSG_PEEK)
            self.tls.append(first == b"\x16")  # a TLS handshake record
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_side=True)
            head = b""
            while b"\r\n\r\n" not in head and (chunk := sock.recv(1)):
                head += chunk
            self.heads.append(head.decode(errors="replace"))
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
            sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            threading.Thread(target=_pump, args=(upstream, sock), daemon=True).start()
            _pump(sock, upstream)


@dataclass
class Pki:
    """Two CAs: the proxy's, trusted through SSL_CERT_FILE (the CLI's default trust store), and
    the endpoint's, the target's caFile (`endpoint_ca_file`). Each trusts only its own."""

    directory: Path
    proxy: CertificateAuthority
    endpoint: CertificateAuthority

    @property
    def endpoint_ca_file(self) -> Path:
        return self.directory / "endpoint-ca.pem"

    def context(self, authority: CertificateAuthority, name: str) -> ssl.SSLContext:
        return server_context(authority, self.directory, name)


@pytest.fixture
def pki(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Pki:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    found = Pki(tmp_path, CertificateAuthority("proxy CA"), CertificateAuthority("endpoint CA"))
    (tmp_path / "proxy-ca.pem").write_bytes(found.proxy.cert_pem)
    found.endpoint_ca_file.write_bytes(found.endpoint.cert_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "proxy-ca.pem"))
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return found


def _through(monkeypatch: pytest.MonkeyPatch, proxy: str) -> None:
    for name in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(name, proxy)


def _session(endpoint: str, ca_file: Path) -> tuple[bytes, int]:
    """A frame there and back, then the close handshake: what came back, and the close code
    the reader saw."""
    client = Client(Target(endpoint=endpoint, auth="token", token="t0k", ca_file=str(ca_file)))
    session = StreamClient.open(client, "/v1/leases/x/attach")
    try:
        session.send(STDIN, b"hello through the tunnel")
        frames: list[tuple[int, bytes]] = []
        while not frames:
            frames = session.receive()
        session.end()
        with pytest.raises(Closed) as closed:
            while True:
                session.receive()
        return (frames[0][1] if frames[0][0] == STDOUT else b""), closed.value.code
    finally:
        session.sock.close()


def test_an_https_proxy_is_spoken_to_in_tls_with_the_credentials_inside(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = EchoEndpoint(pki.context(pki.endpoint, "endpoint"), socket.AF_INET, "127.0.0.1")
    proxy = ConnectProxy(pki.context(pki.proxy, "proxy"))
    credentials = "alice:s3cret%3Apass%20word"
    _through(monkeypatch, f"https://{credentials}@localhost:{proxy.port}")
    try:
        echoed = _session(f"https://localhost:{endpoint.port}", pki.endpoint_ca_file)
    finally:
        proxy.close()
        endpoint.listener.close()
    assert echoed == (b"hello through the tunnel", 1000), "the TLS inside ended cleanly"
    assert proxy.tls == [True], proxy.tls
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (head,) = proxy.heads
    assert head.startswith(f"CONNECT localhost:{endpoint.port} HTTP/1.1\r\n"), head
    assert f"Proxy-Authorization: Basic {login}\r\n" in head, head
    for secret in (login.encode(), PASSWORD.encode(), b"CONNECT", b"hello through"):
        assert secret not in proxy.tapped, secret  # the network saw TLS only


def test_a_rest_request_goes_through_an_https_proxy_in_tls_too(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI's every other request (lessor.cli.client) takes the same tunnel: urllib's own
    speaks plaintext to an https:// proxy, Basic credentials in the clear."""
    answer = json.dumps({"id": "x", "phase": "Bound"}).encode()

    class Lease(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: object) -> None:
            return

    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), Lease)
    endpoint.socket = pki.context(pki.endpoint, "endpoint").wrap_socket(
        endpoint.socket, server_side=True
    )
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    proxy = ConnectProxy(pki.context(pki.proxy, "proxy"))
    _through(monkeypatch, f"https://{USER}:{PASSWORD}@localhost:{proxy.port}")
    port = endpoint.server_address[1]
    target = Target(
        endpoint=f"https://localhost:{port}", auth="token", token="t0k",
        ca_file=str(pki.endpoint_ca_file),
    )  # fmt: skip
    try:
        assert Client(target).call("GET", "/v1/leases/x") == {"id": "x", "phase": "Bound"}
    finally:
        proxy.close()
        endpoint.shutdown()
    assert proxy.tls == [True], proxy.tls
    (head,) = proxy.heads
    assert head.startswith(f"CONNECT localhost:{port} HTTP/1.1\r\n"), head
    for secret in (PASSWORD.encode(), b"CONNECT", b"t0k", b"/v1/leases/x"):
        assert secret not in proxy.tapped, secret  # the network saw TLS only


def test_an_https_proxy_the_trust_store_does_not_vouch_for_is_refused(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy whose certificate SSL_CERT_FILE's CAs did not sign gets no CONNECT and no
    credentials: the session fails before, as an unreachable endpoint."""
    proxy = ConnectProxy(pki.context(CertificateAuthority("a stranger"), "proxy"))
    _through(monkeypatch, f"https://{USER}:pw@localhost:{proxy.port}")
    try:
        with pytest.raises(UnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
            _session("https://localhost:1", pki.endpoint_ca_file)
    finally:
        proxy.close()
    assert proxy.heads == [] and b"pw" not in proxy.tapped


@pytest.mark.parametrize(("proxy", "port"), [("https://proxy.invalid", 443), ("http://p", 80)])
def test_a_proxy_without_a_port_is_reached_on_its_schemes(
    pki: Pki, monkeypatch: pytest.MonkeyPatch, proxy: str, port: int
) -> None:
    dialled: list[tuple[str, int]] = []

    def dial(address: tuple[str, int], *args: object, **kwargs: object) -> socket.socket:
        dialled.append(address)
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(stream_client.socket, "create_connection", dial)
    _through(monkeypatch, proxy)
    with pytest.raises(UnreachableError):
        _session("https://lessor.example:8443", pki.endpoint_ca_file)
    assert dialled == [(proxy.split("//")[1], port)]


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_endpoint_is_bracketed_in_the_connect(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = EchoEndpoint(pki.context(pki.endpoint, "endpoint"), socket.AF_INET6, "::1")
    proxy = ConnectProxy()
    _through(monkeypatch, f"http://127.0.0.1:{proxy.port}")
    try:
        echoed = _session(f"https://[::1]:{endpoint.port}", pki.endpoint_ca_file)
    finally:
        proxy.close()
        endpoint.listener.close()
    assert echoed == (b"hello through the tunnel", 1000), "the TLS inside ended cleanly"
    (head,) = proxy.heads
    lines = head.split("\r\n")
    assert lines[0] == f"CONNECT [::1]:{endpoint.port} HTTP/1.1", lines
    assert f"Host: [::1]:{endpoint.port}" in lines, lines
    assert proxy.tls == [False]


def test_a_tls_session_ends_with_the_servers_close(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No proxy: `end()` on a TLS session sends the close frame and reads the server's answer
    in TLS (a half-close would have dropped the TLS layer and read ciphertext: 1002)."""
    endpoint = EchoEndpoint(pki.context(pki.endpoint, "endpoint"), socket.AF_INET, "127.0.0.1")
    for name in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    try:
        ended = _session(f"https://127.0.0.1:{endpoint.port}", pki.endpoint_ca_file)
    finally:
        endpoint.listener.close()
    assert ended == (b"hello through the tunnel", 1000)


def test_a_proxy_of_another_scheme_is_refused_without_its_password(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    _through(monkeypatch, "socks5://alice:hunter2@127.0.0.1:1080")
    with pytest.raises(UnreachableError, match="scheme socks5://") as refused:
        _session("https://lessor.example:8443", pki.endpoint_ca_file)
    assert "hunter2" not in str(refused.value)
