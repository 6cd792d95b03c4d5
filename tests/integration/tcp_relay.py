"""A TCP relay in front of the real kube-apiserver that can be cut, as a network or a restart
can: the one stand-in for a kube-apiserver that refuses connections, which the shared control
plane of the suite cannot be made to do without breaking every other test. Bytes pass through
unchanged (TLS included); `cut()` closes every connection and the listener, so the next
connection is refused; `stall()` holds every answer until `flow()`, as a kube-apiserver that
has stopped answering does (a request through it stays in flight)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


def serve(handle: Callable[[socket.socket], None]) -> socket.socket:
    """A loopback listener whose every connection `handle` takes in a thread of its own, until
    the listener is closed: what each stand-in server of these tests is built on."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


@dataclass
class TcpRelay:
    upstream: tuple[str, int]
    _listener: socket.socket = field(init=False, repr=False)
    _open: list[socket.socket] = field(default_factory=list, repr=False)
    _cut: bool = False
    _flowing: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        self._flowing.set()
        self._listener = serve(self._relay)

    def stall(self) -> None:
        self._flowing.clear()

    def flow(self) -> None:
        self._flowing.set()

    @property
    def port(self) -> int:
        port: int = self._listener.getsockname()[1]
        return port

    def cut(self) -> None:
        self._cut = True
        with contextlib.suppress(OSError):  # wakes the accepting thread
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for connection in list(self._open):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def _relay(self, client: socket.socket) -> None:
        if self._cut:
            client.close()
            return
        server = socket.create_connection(self.upstream, timeout=60)
        self._open += [client, server]
        threading.Thread(target=_pump, args=(client, server), daemon=True).start()
        threading.Thread(
            target=_pump, args=(server, client, self._flowing.wait), daemon=True
        ).start()


def _pump(
    source: socket.socket, target: socket.socket, gate: Callable[[], object] = lambda: None
) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            gate()
            target.sendall(chunk)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
