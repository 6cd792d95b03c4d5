"""Deleting the namespaces of clusters that no ClusterInstance owns any more.

A k3s or vcluster cluster lives in a namespace of its own (lessor.operator.backends
.instance_namespace), which only its instance's finalizer deletes. An instance whose finalizer was
removed by hand, or that went while no operator ran, leaves that namespace, and the cluster's
pods with it, running for nobody. The leader looks, once its instance cache has synced and then
every few minutes, at the namespaces labelled as instance namespaces whose instance lived in its
own namespace (their `lessor.dev/instance` annotation), and deletes those whose instance uid it
does not know, once they are older than `--local-orphan-grace` (an instance being created may
not be in the cache yet). Namespaces of other operators' instances are never touched.

The delete is fenced by the namespace's uid, and the shipped ValidatingAdmissionPolicy refuses
the operator's deletion of any namespace not labelled as an instance namespace, so a mistake here
cannot reach another namespace. Deleting is idempotent; one synthetic key requeued on a timer is
all the state there is.
"""

from __future__ import annotations

import datetime
import logging

from prometheus_client import Counter

from lessor.operator.backends.instance_namespace import NAMESPACE_LABEL
from lessor.operator.core.kinds import INSTANCES
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import utcnow
from lessor.resources import labels

log = logging.getLogger(__name__)

KEY = "instance-namespace-orphans"
INTERVAL = 180.0

ORPHANS_DELETED = Counter(
    "lessor_instance_namespace_orphans_deleted_total",
    "Instance namespaces deleted because no ClusterInstance owned them.",
)


def setup(context: Context) -> Controller:
    """One key, reconciled at start and every INTERVAL; the instance cache is watched only to be
    waited for (teardown deletes an instance's namespace itself)."""
    instances = context.informer(INSTANCES)
    collector = NamespaceOrphans(
        context.client,
        namespace=context.settings.namespace,
        instances=instances,
        grace=context.settings.local_orphan_grace,
    )
    controller = context.controller(KEY, collector.reconcile).watch(instances, lambda _: [])
    controller.enqueue(KEY)
    return controller


class NamespaceOrphans:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        instances: Informer,
        grace: datetime.timedelta,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.instances = instances
        self.grace = grace

    def _mine(self, namespace: Json) -> bool:
        """Whether the namespace was made for an instance of this operator's namespace."""
        instance = namespace["metadata"].get("annotations", {}).get(labels.INSTANCE, "")
        return str(instance).partition("/")[0] == self.namespace

    async def reconcile(self, _key: str) -> Result:
        try:
            listed = await self.client.request(
                "GET", "/api/v1/namespaces", params={"labelSelector": f"{NAMESPACE_LABEL}=true"}
            )
        except ApiError as error:
            # Without manifests/instance-namespaces there are no such namespaces to look for.
            log.debug("cannot list instance namespaces: %s", error)
            return Result(requeue_after=INTERVAL)
        next_pass = INTERVAL
        # Once per pass (a delete is one quick call; an instance made meanwhile is younger than
        # the grace, and so is its namespace).
        known = {obj["metadata"].get("uid") for obj in self.instances.store.list()}
        for namespace in listed.get("items", []):
            metadata = namespace["metadata"]
            uid = metadata.get("labels", {}).get(labels.INSTANCE_UID, "")
            if not self._mine(namespace) or metadata.get("deletionTimestamp") or uid in known:
                continue
            created = datetime.datetime.fromisoformat(metadata["creationTimestamp"])
            age = (utcnow() - created).total_seconds()
            if age < self.grace.total_seconds():
                next_pass = min(next_pass, self.grace.total_seconds() - age + 1.0)
                continue
            await self._delete(metadata, uid, age)
        return Result(requeue_after=next_pass)

    async def _delete(self, metadata: Json, uid: str, age: float) -> None:
        name = metadata["name"]
        log.info(
            "namespace %s has no ClusterInstance (uid %s) and is %.0fs old: deleting it",
            name,
            uid,
            age,
        )
        try:
            await self.client.delete(
                f"/api/v1/namespaces/{name}", preconditions={"uid": metadata["uid"]}
            )
        except NotFoundError:
            return
        except ApiError as error:
            log.warning("deleting orphaned namespace %s failed: %s", name, error)
            return
        ORPHANS_DELETED.inc()
