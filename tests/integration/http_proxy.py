"""A forward HTTP proxy of the kind corporate networks put between a CLI and its endpoint:
CONNECT tunnels (what a WebSocket or any TLS goes through) and plain requests with an
absolute URI (what urllib sends an http:// URL through HTTP_PROXY as). It records each
request's first line, so a test sees what went through it."""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

from tests.integration.tcp_relay import _pump, serve


class HttpProxy:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self._listener = serve(self._handle)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._listener.close()

    def _handle(self, client: socket.socket) -> None:
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(1)
                if not chunk:
                    break
                head += chunk
        first, _, rest = head.partition(b"\r\n")
        method, target, version = [*first.decode(errors="replace").split(" "), "", "", ""][:3]
        self.seen.append(f"{method} {target}")
        try:
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=60)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                upstream = socket.create_connection((parts.hostname, parts.port or 80), timeout=60)
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                upstream.sendall(f"{method} {path} {version}\r\n".encode() + rest)
        except OSError:
            client.close()
            return
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()
