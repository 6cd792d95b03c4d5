"""`python -m lessor.apiserver`: the API under gunicorn with gevent workers.

gevent workers serve many slow clients (long polls, slow networks) per process; the app is
loaded in each worker after the fork, so nothing with sockets or threads crosses it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from lessor.apiserver.http import lifecycle
from lessor.apiserver.http.client_address import networks
from lessor.apiserver.routes.settings import Settings, parse_bind
from lessor.apiserver.state.admission_limit import DEFAULT_BURST, DEFAULT_RATE
from lessor.apiserver.state.replica_db import DIRECTORY_ENV, replica_directory
from lessor.config_file import apply_defaults
from lessor.logs import configure as configure_logging
from lessor.logs import gunicorn_config as gunicorn_logging
from lessor.protocol.ssh_signature import audience_of

log = logging.getLogger(__name__)


class RequestLinesOnly(Logger):  # type: ignore[misc]
    """gunicorn's logger without its access lines: each request is logged once, by lessor
    (lessor.apiserver.http.observe), with the route, the caller and the request id; gunicorn's
    line would repeat it with fewer fields, and cost every request its formatting."""

    def access(self, *_args: Any, **_kwargs: Any) -> None:
        return None


class Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, options: dict[str, Any]) -> None:
        self.settings = settings
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        # Imported here, in the worker, after gevent has patched the standard library: modules
        # that import ssl or sockets (the kubernetes client) must never load in the master.
        from lessor.apiserver.routes.app import create_app  # noqa: PLC0415

        return create_app(self.settings)


def _flush_spans(_server: Any, _worker: Any) -> None:
    """gunicorn's worker_exit: a worker's buffered spans are sent before it goes."""
    from lessor import tracing  # noqa: PLC0415 - in the worker, as create_app is

    tracing.shutdown()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lessor.apiserver", description=__doc__)
    parser.add_argument("--bind", default="0.0.0.0:8000")
    parser.add_argument(
        "--metrics-bind",
        metavar="HOST:PORT",
        help="a second listener serving GET /metrics only (Prometheus, inside the cluster), "
        "and then the --bind port serves no /metrics (404); default: none, /metrics is served "
        "at the API's address without credentials, as the spec lists it",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-connections", type=int, default=1000)
    parser.add_argument(
        "--timeout", type=int, default=60, help="seconds before a stuck worker is restarted"
    )
    parser.add_argument("--graceful-timeout", type=int, default=25)
    parser.add_argument("--namespace", default="lessor-system")
    parser.add_argument("--kubeconfig", help="default: in-cluster service account")
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="SO_REUSEPORT: several servers on one address, the kernel spreads connections",
    )
    parser.add_argument(
        "--sandbox-admission-rate",
        type=float,
        default=DEFAULT_RATE,
        help="Sandbox lease creations a second per principal and replica (token bucket refill)",
    )
    parser.add_argument(
        "--sandbox-admission-burst",
        type=int,
        default=DEFAULT_BURST,
        help="Sandbox lease creations a principal may make at once (token bucket size)",
    )
    parser.add_argument(
        "--sandbox-stream-idle-timeout",
        type=float,
        default=Settings.sandbox_stream_idle_timeout,
        help="seconds without data either way after which an attach or port-forward session ends",
    )
    parser.add_argument(
        "--sandbox-stream-max-duration",
        type=float,
        default=Settings.sandbox_stream_max_duration,
        help="seconds after which an attach or port-forward session ends regardless",
    )
    parser.add_argument(
        "--sandbox-stream-max-per-identity",
        type=int,
        default=Settings.sandbox_stream_max_per_identity,
        help="attach and port-forward sessions one identity may hold open on this server",
    )
    parser.add_argument(
        "--default-max-concurrent-leases",
        type=int,
        default=Settings.default_max_concurrent_leases,
        help="active leases of each kind an owner may hold where its rule sets no ceiling",
    )
    parser.add_argument(
        "--lease-admission-rate",
        type=float,
        default=Settings.lease_admission_rate,
        help="cluster lease creates a second per principal and server (token bucket refill)",
    )
    parser.add_argument(
        "--lease-admission-burst",
        type=int,
        default=Settings.lease_admission_burst,
        help="cluster lease creates one principal may send at once",
    )
    parser.add_argument(
        "--execution-admission-rate",
        type=float,
        default=Settings.execution_admission_rate,
        help="execution creates a second per principal and server (token bucket refill)",
    )
    parser.add_argument(
        "--execution-admission-burst",
        type=int,
        default=Settings.execution_admission_burst,
        help="execution creates one principal may send at once",
    )
    parser.add_argument(
        "--max-command-bytes-per-lease",
        type=int,
        default=Settings.max_command_bytes_per_lease,
        help="bytes of command and cwd one Sandbox lease may store, summed over its executions; "
        "beyond, new executions are refused (409 execution_limit_exhausted)",
    )
    parser.add_argument(
        "--login-rate",
        type=float,
        default=Settings.login_rate,
        help="logins (POST /v1/login) a second per principal and server (token bucket refill)",
    )
    parser.add_argument(
        "--login-burst",
        type=int,
        default=Settings.login_burst,
        help="logins one principal may send at once",
    )
    parser.add_argument(
        "--max-sessions-per-owner",
        type=int,
        default=Settings.max_sessions_per_owner,
        help="sessions one identity may hold; a login beyond ends the one that expires first",
    )
    parser.add_argument(
        "--max-waits-per-identity",
        type=int,
        default=Settings.max_waits_per_identity,
        help="lease GETs with waitSeconds and wait-mode executions one identity may hold "
        "waiting at once on this replica; beyond, they are answered at once",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=Settings.max_in_flight,
        help="requests one worker serves at once; beyond, 429 with Retry-After (overloaded)",
    )
    parser.add_argument(
        "--hide-pool-status",
        action=argparse.BooleanOptionalAction,
        default=Settings.hide_pool_status,
        help="list no pools in GET /v1/status to callers without credentials (default: every "
        "pool's name, ready, leased and creating, as the spec's anonymous rows; authenticated "
        "callers get their own pools either way)",
    )
    parser.add_argument(
        "--public-pool-status",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="deprecated: listing the pools to anyone is the default now, so this does "
        "nothing; --no-public-pool-status is read as --hide-pool-status",
    )
    parser.add_argument(
        "--ssh-audience",
        dest="ssh_audiences",
        action="append",
        default=[],
        metavar="URL",
        help="a URL clients reach this deployment by (repeatable); SSH request signatures must "
        "name one of them, and none is accepted without any",
    )
    parser.add_argument(
        "--trusted-proxy",
        dest="trusted_proxies",
        action="append",
        default=[],
        metavar="CIDR",
        help="a proxy in front (repeatable): its X-Forwarded-For names the client in the "
        "request log and audit records; any other peer's header is ignored",
    )
    parser.add_argument(
        "--ssh-signed-rate",
        type=float,
        default=Settings.ssh_signed_rate,
        help="SSH-signed requests a second per key and server (each records a nonce object)",
    )
    parser.add_argument(
        "--session-key-ttl",
        type=float,
        default=Settings.session_key_ttl,
        help="seconds a replica keeps the session signing key it read: how soon a rotation "
        "(the Secret lessor-session-key deleted) ends every session",
    )
    parser.add_argument(
        "--ssh-signed-burst",
        type=int,
        default=Settings.ssh_signed_burst,
        help="SSH-signed requests one key may send at once",
    )
    apply_defaults(parser, argv, "apiserver")
    return parser.parse_args(argv)


def _metrics_port(bind: str, metrics_bind: str | None) -> int | None:
    """The metrics listener's port: a TCP port other than the API's, since a request is told
    to be a scrape by the port it arrived on (lessor.apiserver.http.listeners)."""
    if not metrics_bind:
        return None
    try:
        _, port = parse_bind(metrics_bind)
    except ValueError as error:
        raise SystemExit(f"--metrics-bind: {error}") from None
    with contextlib.suppress(ValueError):
        if parse_bind(bind)[1] == port:
            raise SystemExit("--metrics-bind needs a port other than --bind's")
    return port


def _hide_pool_status(args: argparse.Namespace) -> bool:
    """--hide-pool-status, or what the deprecated --public-pool-status said: `true` asks for
    the default now (a no-op), `false` (hiding, the old default) is kept as hiding, so no
    configuration that asked for the pools to be kept from strangers starts telling them."""
    public: bool | None = args.public_pool_status
    hide: bool = args.hide_pool_status
    if public is None:
        return hide
    if public and hide:
        raise SystemExit(
            "--public-pool-status and --hide-pool-status contradict each other: drop "
            "--public-pool-status (apiserver.publicPoolStatus), which is deprecated"
        )
    if public:
        log.warning(
            "--public-pool-status (apiserver.publicPoolStatus) is deprecated and does nothing: "
            "GET /v1/status lists the pools to anyone by default (--hide-pool-status hides them)"
        )
        return hide
    log.warning(
        "--no-public-pool-status (apiserver.publicPoolStatus: false) is deprecated: read as "
        "--hide-pool-status (apiserver.hidePoolStatus: true); say that instead"
    )
    return True


# (rate, burst) flag pairs of the token buckets: a rate must be positive, a burst at least 1.
BUCKETS = (
    ("sandbox_admission_rate", "sandbox_admission_burst"),
    ("ssh_signed_rate", "ssh_signed_burst"),
    ("lease_admission_rate", "lease_admission_burst"),
    ("execution_admission_rate", "execution_admission_burst"),
    ("login_rate", "login_burst"),
)
# Flags that count something, each at least 1.
COUNTS = (
    "sandbox_stream_max_per_identity",
    "max_command_bytes_per_lease",
    "max_sessions_per_owner",
    "max_waits_per_identity",
    "max_in_flight",
    "default_max_concurrent_leases",
)


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_bounds(args: argparse.Namespace) -> None:
    """Stop at start, naming the flag, on a value no server could run with."""
    for rate, burst in BUCKETS:
        if getattr(args, rate) <= 0 or getattr(args, burst) < 1:
            raise SystemExit(f"{_flag(rate)} must be positive and the burst at least 1")
    if args.sandbox_stream_idle_timeout <= 0 or args.sandbox_stream_max_duration <= 0:
        raise SystemExit(
            "--sandbox-stream-idle-timeout and --sandbox-stream-max-duration must be positive"
        )
    if args.session_key_ttl <= 0:
        raise SystemExit("--session-key-ttl must be positive")
    for count in COUNTS:
        if getattr(args, count) < 1:
            raise SystemExit(f"{_flag(count)} must be at least 1")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    # Metrics of every worker are aggregated from files here (prometheus multiprocess mode).
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="lessor-metrics-"))
    # The workers of this server share the replica's counts: admission buckets, open sessions.
    os.environ.setdefault(DIRECTORY_ENV, replica_directory())
    _check_bounds(args)
    try:
        ssh_audiences = frozenset(audience_of(url) for url in args.ssh_audiences)
    except ValueError as error:
        raise SystemExit(f"--ssh-audience: {error}") from None
    if not ssh_audiences:
        log.warning(
            "no --ssh-audience (apiserver.sshAudiences): SSH request signatures are refused"
        )
    try:
        networks(args.trusted_proxies)
    except ValueError as error:
        raise SystemExit(f"--trusted-proxy: {error}") from None
    metrics_port = _metrics_port(args.bind, args.metrics_bind)
    hide_pool_status = _hide_pool_status(args)
    options = {
        "bind": [args.bind, args.metrics_bind] if args.metrics_bind else [args.bind],
        "workers": args.workers,
        "worker_class": "gevent",
        "worker_connections": args.worker_connections,
        "timeout": args.timeout,
        "graceful_timeout": args.graceful_timeout,
        "keepalive": 5,
        "logger_class": RequestLinesOnly,
        "logconfig_dict": gunicorn_logging(args.log_level, args.log_format),
        "loglevel": args.log_level,
        "limit_request_line": 8190,
        "limit_request_field_size": 16380,
        "reuse_port": args.reuse_port,
        "post_worker_init": lifecycle.watch,
        "worker_exit": _flush_spans,
    }
    settings = Settings(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        agent_sandbox_mode=args.agent_sandbox_mode,
        sandbox_admission_rate=args.sandbox_admission_rate,
        sandbox_admission_burst=args.sandbox_admission_burst,
        sandbox_stream_idle_timeout=args.sandbox_stream_idle_timeout,
        sandbox_stream_max_duration=args.sandbox_stream_max_duration,
        sandbox_stream_max_per_identity=args.sandbox_stream_max_per_identity,
        ssh_audiences=ssh_audiences,
        trusted_proxies=tuple(args.trusted_proxies),
        ssh_signed_rate=args.ssh_signed_rate,
        session_key_ttl=args.session_key_ttl,
        ssh_signed_burst=args.ssh_signed_burst,
        default_max_concurrent_leases=args.default_max_concurrent_leases,
        hide_pool_status=hide_pool_status,
        lease_admission_rate=args.lease_admission_rate,
        lease_admission_burst=args.lease_admission_burst,
        execution_admission_rate=args.execution_admission_rate,
        execution_admission_burst=args.execution_admission_burst,
        max_command_bytes_per_lease=args.max_command_bytes_per_lease,
        login_rate=args.login_rate,
        login_burst=args.login_burst,
        max_sessions_per_owner=args.max_sessions_per_owner,
        max_waits_per_identity=args.max_waits_per_identity,
        max_in_flight=args.max_in_flight,
        metrics_port=metrics_port,
    )
    Server(settings, options).run()
    return 0
