"""Bounds on requests that wait (review N6): a lease GET with `waitSeconds` (up to 30 s) and a
wait-mode execution (up to its command's timeout, an hour at most).

A waiting request is set aside from its worker's bound of requests in flight
(lessor.apiserver.http.shedding): it holds a greenlet and a connection, not the CPU. So it has
bounds of its own, or a tenant could hold thousands, and buffer megabytes of output in each:
- per owner and replica, `--max-waits-per-identity` waits of either kind at once (counted in an
  SQLite file of the replica, as attach sessions are: lessor.apiserver.state.session_slots,
  whose rows a killed worker cannot leak);
- per worker, PER_WORKER of each kind.
A request over either bound is not refused: it is answered at once, as if its wait were over
(a lease as it is now; a wait-mode execution 202, to be polled, as when its outcome comes too
late), and counts against the worker's bound of requests in flight like any other. Clients
already handle both answers; the CLI's polls back off.

A client that closes its connection while it waits (`client_gone`) ends the wait at the next
look, instead of holding its slot until the wait's end.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import falcon

from lessor.apiserver.http import metrics
from lessor.apiserver.state.session_slots import SessionSlots

Kind = Literal["lease", "execution"]
# Waits one worker holds at once, by kind: a lease wait costs a greenlet and a watch waiter; a
# wait-mode execution keeps up to 1 MiB of each output stream, about 6 MiB as bytes, text and
# JSON (lessor.apiserver.sandboxes.executions), so 16 of them are the worker's worst case of
# about 100 MiB, well under the pod's 1 GiB limit.
PER_WORKER: dict[Kind, int] = {"lease": 256, "execution": 16}


class HeldRequests:
    def __init__(self, per_identity: int, directory: Path | None = None) -> None:
        self.slots = SessionSlots(per_identity, directory, file="waits.sqlite3")
        self.held: Counter[Kind] = Counter()

    @contextlib.contextmanager
    def hold(self, kind: Kind, owner: str) -> Iterator[bool]:
        """True while this request may wait; False: answer at once."""
        if self.held[kind] >= PER_WORKER[kind]:
            metrics.WAITS_DECLINED.labels(kind, "worker").inc()
            yield False
            return
        slot = self.slots.claim(owner)
        if slot is None:
            metrics.WAITS_DECLINED.labels(kind, "identity").inc()
            yield False
            return
        self.held[kind] += 1
        try:
            yield True
        finally:
            self.held[kind] -= 1
            self.slots.release(slot)


def client_gone(req: falcon.Request, kind: Kind) -> Callable[[], bool]:
    """Whether the client of `req` has closed its connection: its socket reads as closed. Bytes
    waiting on it (a pipelined request) are not a close. Without gunicorn's socket (another
    server), never."""
    sock: socket.socket | None = req.env.get("gunicorn.socket")

    def gone() -> bool:
        if sock is None:
            return False
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            closed = bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):  # ValueError: a socket already closed here
            closed = True
        if closed:
            metrics.WAITS_ABANDONED.labels(kind).inc()
        return closed

    return gone
