"""Load shedding: a worker already serving `max_in_flight` requests refuses the next at once.

A gevent worker accepts every connection up to `worker_connections` (1000) and starts each
request; past what the Kubernetes client and the CPU keep up with, every request waits on all the
others and each gets slower, until clients time out on answers that were going to come. Spec
7.1's "server overloaded" 429 is the way out: beyond the bound, a request is answered at once,
before its caller is authenticated, with Retry-After, and costs nothing more. It is counted
only once its body has arrived (read, bounded in size, time and rate, by
lessor.apiserver.http.observe): a request whose body is still trickling in holds a connection,
bounded by gunicorn's `worker_connections`, not a slot of this bound, so a few slow clients
cannot make the worker refuse everyone (review N5).
The probes are never refused (a refused probe would take the replica out of service, or
restart it, for being busy). /metrics at the API's address can be: anyone may ask for it, and each
answer aggregates every worker's files; a deployment whose scrapes must get through an overload
gives /metrics a listener of its own (`--metrics-bind`, outside Falcon). A request
that waits (a lease's `waitSeconds`, a wait-mode execution) stops counting once admitted to
its wait (`set_aside`): it holds a greenlet, not the CPU the bound is there to protect, and
waits have bounds of their own (lessor.apiserver.state.held_requests).
The default (32 a worker) comes from bench/shedding.py: at 200 clients on one worker it served
386 requests a second at p50 67 ms, against 310 at p50 891 ms without a bound. Counted per
worker: one process, greenlets in one thread, so a plain counter is exact.
"""

from __future__ import annotations

import falcon

from lessor.apiserver.http import metrics
from lessor.apiserver.http.errors import TooManyRequestsError

EXEMPT = frozenset({"/healthz", "/readyz"})
RETRY_AFTER = "1"  # seconds: an overload is short or it is a capacity problem, not the client's


class Shed:
    def __init__(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    def process_request(self, req: falcon.Request, _resp: falcon.Response) -> None:
        if req.path in EXEMPT:
            return
        if self.in_flight >= self.max_in_flight:
            metrics.SHED.inc()
            raise TooManyRequestsError(
                "the server is overloaded; retry shortly",
                reason="overloaded",
                headers={"Retry-After": RETRY_AFTER},
            )
        self.in_flight += 1
        req.context.counted = True
        req.context.shed = self

    def process_response(
        self, req: falcon.Request, _resp: falcon.Response, _resource: object, _ok: bool
    ) -> None:
        if getattr(req.context, "counted", False):
            req.context.counted = False
            self.in_flight -= 1


def set_aside(req: falcon.Request) -> None:
    """Stop counting this admitted request against its worker's bound: it is about to wait."""
    if getattr(req.context, "counted", False):
        req.context.counted = False
        req.context.shed.in_flight -= 1
