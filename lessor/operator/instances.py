"""The ClusterInstance reconciler: provisions through the backend, watches health, publishes the
kubeconfig, and tears down with *verified* cleanup or else quarantines.

Teardown is driven by a finalizer: deleting an instance (the lease reconciler does, on release or
expiry; the pool reconciler does, for unhealthy ones no lease holds) only marks it, and the
object stays until the backend has proven that nothing of the cluster remains. If that cannot be
proven the instance becomes Quarantined, keeps its finalizer and the evidence in its status, and
its capacity stays withheld, so a person can see what remains and finish the cleanup.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
import time

from prometheus_client import Counter

from lessor.operator.backends.base import BackendError, ClusterBackend, InstanceRef, Readiness
from lessor.operator.backends.registry import Backends
from lessor.operator.conditions import find, is_false, with_condition
from lessor.operator.context import Context
from lessor.operator.kinds import (
    BY_CLAIM,
    INSTANCE_FINALIZER,
    INSTANCES,
    LEASES,
    SECRETS,
    index_by_claim,
)
from lessor.operator.runtime.client import ConflictError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import key_of
from lessor.operator.writes import (
    add_finalizer,
    delete_fenced,
    owner_reference,
    remove_finalizer,
    write_status,
)
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import now_seconds, utcnow
from lessor.resources.cluster import ClusterInstance, ClusterInstanceStatus, Teardown

log = logging.getLogger(__name__)

HEALTH_INTERVAL = 15.0
CHECKS = Counter(
    "lessor_cluster_checks_total",
    "Backend checks of clusters: at every pass while a cluster starts or fails, every "
    "HEALTH_INTERVAL (15 s) while it is ready, by result (ready, not_ready).",
    ["namespace", "pool", "result"],
)
HEALTHY = "Healthy"
WAS_READY = ("Ready", "Leased", "Unhealthy")
QUARANTINE_RECHECK = 60.0


def _status(instance: ClusterInstance) -> ClusterInstanceStatus:
    """A copy of the instance's status to change and write (the instance keeps what was read)."""
    return instance.status.model_copy() if instance.status else ClusterInstanceStatus()


def kubeconfig_secret_name(instance_name: str) -> str:
    return f"{instance_name}-kubeconfig"


def setup(context: Context) -> Controller:
    """An instance is reconciled when it changes and when the lease that claims it does (a
    claiming lease that is gone orphans the reservation)."""
    settings = context.settings
    instances = context.informer(INSTANCES, {BY_CLAIM: index_by_claim})
    leases = context.informer(LEASES)
    reconciler = InstanceReconciler(
        context.client,
        instances=instances,
        leases=leases,
        backends=context.backends,
        events=context.events,
        teardown_grace=settings.teardown_grace,
        unhealthy_after=settings.unhealthy_after,
        start_timeout=settings.start_timeout,
    )

    def claimed_by(lease: Json) -> list[str]:
        uid = lease["metadata"].get("uid", "")
        return [key_of(instance) for instance in instances.store.by_index(BY_CLAIM, uid)]

    return (
        context.controller("clusterinstance", reconciler.reconcile)
        .watch(instances)
        .watch(leases, claimed_by)
    )


class InstanceReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        instances: Informer,
        leases: Informer,
        backends: Backends,
        events: EventRecorder,
        teardown_grace: datetime.timedelta = datetime.timedelta(minutes=2),
        unhealthy_after: datetime.timedelta = datetime.timedelta(seconds=30),
        start_timeout: datetime.timedelta = datetime.timedelta(minutes=5),
    ) -> None:
        self.start_timeout = start_timeout
        self.teardown_grace = teardown_grace
        self.unhealthy_after = unhealthy_after
        self.client = client
        self.instances = instances
        self.leases = leases
        self.backends = backends
        self.events = events
        # key -> (uid, monotonic time) of the cluster's last passed check, this process's own:
        # a new leader checks every cluster at its first pass.
        self._passed: dict[str, tuple[str, float]] = {}

    async def reconcile(self, key: str) -> Result:
        obj = self.instances.store.get(key)
        if obj is None:
            self._passed.pop(key, None)
            return Result()
        instance = ClusterInstance.model_validate(obj)
        meta = instance.metadata
        ref = InstanceRef(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "")
        backend = self.backends.for_spec(instance.spec.backend)
        if meta.deletion_timestamp is not None:
            return await self._tear_down(obj, instance, ref)
        obj = await add_finalizer(self.client, INSTANCES, obj, INSTANCE_FINALIZER)
        if instance.spec.claim_ref and self._claim_is_orphaned(instance):
            # The lease that reserved this instance is gone without releasing it (force-deleted):
            # the reservation must not leak, and the cluster may have been seen, so recycle it.
            log.info(
                "instance %s: claiming lease %s is gone, recycling",
                key,
                instance.spec.claim_ref.name,
            )
            await delete_fenced(self.client, INSTANCES, obj)
            return Result()
        status = _status(instance)
        if (due := self._next_check(key, instance)) > 0:
            return await self._between_checks(obj, instance, status, due)
        failure: BackendError | None = None
        try:
            if status.ready_at is None:
                # Creation only: a cluster that was ready and broke is reported, never made
                # again from nothing under the same name (its lease's kubeconfig would go stale
                # without a word).
                await backend.provision(ref)
            readiness = await backend.readiness(ref)
        except BackendError as error:
            # A failed check like any other (a cluster that never starts is replaced, one that
            # breaks is reported), then raised for the controller's backoff.
            failure, readiness = error, Readiness(False, str(error), status.backend_details)
        checked = "ready" if readiness.ready else "not_ready"
        CHECKS.labels(meta.namespace or "", instance.spec.pool, checked).inc()
        status.backend_details = readiness.details
        if "endpoint" in readiness.details:
            status.endpoint = readiness.details["endpoint"]
        status.message = readiness.message
        if readiness.ready:
            await self._publish_kubeconfig(obj, ref, backend)
            result = await self._healthy(obj, instance, status, readiness.message)
            self._passed[key] = (meta.uid or "", time.monotonic())
            return result
        self._passed.pop(key, None)
        if status.phase in WAS_READY:
            result = await self._failing(obj, status, readiness.message)
        else:
            result = await self._starting(obj, instance, status, readiness.message)
        if failure is not None:
            raise failure
        return result

    def _next_check(self, key: str, instance: ClusterInstance) -> float:
        """Seconds until a healthy, ready cluster is due for its next check; 0 when it is due
        now, or is not one (a starting or failing cluster is checked at every pass)."""
        uid, at = self._passed.get(key, ("", 0.0))
        status = instance.status
        if (
            uid != instance.metadata.uid
            or status is None
            or status.phase not in ("Ready", "Leased")
            or is_false(status.conditions, HEALTHY)
        ):
            return 0.0
        return max(0.0, at + HEALTH_INTERVAL - time.monotonic())

    async def _between_checks(
        self, obj: Json, instance: ClusterInstance, status: ClusterInstanceStatus, due: float
    ) -> Result:
        """A change of a cluster that passed its check less than HEALTH_INTERVAL ago: its claim
        taken or dropped (the phase says so), or this reconciler's own status write coming
        back. Checking it again for that cost the namespace backend five requests per lease,
        on the path of every other lease bound at the same moment (issue 45); the check keeps
        its interval instead."""
        status.phase = "Leased" if instance.spec.claim_ref else "Ready"
        await write_status(self.client, INSTANCES, obj, status)
        return Result(requeue_after=due)

    async def _starting(
        self, obj: Json, instance: ClusterInstance, status: ClusterInstanceStatus, message: str
    ) -> Result:
        """A new cluster, not ready yet. Past `start_timeout` it failed to start: Unhealthy,
        which its pool replaces, pausing longer after each failure in a row
        (lessor.operator.pools)."""
        created = instance.metadata.creation_timestamp or utcnow()
        failed = utcnow() - created > self.start_timeout
        turned = failed and status.phase != "Unhealthy"
        status.phase = "Unhealthy" if failed else "Creating"
        obj = await write_status(self.client, INSTANCES, obj, status)
        if turned:
            seconds = self.start_timeout.total_seconds()
            await self.events.record(
                obj, "Warning", "FailedToStart", f"not ready after {seconds:.0f}s: {message}"
            )
        return Result(requeue_after=5.0 if failed else 1.0)

    async def _healthy(
        self, obj: Json, instance: ClusterInstance, status: ClusterInstanceStatus, message: str
    ) -> Result:
        status.kubeconfig_secret = kubeconfig_secret_name(instance.metadata.name or "")
        if status.ready_at is None:
            status.ready_at = now_seconds()
        recovered = is_false(status.conditions, HEALTHY)
        was_ready = status.phase in WAS_READY
        status.phase = "Leased" if instance.spec.claim_ref else "Ready"
        status.conditions = with_condition(
            status.conditions, HEALTHY, True, "HealthCheckPassed", message,
            generation=instance.metadata.generation,
        )  # fmt: skip
        obj = await write_status(self.client, INSTANCES, obj, status)
        if recovered:
            await self.events.record(obj, "Normal", "Recovered", message)
        elif not was_ready:
            await self.events.record(obj, "Normal", "Ready", message)
        return Result(requeue_after=HEALTH_INTERVAL)

    async def _failing(self, obj: Json, status: ClusterInstanceStatus, message: str) -> Result:
        """A cluster that was ready fails its check. Its Healthy condition turns False at once
        (no new lease binds it); it becomes Unhealthy only once it has failed for
        `unhealthy_after`, so that one slow answer does not cost a warm cluster. A leased cluster
        is never torn down for it (the pool replaces only unclaimed ones): its lease reports it
        and it stays until the lease ends."""
        status.conditions = with_condition(
            status.conditions, HEALTHY, False, "HealthCheckFailed", message,
            generation=obj["metadata"].get("generation"),
        )  # fmt: skip
        failing = find(status.conditions, HEALTHY)
        assert failing is not None
        turned = False
        if utcnow() - failing.last_transition_time >= self.unhealthy_after:
            turned, status.phase = status.phase != "Unhealthy", "Unhealthy"
        obj = await write_status(self.client, INSTANCES, obj, status)
        if turned:
            await self.events.record(obj, "Warning", "Unhealthy", message)
        return Result(requeue_after=5.0)

    def _claim_is_orphaned(self, instance: ClusterInstance) -> bool:
        claim = instance.spec.claim_ref
        assert claim is not None
        lease = self.leases.store.get(f"{instance.metadata.namespace}/{claim.name}")
        return lease is None or lease["metadata"].get("uid") != claim.uid

    async def _publish_kubeconfig(
        self, obj: Json, ref: InstanceRef, backend: ClusterBackend
    ) -> None:
        name = kubeconfig_secret_name(ref.name)
        # Published on an earlier pass (a cluster's credentials never change): a read first, so
        # that a pass after a crash writes nothing it need not (a kubeconfig may cost a write:
        # a token request).
        with contextlib.suppress(NotFoundError):
            await self.client.get(SECRETS.path(ref.namespace, name))
            return
        kubeconfig = await backend.kubeconfig(ref)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": ref.namespace,
                "labels": {"lessor.dev/instance": ref.name},
                "ownerReferences": [owner_reference(obj)],
            },
            "type": "Opaque",
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
        }
        with contextlib.suppress(ConflictError):
            await self.client.create(SECRETS.path(ref.namespace), secret)

    async def _tear_down(self, obj: Json, instance: ClusterInstance, ref: InstanceRef) -> Result:
        if INSTANCE_FINALIZER not in instance.metadata.finalizers:
            return Result()
        backend = self.backends.for_spec(instance.spec.backend)
        status = _status(instance)
        if status.phase not in ("Recycling", "Quarantined"):
            status.phase = "Recycling"
            obj = await write_status(self.client, INSTANCES, obj, status)
            await self.events.record(obj, "Normal", "Recycling", "tearing the cluster down")
        try:
            await backend.teardown(ref)
        except BackendError as error:
            log.warning("instance %s: teardown failed: %s", ref.name, error)
        report = await backend.verify_teardown(ref)
        previous = status.teardown
        unchanged = (
            previous is not None
            and previous.evidence == report.evidence
            and previous.verified == report.verified
        )
        # A recheck that finds the same remains rewrites nothing (no status churn, no event storm).
        checked_at = previous.checked_at if previous is not None and unchanged else now_seconds()
        started_at = (previous.started_at if previous is not None else None) or now_seconds()
        status.teardown = Teardown(
            verified=report.verified,
            evidence=report.evidence,
            checked_at=checked_at,
            started_at=started_at,
        )
        if report.verified:
            obj = await write_status(self.client, INSTANCES, obj, status)
            await remove_finalizer(self.client, INSTANCES, obj, INSTANCE_FINALIZER)
            await self.events.record(obj, "Normal", "TeardownVerified", "; ".join(report.evidence))
            return Result()
        if status.phase != "Quarantined" and utcnow() - started_at < self.teardown_grace:
            # Deletions take a moment (pods terminating, volumes detaching): look again before
            # concluding that the cleanup cannot be verified.
            status.phase = "Recycling"
            await write_status(self.client, INSTANCES, obj, status)
            return Result(requeue_after=2.0)
        turned = status.phase != "Quarantined"
        status.phase, status.message = "Quarantined", "teardown could not be verified"
        obj = await write_status(self.client, INSTANCES, obj, status)
        if turned:
            await self.events.record(obj, "Warning", "Quarantined", "; ".join(report.evidence))
        return Result(requeue_after=QUARANTINE_RECHECK)
