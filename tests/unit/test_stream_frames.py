"""The attach and port-forward protocol without a cluster: the handshake answer, which client
frames are allowed, the server WebSocket's framing over a real socket pair (wsproto on both
ends), the query strings, and the CLI's LOCAL:REMOTE forms."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, Pong, TextMessage

from lessor.apiserver.http.bodies import AttachQuery, ForwardQuery, parse_query
from lessor.apiserver.http.errors import BadRequestError
from lessor.apiserver.sandboxes.websocket import (
    MAX_MESSAGE,
    HandshakeError,
    PeerClosed,
    WebSocket,
    handshake,
)
from lessor.cli.commands.streams import _ports
from lessor.cli.errors import CliError
from lessor.protocol.stream_frames import (
    PROTOCOL_ERROR,
    RESIZE,
    STDIN,
    STDOUT,
    SUBPROTOCOL,
    UNSUPPORTED,
    FrameError,
    client_frame,
    encode,
)

UPGRADE = {
    "HTTP_UPGRADE": "websocket",
    "HTTP_CONNECTION": "keep-alive, Upgrade",
    "HTTP_SEC_WEBSOCKET_VERSION": "13",
    "HTTP_SEC_WEBSOCKET_KEY": "dGhlIHNhbXBsZSBub25jZQ==",  # RFC 6455 section 1.3
}


def test_the_handshake_answer_is_rfc_6455s() -> None:
    answer = handshake(UPGRADE).decode()
    assert answer.startswith("HTTP/1.1 101 Switching Protocols\r\n")
    assert "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer
    assert "Sec-WebSocket-Protocol" not in answer
    offered = handshake({**UPGRADE, "HTTP_SEC_WEBSOCKET_PROTOCOL": f"other, {SUBPROTOCOL}"})
    assert f"Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n".encode() in offered
    assert answer.endswith("\r\n\r\n")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"HTTP_CONNECTION": "keep-alive"}, "Connection: Upgrade"),
        ({"HTTP_SEC_WEBSOCKET_VERSION": "8"}, "version 13"),
        ({"HTTP_SEC_WEBSOCKET_KEY": "not base64!"}, "16 bytes"),
        ({"HTTP_SEC_WEBSOCKET_KEY": "c2hvcnQ="}, "16 bytes"),
        ({"HTTP_SEC_WEBSOCKET_PROTOCOL": "v4.channel.k8s.io"}, SUBPROTOCOL),
    ],
)
def test_handshakes_this_server_does_not_speak_are_named(
    change: dict[str, str], message: str
) -> None:
    with pytest.raises(HandshakeError, match=message):
        handshake({**UPGRADE, **change})


def test_clients_send_stdin_and_valid_resizes_only() -> None:
    assert client_frame(encode(STDIN, b"ls\n")) == (STDIN, b"ls\n")
    assert client_frame(encode(RESIZE, b'{"width": 80, "height": 24}'))[0] == RESIZE
    for frame in (b"", encode(STDOUT, b"x"), encode(9), encode(RESIZE, b'{"width": 0}')):
        with pytest.raises(FrameError) as refused:
            client_frame(frame)
        assert refused.value.code == PROTOCOL_ERROR


@pytest.fixture
def pair() -> Iterator[tuple[WebSocket, socket.socket, Connection]]:
    server_end, client_end = socket.socketpair()
    client = Connection(ConnectionType.CLIENT)
    yield WebSocket(server_end), client_end, client
    server_end.close()
    client_end.close()


def test_messages_are_reassembled_and_pings_answered(
    pair: tuple[WebSocket, socket.socket, Connection],
) -> None:
    server, sock, client = pair
    sock.sendall(client.send(Message(data=b"\x00hel", message_finished=False)))
    sock.sendall(client.send(Ping(payload=b"are you there")))
    sock.sendall(client.send(Message(data=b"lo")))
    received: list[bytes] = []
    while not received:
        received += server.receive(1.0)
    assert received == [b"\x00hello"]
    client.receive_data(sock.recv(1024))
    assert [type(e) for e in client.events()] == [Pong]
    server.send(encode(STDOUT, b"out"))
    client.receive_data(sock.recv(1024))
    [event] = client.events()
    assert isinstance(event, BytesMessage) and event.data == b"\x01out"


def test_text_and_oversized_messages_are_refused(
    pair: tuple[WebSocket, socket.socket, Connection],
) -> None:
    server, sock, client = pair
    sock.sendall(client.send(TextMessage(data="hi")))
    with pytest.raises(FrameError) as text:
        server.receive(1.0)
    assert text.value.code == UNSUPPORTED
    big = bytes(MAX_MESSAGE + 1)
    sender = threading.Thread(target=sock.sendall, args=(client.send(Message(data=big)),))
    sender.start()
    with pytest.raises(FrameError) as oversized:
        while True:
            server.receive(1.0)
    assert oversized.value.code == 1009
    server.sock.close()
    sender.join()


def test_the_close_handshake_carries_code_and_reason(
    pair: tuple[WebSocket, socket.socket, Connection],
) -> None:
    server, sock, client = pair

    def answer() -> None:
        client.receive_data(sock.recv(1024))
        for event in client.events():
            if isinstance(event, CloseConnection):
                assert (event.code, event.reason) == (4001, "idle_timeout")
                sock.sendall(client.send(event.response()))

    replier = threading.Thread(target=answer)
    replier.start()
    server.close(4001, "idle_timeout")
    replier.join(60)
    assert sock.recv(1024) == b"", "the server dropped the connection after the handshake"


def test_a_client_close_ends_the_session(pair: tuple[WebSocket, socket.socket, Connection]) -> None:
    server, sock, client = pair
    sock.sendall(client.send(CloseConnection(code=1000)))
    with pytest.raises(PeerClosed):
        server.receive(1.0)
    client.receive_data(sock.recv(1024))
    assert [type(e) for e in client.events()] == [CloseConnection], "the close is answered"


def test_query_strings_are_validated() -> None:
    assert parse_query(AttachQuery, "container=main&tty=true") == AttachQuery(
        container="main", tty=True
    )
    assert parse_query(ForwardQuery, "port=8080").port == "8080"
    assert parse_query(ForwardQuery, "port=http-alt").port == "http-alt"
    for model, query in (
        (ForwardQuery, "port=0"),
        (ForwardQuery, "port=123456"),
        (ForwardQuery, "port=a%2Fb"),
        (ForwardQuery, ""),
        (AttachQuery, "container=Main"),
        (AttachQuery, "tty=1&tty=0"),
        (AttachQuery, "stdin=true"),
    ):
        with pytest.raises(BadRequestError):
            parse_query(model, query)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("8080:80", (8080, "80")),
        ("8080:http", (8080, "http")),
        (":http", (0, "http")),
        ("0:80", (0, "80")),
        ("5432", (5432, "5432")),
        ("http", (0, "http")),
    ],
)
def test_the_cli_reads_local_and_remote_ports(spec: str, expected: tuple[int, str]) -> None:
    assert _ports(spec) == expected


@pytest.mark.parametrize("spec", ["80:/etc", "x:80", "70000:80", "80:", "80:0"])
def test_the_cli_refuses_port_specs_it_cannot_use(spec: str) -> None:
    with pytest.raises(CliError) as refused:
        _ports(spec)
    assert refused.value.code == 2


def test_a_client_that_stops_reading_cannot_hold_the_session_open(
    pair: tuple[WebSocket, socket.socket, Connection],
) -> None:
    """The sender blocks on the full socket, holding the send lock; closing still ends the
    connection (without the goodbye it cannot send) and the sender learns the client is gone."""
    server, _sock, _client = pair
    outcome: list[BaseException] = []

    def flood() -> None:
        try:
            while True:
                server.send(encode(STDOUT, bytes(65536)))
        except PeerClosed as error:
            outcome.append(error)

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    sender.join(0.5)
    assert sender.is_alive(), "the sender is blocked: nobody reads"
    started = time.monotonic()
    server.close(4001, "idle_timeout")
    assert time.monotonic() - started < 10, "a hang guard: the close waits 2 s for the lock"
    sender.join(60)
    assert not sender.is_alive() and isinstance(outcome[0], PeerClosed)
