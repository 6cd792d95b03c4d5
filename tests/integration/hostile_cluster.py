"""A leased cluster's API server taken over by its tenant, answering every GET with one huge page.

A tenant with root in its cluster (a k3s lease) can stop the API server and listen on its port
with a program of its own; a real kube-apiserver never answers like this, so this is a stand-in
for the one fault the suite cannot produce otherwise, and nothing else is simulated: it listens
on the cluster's own port with the cluster's own serving certificate (the tenant holds its key),
so the operator reaches it with the lease's real kubeconfig, CA and client certificate. Every
answer is a 200 of `{"items":[{},{},...]}` of `size` bytes (about 20 million empty objects at
60 MiB: over a gigabyte once parsed by CPython), streamed without being held in memory here.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path

PREFIX, UNIT, SUFFIX = b'{"items":[', b"{},", b"{}]}"
CHUNK = UNIT * 21845  # 64 KiB less one byte
HEAD_LIMIT = 65536


class HostileApiServer:
    def __init__(self, port: int, certificate: Path, key: Path, size: int) -> None:
        self.size = size
        self.requests: list[str] = []  # "GET /path?query" of each request, in order
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(certificate, key)
        self._listener = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accepting thread
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(client,), daemon=True).start()

    def _answer(self, client: socket.socket) -> None:
        # A reader that stops reading (the operator at its bound) ends the answer with an
        # error here; that is the point, not a failure.
        with contextlib.suppress(OSError), self._tls.wrap_socket(client, server_side=True) as tls:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
                chunk = tls.recv(4096)
                if not chunk:
                    return
                head += chunk
            self.requests.append(" ".join(head.split(b"\r\n", 1)[0].decode().split(" ")[:2]))
            self._stream(tls)

    def _stream(self, tls: ssl.SSLSocket) -> None:
        units = (self.size - len(PREFIX) - len(SUFFIX)) // len(UNIT)
        length = len(PREFIX) + units * len(UNIT) + len(SUFFIX)
        tls.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % length
        )
        tls.sendall(PREFIX)
        per_chunk = len(CHUNK) // len(UNIT)
        for _ in range(units // per_chunk):
            tls.sendall(CHUNK)
        tls.sendall(UNIT * (units % per_chunk) + SUFFIX)
