"""Where /metrics is served: at the API's own address by default, as the spec lists it
(`GET /metrics`, no authentication, under the base URL), or on a listener of its own where the
deployment asks for one (`--metrics-bind`, `apiserver.metricsBind`), and then nowhere else.

Why an operator may want a port of its own: the public port is what an Ingress or a load
balancer exposes, and /metrics names every route, pool and rate the installation serves;
Prometheus scrapes the pods directly, inside the cluster. Keeping it off the public port
altogether (a 404 there) leaves nothing for an Ingress rule to forget, and a scrape on its own
port is never shed with the API's requests. The shipped manifests and chart turn it on.

At the API's address /metrics is a Falcon route (lessor.apiserver.routes.app.MetricsResource,
authentication "none"): a scrape is counted, logged and shed as any anonymous request is, so a
flood of them costs no more than the worker's bound of requests in flight.

Why a second gunicorn bind and not a separate server: the workers already write their metrics
in prometheus multiprocess mode, so any worker answers for all of them, and gunicorn hands
connections from both sockets to the same workers; a second listener costs no process, no
thread in the gunicorn master (which forks the workers: a thread there could hold a lock across
the fork) and nothing to supervise. Which listener a connection came in on is read from the
connection's own socket (its local port), never from a header the client wrote. Both places
answer with the same exposition (lessor.apiserver.http.metrics.exposition): every worker's
counts.
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
    """Routes each request by the listener it arrived on: the metrics port, if there is one, to
    serve_metrics, every other to the API (whose /metrics route exists only without a metrics
    port)."""

    def __init__(self, api: Wsgi, metrics_port: int | None) -> None:
        self.api = api
        self.metrics_port = metrics_port

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if self.metrics_port is not None and local_port(environ) == self.metrics_port:
            return serve_metrics(environ, start_response)
        return self.api(environ, start_response)
