"""What wraps every request before and after its route: the body read once and bounded, the
request counted, timed and logged under a request id, and every failure answered in the
service's error shape (never a stack trace, never a 500 for a client's mistake)."""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

import falcon
import gevent
import urllib3
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.http import audit, metrics, request_spans
from lessor.apiserver.http.client_address import FORWARDED_FOR, ClientAddress
from lessor.apiserver.http.errors import (
    HttpError,
    PayloadTooLargeError,
    RequestTimeoutError,
    UnavailableError,
)
from lessor.protocol.json_object import Json
from lessor.protocol.responses import Error, serialized

log = logging.getLogger(__name__)

BODY_LIMIT = 1 << 20  # bytes
BODY_TIMEOUT = 10.0  # seconds for the whole body at most, however it trickles in
# A body must also arrive at a minimum rate: BODY_GRACE seconds, plus one for every
# MIN_BODY_RATE bytes announced. A client's JSON of a few KiB is sent in one go; a body that
# trickles is an attack on the connections (review N5), and is given up in about 2 s, not 10.
BODY_GRACE = 2.0
MIN_BODY_RATE = 16 * 1024  # bytes a second
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A request id a client or a proxy in front sent is kept (it ties their logs to ours) when it
# is one plain bounded word; anything else is replaced, never logged.
REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
# A path is the client's bytes, up to gunicorn's 8 KiB request line: logged, it is cut here.
PATH_LOGGED = 512


def request_id(req: falcon.Request) -> str:
    """This request's id (made on first use), in its log line, its answer's X-Request-Id and
    every log line about it, so that a user's report finds the server's side."""
    found: str | None = getattr(req.context, "request_id", None)
    if found is None:
        sent = req.get_header(REQUEST_ID_HEADER) or ""
        found = sent if REQUEST_ID.match(sent) else uuid.uuid4().hex
        req.context.request_id = found
    return found


def client(req: falcon.Request) -> str | None:
    """The client's address Observe found (lessor.apiserver.http.client_address)."""
    found: str | None = getattr(req.context, "client", None)
    return found


class Observe:
    """Reads the body once (SSH signatures cover it), and counts, times and logs every request:
    one line each, with its id, route, status, duration, the client's address and the caller
    (never a credential); and the audit record of what changes something, of the reads that
    hand out access (a kubeconfig, a diagnostics URL), and of every refused credential."""

    def __init__(self, clients: ClientAddress) -> None:
        self.clients = clients

    def process_request(self, req: falcon.Request, _resp: falcon.Response) -> None:
        req.context.started = time.perf_counter()
        request_spans.start(req)
        request_id(req)
        req.context.client = self.clients.of(req.remote_addr, req.get_header(FORWARDED_FOR))
        req.context.body = _read_body(req)

    def process_resource(
        self, req: falcon.Request, _resp: falcon.Response, _resource: object, params: Json
    ) -> None:
        req.context.params = params  # which lease or execution, for the audit record

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, _resource: object, _ok: bool
    ) -> None:
        # Bounded labels only: any word can be a method, and every label value is a series.
        route = req.uri_template or "unmatched"
        if getattr(req.context, "waits", False):
            route += "?waitSeconds"  # a long poll's duration is the lease's, not the server's
        method = req.method if req.method in METHODS else "other"
        metrics.REQUESTS.labels(route, method, str(resp.status_code)).inc()
        started = getattr(req.context, "started", None)
        duration = time.perf_counter() - started if started is not None else None
        if duration is not None:
            metrics.LATENCY.labels(route, method).observe(duration)
        request_spans.end(req, resp, route, method)
        resp.set_header(REQUEST_ID_HEADER, request_id(req))
        caller = getattr(req.context, "principal", None)
        # Probes and scrapes come every few seconds from every kubelet and Prometheus: answered
        # well, they are not worth a line at INFO.
        quiet = route in PROBES and resp.status_code < 400
        path = req.path if len(req.path) <= PATH_LOGGED else req.path[:PATH_LOGGED] + "..."
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "%s %s %d",
            req.method[:16],
            path,
            resp.status_code,
            extra={
                "request_id": request_id(req),
                "method": req.method[:16],
                "route": route,
                "path": path,
                "status": resp.status_code,
                "duration_ms": round(duration * 1000, 1) if duration is not None else None,
                "identity": caller.owner if caller else None,
                "auth": caller.method if caller else None,
                "client": client(req),
                "user_agent": (req.user_agent or "")[:200] or None,  # which clients, versions
            },
        )
        action = audit.action_of(req.method, route, resp.status_code, resp.media)
        if action is not None:
            audit.of_request(
                action,
                caller=caller,
                status=resp.status_code,
                params=getattr(req.context, "params", None) or {},
                answer=resp.media,
                request_id=request_id(req),
                client=client(req),
                session_id=getattr(req.context, "session_id", None),
            )


