"""The operator's settings: the parsed command line (and configuration file) as one typed, frozen
value, so that each controller takes what it reads by name instead of a whole argparse Namespace.

Flags and their defaults are declared once, in lessor.operator.main.parse_args; this only gives
their values types and resolves the ones that depend on others (the sandbox namespace, a zero
retention meaning "forever").
"""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from pathlib import Path

from lessor.logs import Format


@dataclass(frozen=True)
class Settings:
    namespace: str = "lessor-system"
    # Where agent-sandbox objects and sandbox pods live (lessor.operator.ownership).
    sandbox_namespace: str = "lessor-system"
    kubeconfig: str | None = None
    http_host: str = "0.0.0.0"  # noqa: S104 - probes come from the kubelet
    http_port: int = 8080
    # None: a single replica without leader election (`--no-leader-election`).
    leader_election_id: str | None = "lessor-operator"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    local_backend_dir: Path | None = None
    # How old a `local` cluster's directory must be before it counts as an orphan: its
    # ClusterInstance may be being created (lessor.operator.local_orphans).
    local_orphan_grace: datetime.timedelta = datetime.timedelta(minutes=2)
    workers: int = 4
    teardown_grace: datetime.timedelta = datetime.timedelta(minutes=2)
    start_timeout: datetime.timedelta = datetime.timedelta(minutes=5)
    # The helm binary chart addons are rendered with; None: found (lessor.operator.addons.charts).
    helm: str | None = None
    # None: ended leases are kept forever (`--lease-retention 0`).
    lease_retention: datetime.timedelta | None = datetime.timedelta(days=1)
    test_backends: bool = False
    # k3s makes its tenants root on their node: served only where an administrator said so.
    allow_privileged_backends: bool = False
    agent_sandbox_mode: str = "disabled"  # or "external": the sandbox controllers run
    log_level: str = "info"  # lessor.logs.LEVELS
    log_format: Format = "text"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        return cls(
            namespace=args.namespace,
            sandbox_namespace=args.sandbox_namespace or args.namespace,
            kubeconfig=args.kubeconfig,
            http_host=args.http_host,
            http_port=args.http_port,
            leader_election_id=None if args.no_leader_election else args.leader_election_id,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
            local_backend_dir=args.local_backend_dir,
            local_orphan_grace=datetime.timedelta(seconds=args.local_orphan_grace),
            workers=args.workers,
            teardown_grace=datetime.timedelta(seconds=args.teardown_grace),
            start_timeout=datetime.timedelta(seconds=args.start_timeout),
            helm=args.helm,
            lease_retention=(
                datetime.timedelta(seconds=args.lease_retention) if args.lease_retention else None
            ),
            test_backends=args.test_backends,
            allow_privileged_backends=args.allow_privileged_backends,
            agent_sandbox_mode=args.agent_sandbox_mode,
            log_level="debug" if args.verbose else args.log_level,
            log_format=args.log_format,
        )
