"""A connection to an endpoint through the environment's proxy, for every request of the CLI: the
REST calls (lessor.cli.client) and the attach and port-forward sessions (lessor.cli.stream_client).

Where HTTPS_PROXY or HTTP_PROXY names a proxy for the endpoint (unless NO_PROXY covers it:
urllib's rules), the connection is a CONNECT tunnel through it, and the caller's TLS to the
endpoint runs inside, end to end. urllib's own tunnel speaks plaintext to an `https://` proxy,
its Basic credentials in the clear (review N13); this one speaks TLS to it.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import threading
import urllib.request
from urllib.parse import unquote, urlsplit

from lessor.cli.limits import TIMEOUT_SECONDS

READ = 65536


def connect(scheme: str, host: str, port: int, timeout: float = TIMEOUT_SECONDS) -> socket.socket:
    """A connection to the endpoint: direct, or a tunnel through the environment's proxy.

    An `https://` proxy is spoken to in TLS (the default trust store, which SSL_CERT_FILE and
    SSL_CERT_DIR can name; SNI and verification for the proxy's host), so the CONNECT and its
    Basic credentials never cross the network in the clear (review N13)."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return socket.create_connection((host, port), timeout=timeout)
    via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if via.scheme not in ("http", "https") or not via.hostname:
        # the scheme only: the URL may hold the proxy's password
        raise OSError(f"the proxy's scheme {via.scheme}:// is not http:// or https://")
    proxy_port = via.port or (443 if via.scheme == "https" else 80)
    sock = socket.create_connection((via.hostname, proxy_port), timeout=timeout)
    if via.scheme == "https":
        try:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=via.hostname)
        except OSError:
            sock.close()
            raise
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6: RFC 9110 7.2
    request = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"
    if via.username:
        login = f"{unquote(via.username)}:{unquote(via.password or '')}".encode()
        request += f"Proxy-Authorization: Basic {base64.b64encode(login).decode()}\r\n"
    answer = b""
    try:
        sock.sendall(f"{request}\r\n".encode())
        while b"\r\n\r\n" not in answer and len(answer) < READ:
            chunk = sock.recv(1)  # byte by byte: nothing after the answer may be consumed
            if not chunk:
                break
            answer += chunk
    except OSError:
        sock.close()
        raise
    status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    if status.split(" ")[1:2] != ["200"]:
        sock.close()
        raise OSError(f"the proxy {via.hostname}:{proxy_port} refused the tunnel: {status}")
    return _Relayed.through(sock, timeout) if isinstance(sock, ssl.SSLSocket) else sock


class _Relayed:
    """The tunnel through an https proxy as a plain socket, for the end-to-end TLS on top.

    That TLS runs inside the proxy's: an `ssl.SSLSocket` cannot be wrapped again (wrap_socket
    takes its file descriptor and would send the inner TLS raw, outside the outer one). So the
    tunnel's bytes are relayed to one end of a socketpair by two threads, and the caller gets the
    other end: a real socket, on which wrap_socket, timeouts, shutdown and close behave as on a
    direct connection, and the proxy's SSLSocket sees one reader and one writer, as a direct
    session's does. The proxy's connection is closed when the proxy ends the tunnel (the server
    closed the session), or when the server sends more after the session's end was closed."""

    @classmethod
    def through(cls, tunnel: ssl.SSLSocket, timeout: float) -> socket.socket:
        ours, theirs = socket.socketpair()
        ours.settimeout(timeout)
        tunnel.settimeout(None)  # a session may be quiet for hours; `ours` has the timeouts
        for source, sink in ((tunnel, theirs), (theirs, tunnel)):
            threading.Thread(
                target=cls._pump, args=(source, sink, tunnel, theirs), daemon=True
            ).start()
        return ours

    @staticmethod
    def _pump(
        source: socket.socket, sink: socket.socket, tunnel: ssl.SSLSocket, theirs: socket.socket
    ) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(READ):
                sink.sendall(chunk)
        if source is theirs:  # the session ended or half-closed: the proxy's answer may follow
            return
        with contextlib.suppress(OSError):
            theirs.shutdown(socket.SHUT_RDWR)  # the session's reader sees the end
        theirs.close()
        tunnel.close()
