"""Loopback ports held for a process that will listen on them a moment later.

etcd, kube-apiserver and the other components take their port on the command line and cannot
report one the kernel chose, so the port is picked before they start. Picking a free port and
letting it go ("free a moment ago") races with everything else on the machine: another test
session starting its own control plane, or any outgoing connection, whose source port comes
from the same ephemeral range. Under load that race was lost (issue 24).

A reservation closes it. The port stays bound here, with SO_REUSEADDR and without listening,
until the component listens on it. Linux then lets a listener that also sets SO_REUSEADDR
(every Go server, gunicorn, Python's socketserver and asyncio servers do) bind and listen on
the port, while any other bind to port 0 skips it and no outgoing connection uses it as its
source. The reservation is released once the component listens: its own socket holds the port
from then on.
"""

from __future__ import annotations

import socket
from types import TracebackType

LOOPBACK = "127.0.0.1"


class PortReservation:
    """Ports reserved on 127.0.0.1 until `release` (or the end of a `with` block)."""

    def __init__(self) -> None:
        self._held: dict[int, socket.socket] = {}

    def take(self) -> int:
        """A port nobody else will be handed until it is released."""
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind((LOOPBACK, 0))
        except OSError:
            holder.close()
            raise
        port: int = holder.getsockname()[1]
        self._held[port] = holder
        return port

    def release(self, *ports: int) -> None:
        """Let these ports go (all of them when none is named)."""
        for port in ports or tuple(self._held):
            holder = self._held.pop(port, None)
            if holder is not None:
                holder.close()

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def reserved_port() -> tuple[int, PortReservation]:
    """One reserved port and the reservation to release once its listener is up."""
    reservation = PortReservation()
    return reservation.take(), reservation
