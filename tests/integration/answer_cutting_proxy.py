"""A TCP proxy in front of the real API server that loses one answer, as a network can.

The fault the CLI's recovery rules are for (spec 4.3, rules 3 and 4) is one the server never
produces by itself: this is the stand-in for the network between them, and nothing else is
simulated. Every request reaches the real server, which acts on it; for the first request that
matches, the proxy then either cuts the answer after its headers (`body`: the status and headers
arrive, the body does not) or drops it whole (`headers`: the connection closes before anything
arrives). One request per connection, as the CLI sends them (urllib asks for `Connection: close`).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import Literal

from tests.integration.tcp_relay import serve


@dataclass
class AnswerCuttingProxy:
    upstream: tuple[str, int]
    mode: Literal["body", "headers"]
    method: str
    path: str
    seen: int = 0  # matching requests forwarded to the server
    cut: bool = False
    _listener: socket.socket = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._listener = serve(self._relay)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._listener.close()

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream, timeout=60) as server:
            request = _read_request(client)
            line = request.split(b"\r\n", 1)[0].decode()
            method, target = line.split(" ")[:2]
            matches = method == self.method and target.split("?")[0] == self.path
            self.seen += matches
            server.sendall(request)
            answer = _read_all(server)
            if matches and not self.cut:
                self.cut = True
                if self.mode == "body":
                    head, _, body = answer.partition(b"\r\n\r\n")
                    client.sendall(head + b"\r\n\r\n" + body[: len(body) // 2])
                # Reset, not a clean close: the peer sees the connection fail.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            client.sendall(answer)


def _read_request(connection: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for header in head.split(b"\r\n")[1:]:
        name, _, value = header.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def _read_all(connection: socket.socket) -> bytes:
    data = b""
    while chunk := connection.recv(65536):
        data += chunk
    return data
