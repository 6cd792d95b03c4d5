"""The client end of an attach or port-forward WebSocket (frames: lessor.protocol.stream_frames).

The socket is the CLI's own (TLS with the target's CA when the endpoint is https) and wsproto
does the handshake and the framing. Where the environment names a proxy for the endpoint
(HTTPS_PROXY or HTTP_PROXY, unless NO_PROXY covers it: urllib's rules, as for every other
request), the socket is a CONNECT tunnel through it, TLS inside the tunnel end to end.

The upgrade request carries the same credential as any request, signed over `GET <path>` for
ssh targets, so a refusal before the upgrade (401, 403 not_declared, 404, 409 not_ready) is the
usual one-line error and exit code.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
from typing import Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from lessor.cli import proxy_tunnel
from lessor.cli.client import Client, Credential
from lessor.cli.errors import SERVER, ApiError, CliError, UnreachableError
from lessor.cli.proxy_tunnel import READ
from lessor.protocol.stream_frames import ERROR, SUBPROTOCOL, decode, encode, parse_error


class Closed(Exception):  # noqa: N818 - an ending
    """The session is over: the close code and reason, and the server's error frame if any."""

    def __init__(self, code: int, reason: str, error: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.error = error

    @property
    def message(self) -> str:
        detail = (self.error or {}).get("detail") or self.reason or f"code {self.code}"
        error = self.error or {}
        reason = error.get("code") or error.get("reason") or self.reason
        return f"the session ended: {detail}" + (f" ({reason})" if reason != detail else "")


class StreamClient:
    def __init__(self, sock: socket.socket, connection: WSConnection) -> None:
        self.sock = sock
        self.connection = connection
        self.lock = threading.Lock()
        self.partial = bytearray()
        self.error: dict[str, Any] | None = None
        self.backlog: list[tuple[int, bytes]] = []  # frames that came with the 101

    @classmethod
    def open(cls, client: Client, path: str) -> StreamClient:
        return client.authenticated(lambda credential: cls._open(client, path, credential))

    @classmethod
    def _open(cls, client: Client, path: str, credential: Credential) -> StreamClient:
        parts = urlsplit(client.endpoint)
        host = parts.hostname or "localhost"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            sock = proxy_tunnel.connect(parts.scheme, host, port)
            if parts.scheme == "https":
                sock = client.tls.wrap_socket(sock, server_hostname=host)
        except OSError as error:
            raise UnreachableError(f"cannot reach {client.endpoint}: {error}", SERVER) from None
        target = client.signed_target(path)
        headers = [(b"accept", b"application/json")]
        authorization = credential.header("GET", target, b"")
        if authorization:
            headers.append((b"authorization", authorization.encode()))
        connection = WSConnection(ConnectionType.CLIENT)
        request = Request(
            host=parts.netloc, target=target, subprotocols=[SUBPROTOCOL], extra_headers=headers
        )
        session = cls(sock, connection)
        try:
            sock.sendall(connection.send(request))
            session._handshake()
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        return session

    def _handshake(self) -> None:
        status, body = 0, bytearray()
        while True:
            data = self._recv()
            self.connection.receive_data(data or None)
            for event in self.connection.events():
                if isinstance(event, AcceptConnection):
                    self.backlog = self._frames()
                    return
                if isinstance(event, RejectConnection):
                    status = event.status_code
                    if not event.has_body:
                        raise ApiError(status, None)
                elif isinstance(event, RejectData):
                    body += event.data
                    if event.body_finished:
                        try:
                            parsed = json.loads(body)
                        except ValueError:
                            parsed = {"detail": body[:200].decode(errors="replace")}
                        raise ApiError(status, parsed)
            if not data:
                raise CliError("the server closed the connection during the upgrade", SERVER)

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(READ)
        except TimeoutError:
            raise CliError("the server did not answer the upgrade in time", SERVER) from None
        except OSError as error:
            raise CliError(f"the connection failed: {error}", SERVER) from None

    def send(self, channel: int, payload: bytes) -> None:
        self._send(Message(data=encode(channel, payload)))

    def _send(self, event: Event) -> None:
        # LocalProtocolError: the session is closing; the reader reports why.
        with self.lock, contextlib.suppress(LocalProtocolError):
            self.sock.sendall(self.connection.send(event))

    def receive(self) -> list[tuple[int, bytes]]:
        """The frames of the next read (maybe none, after a ping). Error frames are kept for
        the Closed that follows them, which ends the session and drops the connection."""
        if self.backlog:
            frames, self.backlog = self.backlog, []
            return frames
        try:
            return self._read()
        except Closed:
            self.sock.close()
            raise

    def _read(self) -> list[tuple[int, bytes]]:
        try:
            data = self.sock.recv(READ)
        except OSError as error:
            raise Closed(1006, f"the connection failed: {error}", self.error) from None
        if not data:
            raise Closed(1006, "the connection was cut", self.error)
        try:
            self.connection.receive_data(data)
            return self._frames()
        except RemoteProtocolError as error:
            raise Closed(1002, str(error), self.error) from None

    def _frames(self) -> list[tuple[int, bytes]]:
        frames: list[tuple[int, bytes]] = []
        for event in self.connection.events():
            if isinstance(event, CloseConnection):
                with contextlib.suppress(OSError):
                    self._send(event.response())
                raise Closed(event.code, event.reason or "", self.error)
            if isinstance(event, Ping):
                with contextlib.suppress(OSError):
                    self._send(event.response())
            elif isinstance(event, TextMessage):
                raise Closed(1003, "the server sent a text message", self.error)
            elif isinstance(event, BytesMessage):
                self.partial += event.data
                if event.message_finished:
                    channel, payload = decode(bytes(self.partial))
                    self.partial.clear()
                    if channel == ERROR:
                        self.error = parse_error(payload)
                    else:
                        frames.append((channel, payload))
        return frames

    def end(self, code: int = 1000) -> None:
        """Start the close handshake while another thread reads: that reader then sees the
        server's answer (Closed with `code`) and the end of the connection. A TLS connection is
        not half-closed: `SSLSocket.shutdown` drops the TLS layer, and the reader would then
        read the server's answer as raw ciphertext (the server closes after its answer)."""
        with contextlib.suppress(OSError):
            self._send(CloseConnection(code=code))
            if not isinstance(self.sock, ssl.SSLSocket):
                self.sock.shutdown(socket.SHUT_WR)

    def close(self, code: int = 1000) -> None:
        """End a session nobody else reads: the close handshake (two seconds at most for the
        server's answer), then the connection is dropped."""
        self.end(code)
        self.sock.settimeout(2)
        with contextlib.suppress(Closed):
            while True:
                self.receive()
