"""The API server's two listeners: the public API, and /metrics on a port of its own.

Why a port of its own: the public port is what an Ingress or a load balancer exposes, and
/metrics names every route, pool and rate the installation serves; Prometheus scrapes the pods
directly, inside the cluster. Keeping it off the public port altogether (a 404 there) leaves
nothing for an Ingress rule to forget.

Why a second gunicorn bind and not a separate server: the workers already write their metrics
in prometheus multiprocess mode, so any worker answers for all of them, and gunicorn hands
connections from both sockets to the same workers; a second listener costs no process, no
thread in the gunicorn master (which forks the workers: a thread there could hold a lock across
the fork) and nothing to supervise. Which listener a connection came in on is read from the
connection's own socket (its local port), never from a header the client wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lessor.apiserver.http import metrics

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
Wsgi = Callable[[Environ, StartResponse], Iterable[bytes]]


def local_port(environ: Environ) -> int | None:
    """The port this request's connection was accepted on (None outside gunicorn)."""
    sockname = getattr(environ.get("gunicorn.socket"), "getsockname", None)
    if sockname is None:
        return None
    try:
        address = sockname()
    except OSError:
        return None
    return int(address[1]) if isinstance(address, tuple) else None


def serve_metrics(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
    """The metrics listener: GET (or HEAD) /metrics, and nothing else."""
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: this port serves /metrics only\n"]
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
        return [b""]
    body, content_type = metrics.exposition()
    start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body] if environ["REQUEST_METHOD"] == "GET" else [b""]


class Listeners:
    """Routes each request by the listener it arrived on: the metrics port to serve_metrics,
    every other to the API (which has no /metrics route)."""

    def __init__(self, api: Wsgi, metrics_port: int | None) -> None:
        self.api = api
        self.metrics_port = metrics_port

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self.metrics_port is not None and local_port(environ) == self.metrics_port:
            return serve_metrics(environ, start_response)
        return self.api(environ, start_response)
