"""The ClusterInstance reconciler: provisions through the backend, watches health, publishes the
kubeconfig, and tears down with *verified* cleanup or else quarantines.

Teardown is driven by a finalizer: deleting an instance (the lease reconciler does, on release or
expiry; the pool reconciler does, for unhealthy ones) only marks it, and the object stays until
the backend has proven that nothing of the cluster remains. If that cannot be proven the instance
becomes Quarantined, keeps its finalizer and the evidence in its status, and its capacity stays
withheld, so a person can see what remains and finish the cleanup.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging

from lessor.operator.backends.base import BackendError, ClusterBackend, InstanceRef
from lessor.operator.backends.local import LocalBackend
from lessor.operator.backends.registry import Backends
from lessor.operator.context import Context
from lessor.operator.kinds import (
    BY_CLAIM,
    INSTANCE_FINALIZER,
    INSTANCES,
    LEASES,
    SECRETS,
    index_by_claim,
)
from lessor.operator.runtime.client import JSON, ConflictError, KubeClient
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
from lessor.protocol.timestamps import timestamp, utcnow
from lessor.resources.cluster import ClusterInstance

log = logging.getLogger(__name__)

CREATING_TIMEOUT = datetime.timedelta(minutes=5)
HEALTH_INTERVAL = 15.0
QUARANTINE_RECHECK = 60.0


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
        backends=Backends(
            context.client, LocalBackend(settings.local_backend_dir), settings.test_backends
        ),
        events=context.events,
        teardown_grace=settings.teardown_grace,
    )

    def claimed_by(lease: JSON) -> list[str]:
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
    ) -> None:
        self.teardown_grace = teardown_grace
        self.client = client
        self.instances = instances
        self.leases = leases
        self.backends = backends
        self.events = events

    async def reconcile(self, key: str) -> Result:
        obj = self.instances.store.get(key)
        if obj is None:
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
        status = dict(obj.get("status") or {})
        try:
            await backend.provision(ref)
            readiness = await backend.readiness(ref)
        except BackendError as error:
            status.update(phase=status.get("phase") or "Creating", message=str(error))
            await write_status(self.client, INSTANCES, obj, status)
            raise
        status["backendDetails"] = readiness.details
        if "endpoint" in readiness.details:
            status["endpoint"] = readiness.details["endpoint"]
        status["message"] = readiness.message
        if readiness.ready:
            await self._publish_kubeconfig(obj, ref, backend)
            status["kubeconfigSecret"] = kubeconfig_secret_name(ref.name)
            status.setdefault("readyAt", timestamp(utcnow()))
            status["phase"] = "Leased" if instance.spec.claim_ref else "Ready"
            if obj.get("status", {}).get("phase") not in ("Ready", "Leased"):
                await self.events.record(obj, "Normal", "Ready", readiness.message)
            await write_status(self.client, INSTANCES, obj, status)
            return Result(requeue_after=HEALTH_INTERVAL)
        was_ready = status.get("phase") in ("Ready", "Leased")
        created = meta.creation_timestamp or utcnow()
        if was_ready or utcnow() - created > CREATING_TIMEOUT:
            if status.get("phase") != "Unhealthy":
                await self.events.record(obj, "Warning", "Unhealthy", readiness.message)
            status["phase"] = "Unhealthy"
        else:
            status["phase"] = "Creating"
        await write_status(self.client, INSTANCES, obj, status)
        return Result(requeue_after=1.0 if status["phase"] == "Creating" else 5.0)

    def _claim_is_orphaned(self, instance: ClusterInstance) -> bool:
        claim = instance.spec.claim_ref
        assert claim is not None
        lease = self.leases.store.get(f"{instance.metadata.namespace}/{claim.name}")
        return lease is None or lease["metadata"].get("uid") != claim.uid

    async def _publish_kubeconfig(
        self, obj: JSON, ref: InstanceRef, backend: ClusterBackend
    ) -> None:
        name = kubeconfig_secret_name(ref.name)
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
        # 409: published on an earlier pass; a cluster's credentials never change.
        with contextlib.suppress(ConflictError):
            await self.client.create(SECRETS.path(ref.namespace), secret)

    async def _tear_down(self, obj: JSON, instance: ClusterInstance, ref: InstanceRef) -> Result:
        if INSTANCE_FINALIZER not in instance.metadata.finalizers:
            return Result()
        backend = self.backends.for_spec(instance.spec.backend)
        status = dict(obj.get("status") or {})
        if status.get("phase") not in ("Recycling", "Quarantined"):
            status["phase"] = "Recycling"
            obj = await write_status(self.client, INSTANCES, obj, status)
            await self.events.record(obj, "Normal", "Recycling", "tearing the cluster down")
        try:
            await backend.teardown(ref)
        except BackendError as error:
            log.warning("instance %s: teardown failed: %s", ref.name, error)
        report = await backend.verify_teardown(ref)
        previous = status.get("teardown") or {}
        unchanged = (
            previous.get("evidence") == report.evidence
            and previous.get("verified") == report.verified
        )
        # A recheck that finds the same remains rewrites nothing (no status churn, no event storm).
        checked_at = previous.get("checkedAt") if unchanged else timestamp(utcnow())
        started_at = previous.get("startedAt") or timestamp(utcnow())
        checked = {
            "verified": report.verified,
            "evidence": report.evidence,
            "checkedAt": checked_at,
            "startedAt": started_at,
        }
        if report.verified:
            status["teardown"] = checked
            obj = await write_status(self.client, INSTANCES, obj, status)
            await self.events.record(obj, "Normal", "TeardownVerified", "; ".join(report.evidence))
            await remove_finalizer(self.client, INSTANCES, obj, INSTANCE_FINALIZER)
            return Result()
        elapsed = utcnow() - datetime.datetime.fromisoformat(started_at.replace("Z", "+00:00"))
        if status.get("phase") != "Quarantined" and elapsed < self.teardown_grace:
            # Deletions take a moment (pods terminating, volumes detaching): look again before
            # concluding that the cleanup cannot be verified.
            status.update(phase="Recycling", teardown=checked)
            await write_status(self.client, INSTANCES, obj, status)
            return Result(requeue_after=2.0)
        if status.get("phase") != "Quarantined":
            await self.events.record(obj, "Warning", "Quarantined", "; ".join(report.evidence))
        status.update(
            phase="Quarantined", teardown=checked, message="teardown could not be verified"
        )
        await write_status(self.client, INSTANCES, obj, status)
        return Result(requeue_after=QUARANTINE_RECHECK)