class _BodyTimeoutError(Exception):
    pass


def _read_body(req: falcon.Request) -> bytes:
    """The request's body, read before anyone is authenticated (an SSH signature covers it), so
    bounded for anyone: at most BODY_LIMIT bytes (413 beyond, unread), at the minimum rate and
    within BODY_TIMEOUT (408, and the connection closed). A body announced and never sent used
    to hold its connection for ever, and enough of them every connection of the workers. It is
    read before the request counts against its worker's bound (lessor.apiserver.http.shedding),
    so bodies still arriving cannot make the worker refuse everyone else."""
    length = req.content_length
    if not length:
        return b""
    if length > BODY_LIMIT:
        raise PayloadTooLargeError(
            f"a request body is at most {BODY_LIMIT} bytes", headers={"Connection": "close"}
        )
    deadline = min(BODY_TIMEOUT, BODY_GRACE + length / MIN_BODY_RATE)
    try:
        with gevent.Timeout(deadline, _BodyTimeoutError):
            body: bytes = req.bounded_stream.read(length)
    except _BodyTimeoutError:
        raise RequestTimeoutError(
            f"the request body of {length} bytes did not arrive within {deadline:.1f}s "
            f"({BODY_GRACE:g}s, and at least {MIN_BODY_RATE} bytes a second)",
            headers={"Connection": "close"},
        ) from None
    return body


def _send(resp: falcon.Response, error: HttpError) -> None:
    resp.status = error.status
    resp.media = serialized(error.body())
    for name, value in error.headers.items():
        resp.set_header(name, value)


def _on_http_error(req: falcon.Request, resp: falcon.Response, error: HttpError, _p: Any) -> None:
    _send(resp, error)


def _on_falcon_error(
    req: falcon.Request, resp: falcon.Response, error: falcon.HTTPError, _p: Any
) -> None:
    """Falcon's own refusals (no such route, method not allowed) in the service's error shape."""
    title = str(error.title or "error")
    body = Error(error=(title.partition(" ")[2] if title[:3].isdigit() else title).lower())
    if error.description:
        body.detail = error.description
    if error.status_code == 404:
        body.reason = "not_found"
        body.code = "not_found"
    resp.status = error.status
    resp.media = serialized(body)
    resp.set_headers(error.headers or {})


def _on_kube_error(
    req: falcon.Request, resp: falcon.Response, error: ApiException, _p: Any
) -> None:
    log.warning(
        "kubernetes API error on %s %s: %s %s",
        req.method,
        req.path,
        error.status,
        error.reason,
        extra={"request_id": request_id(req)},
    )
    _send(resp, UnavailableError("the cluster API did not answer as expected; retry"))


def _on_kube_unreachable(
    req: falcon.Request, resp: falcon.Response, error: urllib3.exceptions.HTTPError, _p: Any
) -> None:
    """kube-apiserver refused or dropped the connection (a restart, a network fault): the
    client's retry is the remedy, so a 503 with Retry-After, never a 500 (the chaos soak,
    bench/chaos.py, met this while restarting kube-apiserver)."""
    log.warning(
        "kubernetes API unreachable on %s %s: %s",
        req.method,
        req.path,
        type(error).__name__,
        extra={"request_id": request_id(req)},
    )
    _send(resp, UnavailableError("the cluster API did not answer; retry"))


def _on_unexpected(req: falcon.Request, resp: falcon.Response, error: Exception, _p: Any) -> None:
    if isinstance(error, falcon.HTTPError | HttpError):
        raise error
    log.exception(
        "unexpected error on %s %s", req.method, req.path, extra={"request_id": request_id(req)}
    )
    resp.status = 500
    resp.media = serialized(Error(error="internal error", detail="the failure was logged"))


def add_error_handlers(app: falcon.App[falcon.Request, falcon.Response]) -> None:
    """Falcon picks the handler of the most specific class the error is an instance of."""
    app.add_error_handler(Exception, _on_unexpected)
    app.add_error_handler(falcon.HTTPError, _on_falcon_error)
    app.add_error_handler(ApiException, _on_kube_error)
    app.add_error_handler(urllib3.exceptions.HTTPError, _on_kube_unreachable)
    app.add_error_handler(HttpError, _on_http_error)
