"""Stopping `local` clusters that no ClusterInstance owns any more.

A ClusterInstance deleted while no operator ran (its finalizer removed by hand, or the operator
down when it went) leaves its cluster's processes running with nothing to tear them down. The
leader looks, once its instance cache has synced and then every few minutes, at the clusters in
its host's directory (lessor.controlplane.local_clusters) of its own namespace, and stops those
whose instance uid it does not know. A directory younger than the grace period is left alone:
its instance may be being created (or its cache not yet show it). Clusters of other hosts or of
other namespaces are never touched; their own operators, or `gc`, end them. While there is no
`local` cluster on disk at all, a pass does not even ask which host this is (a read that only
manifests/local-backend grants: lessor.operator.backends.local).

Stopping is idempotent (a cluster half-stopped by a crash is a directory without a record, which
the next pass deletes), so one synthetic key requeued on a timer is all the state there is.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time

from prometheus_client import Counter

from lessor.controlplane.local_clusters import cluster_directories, every_cluster, stop_cluster
from lessor.operator.backends.base import BackendError
from lessor.operator.backends.local import LocalBackend
from lessor.operator.core.kinds import INSTANCES
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context

log = logging.getLogger(__name__)

KEY = "local-orphans"
INTERVAL = 180.0

ORPHANS_STOPPED = Counter(
    "lessor_local_orphans_stopped_total",
    "`local` clusters stopped because no ClusterInstance owned them.",
)


def setup(context: Context) -> Controller:
    """One key, reconciled at start and every INTERVAL; the instance cache is watched only to be
    waited for (no instance event needs a pass: teardown stops an instance's cluster itself)."""
    instances = context.informer(INSTANCES)
    collector = OrphanCollector(
        context.local_backend,
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
        local: LocalBackend,
        *,
        namespace: str,
        instances: Informer,
        grace: datetime.timedelta,
    ) -> None:
        self.local = local
        self.namespace = namespace
        self.instances = instances
        self.grace = grace.total_seconds()

    def _owned(self, uid: str) -> bool:
        return any(obj["metadata"].get("uid") == uid for obj in self.instances.store.list())

    async def reconcile(self, _key: str) -> Result:
        if not await asyncio.to_thread(every_cluster, self.local.root):
            return Result(requeue_after=INTERVAL)  # nothing on disk: no need to know the host
        try:
            mine = await self.local.host_directory()
        except BackendError as error:
            log.warning("cannot look for orphaned local clusters: %s", error)
            return Result(requeue_after=INTERVAL)
        next_pass = INTERVAL
        for directory in await asyncio.to_thread(cluster_directories, mine):
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
