"""Stopping `local` clusters that no ClusterInstance owns any more.

A ClusterInstance deleted while no operator ran (its finalizer removed by hand, or the operator
down when it went) leaves its cluster's processes running with nothing to tear them down. The
leader looks, once its instance cache has synced and then every few minutes, at the clusters in
its host's directory (lessor.controlplane.local_clusters) of its own namespace, and stops those
whose instance uid it does not know. A directory younger than the grace period is left alone:
its instance may be being created (or its cache not yet show it). Clusters of other hosts or of
other namespaces are never touched; their own operators, or `gc`, end them.

Stopping is idempotent (a cluster half-stopped by a crash is a directory without a record, which
the next pass deletes), so one synthetic key requeued on a timer is all the state there is.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from pathlib import Path

from prometheus_client import Counter

from lessor.controlplane.local_clusters import Host, cluster_directories, stop_cluster
from lessor.operator.context import Context
from lessor.operator.kinds import INSTANCES
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer

log = logging.getLogger(__name__)

KEY = "local-orphans"
INTERVAL = 180.0

ORPHANS_STOPPED = Counter(
    "lessor_local_orphans_stopped_total",
    "`local` clusters stopped because no ClusterInstance owned them.",
)


async def identify_host(client: KubeClient) -> Host:
    """The cluster the operator runs against: its `kube-system` namespace's uid names it, and its
    API server URL and CA let a later `gc` ask whether it still answers."""
    try:
        namespace = await client.get("/api/v1/namespaces/kube-system")
    except ApiError as error:
        # Without it the `local` backend cannot say whose its clusters are: refuse to start
        # (manifests/base/operator-rbac.yaml grants this one read).
        log.error("cannot read namespace kube-system, which names the host cluster: %s", error)
        raise
    server, ca = client.endpoint()
    return Host(uid=str(namespace["metadata"]["uid"]), server=server, ca_pem=ca)


def setup(context: Context) -> Controller:
    """One key, reconciled at start and every INTERVAL; the instance cache is watched only to be
    waited for (no instance event needs a pass: teardown stops an instance's cluster itself)."""
    instances = context.informer(INSTANCES)
    collector = OrphanCollector(
        context.local_backend.host_directory,
        namespace=context.settings.namespace,
        instances=instances,
        grace=context.settings.local_orphan_grace,
    )
    controller = context.controller("local-orphans", collector.reconcile).watch(
        instances, lambda _: []
    )
    controller.enqueue(KEY)
    return controller


class OrphanCollector:
    def __init__(
        self,
        directory: Path,
        *,
        namespace: str,
        instances: Informer,
        grace: datetime.timedelta,
    ) -> None:
        self.directory = directory
        self.namespace = namespace
        self.instances = instances
        self.grace = grace.total_seconds()

    def _owned(self, uid: str) -> bool:
        return any(obj["metadata"].get("uid") == uid for obj in self.instances.store.list())

    async def reconcile(self, _key: str) -> Result:
        next_pass = INTERVAL
        for directory in await asyncio.to_thread(cluster_directories, self.directory):
            namespace, _name, uid = directory.name.split("_")
            if namespace != self.namespace:
                continue
            try:
                age = time.time() - directory.stat().st_mtime
            except FileNotFoundError:
                continue  # torn down meanwhile
            # Read at each cluster, not once: stopping one takes seconds, in which instances come.
            if self._owned(uid):
                continue
            if age < self.grace:
                next_pass = min(next_pass, self.grace - age + 1.0)
                continue
            log.info(
                "local cluster %s has no ClusterInstance (uid %s) and is %.0fs old: stopping it",
                directory,
                uid,
                age,
            )
            await asyncio.to_thread(stop_cluster, directory)
            ORPHANS_STOPPED.inc()
        return Result(requeue_after=next_pass)
