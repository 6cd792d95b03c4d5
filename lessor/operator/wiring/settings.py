"""The operator's settings: the parsed command line (and configuration file) as one typed, frozen
value, so that each controller takes what it reads by name instead of a whole argparse Namespace.

Each default is declared once, here: lessor.operator.main.parse_args gives each flag
`default=Settings.<field>` (a duration as its seconds), as the API server does with its own
settings. The options both components share (`--agent-sandbox-mode`, `--log-*`) take theirs from
lessor.config_file.apply_defaults, so they have none here. `from_args` copies each flag into the
field of its name, and resolves the ones that depend on others (the sandbox namespace,
`--no-leader-election`, a zero retention meaning "forever", `--verbose`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from lessor.logs import Format


@dataclass(frozen=True)
class Settings:
    namespace: str = "lessor-system"
    # Where agent-sandbox objects and sandbox pods live (lessor.operator.core.ownership); its
    # flag unset: the pools' namespace.
    sandbox_namespace: str = namespace
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
    # ClusterInstance may be being created (lessor.operator.cluster.local_orphans).
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
    _: KW_ONLY
    agent_sandbox_mode: str  # "disabled", or "external": the sandbox controllers run
    log_level: str  # lessor.logs.LEVELS
    log_format: Format

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        """Each flag into the field of its name; a duration's flag is in seconds."""
        values: dict[str, Any] = {}
        for setting in dataclasses.fields(cls):
            value = getattr(args, setting.name)
            if isinstance(setting.default, datetime.timedelta):
                value = datetime.timedelta(seconds=value)
            values[setting.name] = value
        return cls(
            **{
                **values,
                "sandbox_namespace": args.sandbox_namespace or args.namespace,
                "leader_election_id": None if args.no_leader_election else args.leader_election_id,
                "lease_retention": values["lease_retention"] or None,
                "log_level": "debug" if args.verbose else args.log_level,
            }
        )


def seconds(duration: datetime.timedelta | None) -> float:
    """A duration setting as its flag takes it: seconds, and 0 for None (forever)."""
    return 0.0 if duration is None else duration.total_seconds()
