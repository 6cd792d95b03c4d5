"""The API server's settings: light to import, so the gunicorn master loads nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from lessor.apiserver.state.admission_limit import DEFAULT_BURST, DEFAULT_RATE
from lessor.apiserver.state.session_slots import DEFAULT_PER_IDENTITY


@dataclass(frozen=True)
class Settings:
    namespace: str = "lessor-system"
    kubeconfig: str | None = None
    agent_sandbox_mode: str = "disabled"  # or "external": see lessor.apiserver.sandboxes.gate
    # Per principal and replica (lessor.apiserver.state.admission_limit): tokens a second, and
    # burst.
    sandbox_admission_rate: float = DEFAULT_RATE
    sandbox_admission_burst: int = DEFAULT_BURST
    # The same for cluster lease creation.
    lease_admission_rate: float = 5.0
    lease_admission_burst: int = 30
    # The same for execution creation: each one stores a Secret and a SandboxExecution.
    execution_admission_rate: float = 1.0
    execution_admission_burst: int = 20
    # Logins a second per principal and replica, and burst: each one writes a session record.
    login_rate: float = 0.2
    login_burst: int = 10
    # Session records one owner may hold: a login beyond ends the one that expires first
    # (lessor.apiserver.auth.sessions, whose DEFAULT_MAX_PER_OWNER this is).
    max_sessions_per_owner: int = 32
    # Bytes of command and cwd one Sandbox lease may store over its lifetime, summed over its
    # executions (lessor.apiserver.sandboxes.executions): 64 commands of the largest size.
    max_command_bytes_per_lease: int = 1024 * 1024
    # Waiting requests (lease GETs with waitSeconds, wait-mode executions) one owner may hold
    # at once on a replica; beyond, they are answered at once
    # (lessor.apiserver.state.held_requests).
    max_waits_per_identity: int = 8
    # Requests one worker serves at once (health and metrics aside): beyond, 429 at once with
    # Retry-After (lessor.apiserver.http.shedding).
    max_in_flight: int = 32
    # Attach and port-forward sessions (lessor.apiserver.sandboxes.stream_bridge), in seconds:
    # the longest time without data either way, and the longest session.
    sandbox_stream_idle_timeout: float = 900
    sandbox_stream_max_duration: float = 4 * 3600
    # Open sessions per identity and replica (lessor.apiserver.state.session_slots).
    sandbox_stream_max_per_identity: int = DEFAULT_PER_IDENTITY
    # The URLs clients reach this deployment by, normalized (lessor.protocol.ssh_signature):
    # the only audiences an SSH request signature may name. None: SSH signatures are refused.
    ssh_audiences: frozenset[str] = frozenset()
    # SSH-signed requests a second per key and replica, and burst: each one's nonce is an object
    # in the cluster (lessor.apiserver.auth.nonces), so a key's holder must not make them unbounded.
    ssh_signed_rate: float = 5.0
    # Seconds a replica keeps the session signing key it read: how soon deleting its Secret (a
    # rotation) ends every session on every replica.
    session_key_ttl: float = 60.0
    ssh_signed_burst: int = 100
    # Active leases of each kind an owner may hold where its rule or grant sets no ceiling.
    default_max_concurrent_leases: int = 20
    # CIDRs of the proxies in front (an Ingress controller's pods, a load balancer's range)
    # whose X-Forwarded-For names the client in logs and audit records
    # (lessor.apiserver.http.client_address); from any other peer the header is ignored.
    trusted_proxies: tuple[str, ...] = ()
    # Whether GET /v1/status keeps its pool rows (names and counts) from a caller without
    # credentials; by default they are listed, as the spec's anonymous rows (4.6).
    hide_pool_status: bool = False
    # The port of the second listener, which serves /metrics and nothing else (None: no
    # metrics listener, /metrics is served at the API's address); lessor.apiserver.http.listeners.
    metrics_port: int | None = None


def parse_bind(value: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets) of a TCP listener; ValueError otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port")
    return host, int(port)
