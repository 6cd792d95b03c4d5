"""`python -m lessor.operator`: the operator process.

Every replica runs the same informers; the elected leader alone runs the controllers. The
process exits 0 after a drained shutdown on SIGTERM, and 3 when it loses leadership.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from lessor.config_file import apply_defaults
from lessor.operator.backends.local import LocalBackend
from lessor.operator.backends.registry import Backends
from lessor.operator.executions import ExecutionReconciler
from lessor.operator.instances import InstanceReconciler
from lessor.operator.kinds import (
    BY_CLAIM,
    BY_POOL,
    EXECUTIONS,
    INSTANCES,
    LEASES,
    POOLS,
    SANDBOX_LEASES,
    SANDBOX_POOLS,
    index_by_claim,
    index_by_pool,
    pool_key,
)
from lessor.operator.leases import LeaseReconciler
from lessor.operator.pools import PoolReconciler
from lessor.operator.runtime.client import JSON, KubeClient
from lessor.operator.runtime.controller import Controller
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.leaderelection import LeaderElector, default_identity
from lessor.operator.runtime.manager import Manager
from lessor.operator.runtime.store import Handler, key_of
from lessor.operator.sandboxleases import SandboxLeaseReconciler
from lessor.operator.sandboxpools import (
    BY_SANDBOX_POOL,
    CompatibilityCache,
    SandboxPoolReconciler,
    index_by_sandbox_pool,
)
from lessor.runner.client import configuration as runner_configuration


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lessor.operator", description=__doc__)
    parser.add_argument("--kubeconfig", help="default: in-cluster, then ~/.kube/config")
    parser.add_argument(
        "--namespace", default="lessor-system", help="namespace of pools and leases"
    )
    parser.add_argument(
        "--sandbox-namespace",
        help="namespace of the agent-sandbox objects and sandbox pods (default: --namespace)",
    )
    parser.add_argument("--http-host", default="0.0.0.0")  # noqa: S104 - probes come from the kubelet
    parser.add_argument("--http-port", type=int, default=8080, help="/healthz, /readyz, /metrics")
    parser.add_argument("--leader-election-id", default="lessor-operator")
    parser.add_argument("--no-leader-election", action="store_true", help="single replica only")
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--renew-deadline", type=float, default=10.0)
    parser.add_argument("--retry-period", type=float, default=2.0)
    parser.add_argument("--local-backend-dir", type=Path, help="where `local` clusters live")
    parser.add_argument("--workers", type=int, default=4, help="workers per controller")
    parser.add_argument(
        "--teardown-grace",
        type=float,
        default=120.0,
        help="seconds a teardown may take to verify before the instance is quarantined",
    )
    parser.add_argument(
        "--lease-retention",
        type=float,
        default=86400.0,
        help="seconds an ended lease is kept before it is deleted (0: kept forever)",
    )
    parser.add_argument(
        "--test-backends",
        action="store_true",
        help="also serve the `namespace` backend (tests and benchmarks; no isolation)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    apply_defaults(parser, argv, "operator")
    return parser.parse_args(argv)


def build(client: KubeClient, args: argparse.Namespace, identity: str) -> Manager:
    namespace = args.namespace
    elector = None
    if not args.no_leader_election:
        elector = LeaderElector(
            client,
            namespace,
            args.leader_election_id,
            identity=identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        )
    manager = Manager(elector=elector, http_host=args.http_host, http_port=args.http_port)
    pools = manager.add_informer(Informer(client, POOLS, namespace=namespace))
    instances = manager.add_informer(
        Informer(
            client,
            INSTANCES,
            namespace=namespace,
            indexers={BY_POOL: index_by_pool, BY_CLAIM: index_by_claim},
        )
    )
    leases = manager.add_informer(
        Informer(client, LEASES, namespace=namespace, indexers={BY_POOL: index_by_pool})
    )
    events = EventRecorder(client, identity)
    backends = Backends(client, LocalBackend(args.local_backend_dir), args.test_backends)
    pool_controller = Controller(
        "clusterpool",
        PoolReconciler(
            client, pools=pools, instances=instances, leases=leases, events=events
        ).reconcile,
        [pools, instances, leases],
        workers=args.workers,
    )
    instance_controller = Controller(
        "clusterinstance",
        InstanceReconciler(
            client,
            instances=instances,
            leases=leases,
            backends=backends,
            events=events,
            teardown_grace=datetime.timedelta(seconds=args.teardown_grace),
        ).reconcile,
        [instances, leases],
        workers=args.workers,
    )
    lease_reconciler = LeaseReconciler(
        client,
        pools=pools,
        instances=instances,
        leases=leases,
        events=events,
        enqueue=lambda key: lease_controller.enqueue(key),  # noqa: PLW0108 - bound late
        retention=(
            datetime.timedelta(seconds=args.lease_retention) if args.lease_retention else None
        ),
    )
    lease_controller = Controller(
        "clusterlease", lease_reconciler.reconcile, [pools, instances, leases], workers=args.workers
    )
    for controller in (pool_controller, instance_controller, lease_controller):
        manager.add_controller(controller)

    def pending_leases_of(obj: JSON) -> None:
        for lease in leases.store.by_index(BY_POOL, pool_key(obj)):
            if lease.get("status", {}).get("phase") in (None, "Pending"):
                lease_controller.enqueue(key_of(lease))

    def on_pool(obj: JSON) -> None:
        pool_controller.enqueue(key_of(obj))
        namespace_ = obj["metadata"].get("namespace")
        for lease in leases.store.by_index(BY_POOL, f"{namespace_}/{obj['metadata']['name']}"):
            lease_controller.enqueue(key_of(lease))

    def on_instance(obj: JSON) -> None:
        instance_controller.enqueue(key_of(obj))
        pool_controller.enqueue(pool_key(obj))
        claim = obj.get("spec", {}).get("claimRef")
        if claim:
            lease_controller.enqueue(f"{obj['metadata'].get('namespace')}/{claim['name']}")
        pending_leases_of(obj)

    def on_lease(obj: JSON) -> None:
        lease_controller.enqueue(key_of(obj))
        pool_controller.enqueue(pool_key(obj))
        for instance in instances.store.by_index(BY_CLAIM, obj["metadata"].get("uid", "")):
            instance_controller.enqueue(key_of(instance))

    for informer, handle in ((pools, on_pool), (instances, on_instance), (leases, on_lease)):
        informer.store.add_handler(_on_any_change(handle))
    if args.agent_sandbox_mode == "external":
        add_sandbox_controllers(manager, client, args, events)
    return manager


def add_sandbox_controllers(
    manager: Manager, client: KubeClient, args: argparse.Namespace, events: EventRecorder
) -> None:
    """SandboxPools into agent-sandbox objects, SandboxLeases into SandboxClaims, and
    SandboxExecutions run by the runner in the sandbox; only with `agentSandbox.mode: external`."""
    namespace = args.namespace
    sandboxes = args.sandbox_namespace or namespace
    compatibility = CompatibilityCache(client)  # one verdict for both controllers
    pools = manager.add_informer(Informer(client, SANDBOX_POOLS, namespace=namespace))
    leases = manager.add_informer(
        Informer(
            client,
            SANDBOX_LEASES,
            namespace=namespace,
            indexers={BY_SANDBOX_POOL: index_by_sandbox_pool},
        )
    )
    pool_controller = Controller(
        "sandboxpool",
        SandboxPoolReconciler(
            client, pools=pools, leases=leases, compatibility=compatibility, sandboxes=sandboxes
        ).reconcile,
        [pools, leases],
        workers=args.workers,
    )
    lease_controller = Controller(
        "sandboxlease",
        SandboxLeaseReconciler(
            client,
            leases=leases,
            pools=pools,
            events=events,
            compatibility=compatibility,
            sandboxes=sandboxes,
            teardown_grace=datetime.timedelta(seconds=args.teardown_grace),
            retention=(
                datetime.timedelta(seconds=args.lease_retention) if args.lease_retention else None
            ),
        ).reconcile,
        [pools, leases],
        workers=args.workers,
    )
    executions = manager.add_informer(Informer(client, EXECUTIONS, namespace=namespace))
    execution_controller = Controller(
        "sandboxexecution",
        ExecutionReconciler(
            client, executions=executions, exec_settings=runner_configuration(args.kubeconfig)
        ).reconcile,
        [executions],
        workers=args.workers,
    )
    for controller in (pool_controller, lease_controller, execution_controller):
        manager.add_controller(controller)
    executions.store.add_handler(
        _on_any_change(lambda obj: execution_controller.enqueue(key_of(obj)))
    )

    def on_pool(obj: JSON) -> None:
        pool_controller.enqueue(key_of(obj))
        for lease in leases.store.by_index(BY_SANDBOX_POOL, key_of(obj)):
            if lease.get("status", {}).get("phase") in (None, "Pending"):
                lease_controller.enqueue(key_of(lease))

    def on_lease(obj: JSON) -> None:
        lease_controller.enqueue(key_of(obj))
        pool_controller.enqueue(index_by_sandbox_pool(obj)[0])

    pools.store.add_handler(_on_any_change(on_pool))
    leases.store.add_handler(_on_any_change(on_lease))


def _on_any_change(handle: Callable[[JSON], None]) -> Handler:
    def on_update(_old: JSON, new: JSON) -> None:
        handle(new)

    return Handler(on_add=handle, on_update=on_update, on_delete=handle)


async def run(args: argparse.Namespace) -> int:
    client = await KubeClient.connect(args.kubeconfig)
    identity = default_identity()
    logging.getLogger(__name__).info(
        "operator %s starting in namespace %s", identity, args.namespace
    )
    return await build(client, args, identity).run()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="time=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return asyncio.run(run(args))
