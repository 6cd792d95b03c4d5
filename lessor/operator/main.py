"""`python -m lessor.operator`: the operator process.

Every replica runs the same informers; the elected leader alone runs the controllers. The
process exits 0 after a drained shutdown on SIGTERM, and 3 when it loses leadership.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from lessor import build_info, tracing
from lessor.config_file import apply_defaults
from lessor.logs import configure as configure_logging
from lessor.operator.cluster import (
    instances,
    lease_retention,
    leases,
    local_orphans,
    namespace_orphans,
    pools,
)
from lessor.operator.diagnostics import records as diagnostics_records
from lessor.operator.runtime.client import KubeClient
from lessor.operator.runtime.controller import Controller
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.leaderelection import LeaderElector, default_identity
from lessor.operator.runtime.manager import Manager
from lessor.operator.tenancy import access_policies, reservations
from lessor.operator.wiring.context import Context
from lessor.operator.wiring.settings import Settings, seconds

# Each module's `setup` declares its controller's watches beside its reconciler.
CLUSTER_CONTROLLERS: tuple[Callable[[Context], Controller], ...] = (
    pools.setup,
    instances.setup,
    leases.setup,
    lease_retention.setup,
    local_orphans.setup,
    namespace_orphans.setup,
    access_policies.setup,
    diagnostics_records.setup,
    reservations.setup,
)


def sandbox_controllers() -> tuple[Callable[[Context], Controller], ...]:
    """SandboxPools into agent-sandbox objects, SandboxLeases into SandboxClaims, and
    SandboxExecutions run by the runner in the sandbox; only with `agentSandbox.mode: external`.
    Imported only then: the runner's exec stream brings the kubernetes client, 0.4 s of CPU that
    every start of an operator without sandboxes would otherwise pay."""
    from lessor.operator.sandbox import executions, leases, pools  # noqa: PLC0415

    return (pools.setup, leases.setup, executions.setup)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The flags, each defaulting to its Settings field (where the default is declared)."""
    parser = argparse.ArgumentParser(prog="python -m lessor.operator", description=__doc__)
    parser.add_argument(
        "--kubeconfig", default=Settings.kubeconfig, help="default: in-cluster, then ~/.kube/config"
    )
    parser.add_argument(
        "--namespace", default=Settings.namespace, help="namespace of pools and leases"
    )
    parser.add_argument(
        "--sandbox-namespace",
        help="namespace of the agent-sandbox objects and sandbox pods (default: --namespace)",
    )
    parser.add_argument("--http-host", default=Settings.http_host)
    parser.add_argument(
        "--http-port", type=int, default=Settings.http_port, help="/healthz, /readyz, /metrics"
    )
    parser.add_argument("--leader-election-id", default=Settings.leader_election_id)
    parser.add_argument("--no-leader-election", action="store_true", help="single replica only")
    parser.add_argument("--lease-duration", type=float, default=Settings.lease_duration)
    parser.add_argument("--renew-deadline", type=float, default=Settings.renew_deadline)
    parser.add_argument("--retry-period", type=float, default=Settings.retry_period)
    parser.add_argument(
        "--local-backend-dir",
        type=Path,
        default=Settings.local_backend_dir,
        help="where `local` clusters live",
    )
    parser.add_argument(
        "--local-orphan-grace",
        type=float,
        default=seconds(Settings.local_orphan_grace),
        help="seconds a `local` cluster or an instance namespace without a ClusterInstance is left "
        "before it is removed",
    )
    parser.add_argument(
        "--workers", type=int, default=Settings.workers, help="workers per controller"
    )
    parser.add_argument(
        "--teardown-grace",
        type=float,
        default=seconds(Settings.teardown_grace),
        help="seconds a teardown may take to verify before the instance is quarantined",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=seconds(Settings.start_timeout),
        help="seconds a new cluster may take to become ready before it counts as failed to "
        "start (then replaced, with a growing pause between failures)",
    )
    parser.add_argument(
        "--helm",
        default=Settings.helm,
        help="the helm binary chart addons are rendered with (default: helm on PATH, which the "
        "image ships)",
    )
    parser.add_argument(
        "--lease-retention",
        type=float,
        default=seconds(Settings.lease_retention),
        help="seconds an ended lease is kept before it is deleted (0: kept forever)",
    )
    parser.add_argument(
        "--test-backends",
        action="store_true",
        default=Settings.test_backends,
        help="also serve the `namespace` backend (tests and benchmarks; no isolation)",
    )
    parser.add_argument(
        "--allow-privileged-backends",
        action="store_true",
        default=Settings.allow_privileged_backends,
        help="serve the `k3s` backend, whose tenants are root on their node (its pools must "
        "name nodes of their own)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="--log-level debug")
    apply_defaults(parser, argv, "operator")
    return parser.parse_args(argv)


def build(
    client: KubeClient, settings: Settings, identity: str, events: EventRecorder | None = None
) -> Manager:
    elector = None
    if settings.leader_election_id is not None:
        elector = LeaderElector(
            client,
            settings.namespace,
            settings.leader_election_id,
            identity=identity,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
        )
    manager = Manager(elector=elector, http_host=settings.http_host, http_port=settings.http_port)
    context = Context(manager, client, settings, events or EventRecorder(client, identity))
    for setup in CLUSTER_CONTROLLERS:
        setup(context)
    if settings.agent_sandbox_mode == "external":
        for setup in sandbox_controllers():
            setup(context)
    return manager


async def run(settings: Settings) -> int:
    client = await KubeClient.connect(settings.kubeconfig)
    identity = default_identity()
    logging.getLogger(__name__).info(
        "operator %s starting in namespace %s", identity, settings.namespace
    )
    events = EventRecorder(client, identity)
    try:
        code = await build(client, settings, identity, events).run()
        await events.drain()  # the Events of the last reconciles, before the process goes
    finally:
        await client.close()
    return code


def main(argv: list[str] | None = None) -> int:
    settings = Settings.from_args(parse_args(argv))
    configure_logging(settings.log_level, settings.log_format)
    build_info.export()
    tracing.configure("lessor-operator")
    try:
        return asyncio.run(run(settings))
    finally:
        tracing.shutdown()  # the spans still buffered
