"""The server end of a WebSocket on the socket gunicorn hands over (`environ["gunicorn.socket"]`).

gunicorn has already read the HTTP request, so the handshake is checked from the WSGI environ
and the 101 answer is written here; from then on wsproto frames the bytes. Only what the stream
frames need is kept: binary messages (reassembled, bounded), pings answered, a close handshake.
Writes are serialized by a lock, because the two directions of a session run in two greenlets.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import socket
import threading
import time
from typing import Any

from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Message, Ping, TextMessage
from wsproto.utilities import LocalProtocolError, RemoteProtocolError, generate_accept_token

from lessor.protocol.stream_frames import PROTOCOL_ERROR, SUBPROTOCOL, UNSUPPORTED, FrameError

MAX_MESSAGE = 1 << 20  # a client message larger than this closes the session (1009)
TOO_BIG = 1009
CLOSE_WAIT = 2.0  # seconds for the close handshake


class HandshakeError(ValueError):
    """The request is not a WebSocket upgrade this server accepts (answered 400)."""


class PeerClosed(Exception):  # noqa: N818 - an ending, not a failure
    """The client closed the session."""


def is_upgrade(environ: dict[str, Any]) -> bool:
    return "websocket" in environ.get("HTTP_UPGRADE", "").lower()


def handshake(environ: dict[str, Any]) -> bytes:
    """The 101 answer to a valid upgrade request, or HandshakeError saying what is wrong."""
    tokens = {t.strip().lower() for t in environ.get("HTTP_CONNECTION", "").split(",")}
    if "upgrade" not in tokens:
        raise HandshakeError("a WebSocket upgrade needs Connection: Upgrade")
    if environ.get("HTTP_SEC_WEBSOCKET_VERSION") != "13":
        raise HandshakeError("only WebSocket version 13 is supported")
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "")
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            raise HandshakeError("Sec-WebSocket-Key must be 16 bytes in base64")
    except binascii.Error:
        raise HandshakeError("Sec-WebSocket-Key must be 16 bytes in base64") from None
    headers = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {generate_accept_token(key.encode()).decode()}",
    ]
    offered = environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL")
    if offered is not None:
        if SUBPROTOCOL not in {p.strip() for p in offered.split(",")}:
            raise HandshakeError(f"the only subprotocol served is {SUBPROTOCOL}")
        headers.append(f"Sec-WebSocket-Protocol: {SUBPROTOCOL}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode()


class WebSocket:
    """Reads wait with a timeout on a second handle of the socket (`reader`): a timeout belongs
    to a handle, so a send in the other direction is never cut short by a receive's. Sends have
    none: a client that stops reading holds its sender until the session is closed, which then
    drops the connection. (gunicorn here serves plain TCP; a TLS socket could not be dup'ed.)"""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(None)
        self.reader = sock.dup()  # a handle for timed reads: timeouts belong to a handle
        self.connection = Connection(ConnectionType.SERVER)
        self.lock = threading.Lock()
        self.partial = bytearray()

    def accept(self, answer: bytes) -> None:
        self.sock.sendall(answer)

    def send(self, message: bytes) -> None:
        self._send(Message(data=message))

    def _send(self, event: Event) -> None:
        with self.lock:
            if self.connection.state is not ConnectionState.OPEN:
                raise PeerClosed
            try:
                self.sock.sendall(self.connection.send(event))
            except OSError as error:  # the client went away
                raise PeerClosed from error

    def receive(self, timeout: float) -> list[bytes]:
        """The complete messages that arrive within `timeout` (maybe none). PeerClosed once the
        client closed; FrameError for what the protocol forbids: text messages, oversized
        messages, malformed frames."""
        self.reader.settimeout(timeout)
        try:
            data = self.reader.recv(65536)
        except TimeoutError:
            return []
        except OSError as error:
            raise PeerClosed from error
        if not data:
            raise PeerClosed
        try:
            self.connection.receive_data(data)
            return self._messages()
        except RemoteProtocolError as error:
            raise FrameError(str(error), PROTOCOL_ERROR) from error

    def _messages(self) -> list[bytes]:
        complete: list[bytes] = []
        for event in self.connection.events():
            if isinstance(event, CloseConnection):
                with contextlib.suppress(LocalProtocolError, OSError), self.lock:
                    self.sock.sendall(self.connection.send(event.response()))
                raise PeerClosed
            if isinstance(event, Ping):
                with contextlib.suppress(LocalProtocolError, OSError), self.lock:
                    self.sock.sendall(self.connection.send(event.response()))
            elif isinstance(event, TextMessage):
                raise FrameError("messages are binary frames", UNSUPPORTED)
            elif isinstance(event, BytesMessage):
                self.partial += event.data
                if len(self.partial) > MAX_MESSAGE:
                    raise FrameError(f"a message is at most {MAX_MESSAGE} bytes", TOO_BIG)
                if event.message_finished:
                    complete.append(bytes(self.partial))
                    self.partial.clear()
        return complete

    def close(self, code: int, reason: str, last: bytes | None = None) -> None:
        """Send `last` (an error frame) and a close frame when still open, wait briefly for the
        client's close, and drop the connection. A sender stuck on a client that stopped reading
        holds the lock: then the connection is dropped without the goodbye."""
        if self.lock.acquire(timeout=CLOSE_WAIT):
            try:
                if self.connection.state is ConnectionState.OPEN:
                    with contextlib.suppress(LocalProtocolError, OSError):
                        if last is not None:
                            self.sock.sendall(self.connection.send(Message(data=last)))
                        self.sock.sendall(
                            self.connection.send(CloseConnection(code=code, reason=reason))
                        )
            finally:
                self.lock.release()
            with contextlib.suppress(LocalProtocolError, OSError):
                self._await_close_reply()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.reader.close()
        self.sock.close()

    def _await_close_reply(self) -> None:
        """Up to CLOSE_WAIT for the client's close frame, so that it reads the code and reason
        before the connection drops (RFC 6455 7.1.1: the server closes the TCP connection)."""
        deadline = time.monotonic() + CLOSE_WAIT
        while self.connection.state is not ConnectionState.CLOSED:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.reader.settimeout(left)
            data = self.reader.recv(65536)
            if not data:
                return
            self.connection.receive_data(data)
            for _ in self.connection.events():
                pass
