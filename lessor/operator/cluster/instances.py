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

from lessor.operator.addons.charts import Charts, helm_binary
from lessor.operator.addons.preparation import Gate, Preparation
from lessor.operator.backends.base import BackendError, ClusterBackend, InstanceRef, Readiness
from lessor.operator.backends.registry import Backends
from lessor.operator.cluster import cluster_metrics
from lessor.operator.core import lease_traces
from lessor.operator.core.conditions import find, is_false, with_condition
from lessor.operator.core.kinds import (
    BY_CLAIM,
    INSTANCE_FINALIZER,
    INSTANCES,
    SECRETS,
    index_by_claim,
)
from lessor.operator.core.typed import Cached, Typed
from lessor.operator.core.writes import (
    add_finalizer,
    delete_fenced,
    owner_reference,
    remove_finalizer,
    write_status,
)
from lessor.operator.runtime.client import ConflictError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.wiring.context import Context
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import now_seconds, utcnow
from lessor.resources import labels
from lessor.resources.addons import ADDONS_APPLIED
from lessor.resources.cluster import (
    INSTANCE_HEALTHY,
    ClusterInstance,
    ClusterInstanceStatus,
    ClusterLease,
    ClusterPool,
    HealthCheck,
    Teardown,
)

log = logging.getLogger(__name__)

QUARANTINE_RECHECK = 60.0
# A cluster that failed a check is checked again this soon (or at its period, if sooner): its
# lease, if it has one, learns of a recovery within seconds.
FAILING_RECHECK = 5.0


def _seconds(duration: str) -> float:
    return parse_duration(duration).total_seconds()


def _result(passed: bool) -> str:
    return "ready" if passed else "not_ready"


def _status(instance: ClusterInstance) -> ClusterInstanceStatus:
    """A copy of the instance's status to change and write: the cached model is shared."""
    return instance.status.model_copy(deep=True) if instance.status else ClusterInstanceStatus()


def kubeconfig_secret_name(instance_name: str) -> str:
    return f"{instance_name}-kubeconfig"


def setup(context: Context) -> Controller:
    """An instance is reconciled when it changes and when the lease that claims it does (a
    claiming lease that is gone orphans the reservation)."""
    settings = context.settings
    instances = context.cache(ClusterInstance, {BY_CLAIM: index_by_claim})
    leases = context.cache(ClusterLease)
    reconciler = InstanceReconciler(
        context.client,
        leases=leases,
        pools=context.cache(ClusterPool),
        backends=context.backends,
        events=context.events,
        teardown_grace=settings.teardown_grace,
        start_timeout=settings.start_timeout,
        preparation=Preparation(
            context.client, settings.namespace, Charts(helm_binary(settings.helm))
        ),
    )

    def claimed_by(lease: Json) -> list[str]:
        uid = lease["metadata"].get("uid", "")
        return [instance.key for instance in instances.by_index(BY_CLAIM, uid)]

    return (
        context.controller(ClusterInstance)
        .for_(instances, reconciler.reconcile)
        .watch(leases.informer, claimed_by)
    )


class InstanceReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        leases: Typed[ClusterLease],
        pools: Typed[ClusterPool],
        backends: Backends,
        events: EventRecorder,
        teardown_grace: datetime.timedelta = datetime.timedelta(minutes=2),
        start_timeout: datetime.timedelta = datetime.timedelta(minutes=5),
        preparation: Preparation,
    ) -> None:
        self.preparation = preparation
        self.start_timeout = start_timeout
        self.teardown_grace = teardown_grace
        self.client = client
        self.leases = leases
        self.pools = pools
        self.backends = backends
        self.events = events
        # key -> (uid, monotonic time, passed) of the last check of a cluster that was ready,
        # this process's own: a new leader checks every cluster at its first pass.
        self._checked: dict[str, tuple[str, float, bool]] = {}

    async def reconcile(self, key: str, cached: Cached[ClusterInstance] | None) -> Result:
        if cached is None:
            self._checked.pop(key, None)
            return Result()
        obj, instance = cached.raw, cached.model
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
        health = self._health_check(instance)
        if (due := self._next_check(key, instance, health)) > 0:
            return await self._between_checks(obj, instance, status, key, due)
        failure, failing, readiness = await self._check(obj, instance, ref, backend, status)
        passed = readiness.ready and failing is None
        if status.phase in ClusterInstance.phases.checked or passed:
            self._checked[key] = (meta.uid or "", time.monotonic(), passed)
        if passed:
            return await self._healthy(obj, instance, status, readiness.message, health)
        if status.phase in ClusterInstance.phases.checked:
            result = await self._failing(obj, instance, status, health)
        else:
            lasting = failing is not None and failing.lasting
            result = await self._starting(obj, instance, status, lasting=lasting)
        if failure is not None:
            raise failure
        return result

    async def _check(
        self,
        obj: Json,
        instance: ClusterInstance,
        ref: InstanceRef,
        backend: ClusterBackend,
        status: ClusterInstanceStatus,
    ) -> tuple[BackendError | None, Gate | None, Readiness]:
        """One check, its findings set in `status`: the backend's (provisioning first, until
        the cluster was first ready), then, once the cluster serves, its readiness gates.
        Returns the backend's error (raised after the status is written, for the
        controller's backoff), the first gate that did not pass, and the backend's verdict."""
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
            # breaks is reported).
            failure, readiness = error, Readiness(False, str(error), status.backend_details)
        status.backend_details = readiness.details
        if "endpoint" in readiness.details:
            status.endpoint = readiness.details["endpoint"]
        status.message = readiness.message
        failing: Gate | None = None
        if readiness.ready:
            admin = await self._publish_kubeconfig(obj, ref, backend)
            failing = await self._gates(instance, status, admin)
            if failing is not None:
                status.message = f"{failing.type}: {failing.message}"
        passed = readiness.ready and failing is None
        cluster_metrics.CHECKS.labels(ref.namespace, instance.spec.pool, _result(passed)).inc()
        return failure, failing, readiness

    def _health_check(self, instance: ClusterInstance) -> HealthCheck:
        """The pool's health check as it is now (not a copy made with the instance: a change
        applies at the next check), the default if the pool is gone."""
        pool = self.pools.get(f"{instance.metadata.namespace}/{instance.spec.pool}")
        return pool.model.spec.health_check if pool else HealthCheck()

    def _next_check(self, key: str, instance: ClusterInstance, health: HealthCheck) -> float:
        """Seconds until a cluster that was ready is due for its next check: a period after one
        it passed, FAILING_RECHECK after one it failed (each failure counts toward the
        threshold, so a pass brought about by the failure's own status write must not check
        again). 0 when it is due now, or was never ready (a starting cluster is checked at
        every pass)."""
        uid, at, passed = self._checked.get(key, ("", 0.0, False))
        status = instance.status
        if (
            uid != instance.metadata.uid
            or status is None
            or status.phase not in ClusterInstance.phases.checked
        ):
            return 0.0
        period = _seconds(health.period)
        interval = period if passed else min(FAILING_RECHECK, period)
        return max(0.0, at + interval - time.monotonic())

    async def _between_checks(
        self,
        obj: Json,
        instance: ClusterInstance,
        status: ClusterInstanceStatus,
        key: str,
        due: float,
    ) -> Result:
        """A change of a cluster checked less than an interval ago: its claim taken or dropped
        (the phase of a passing one says so), or this reconciler's own status write coming
        back. Checking it again for that cost the namespace backend five requests per lease,
        on the path of every other lease bound at the same moment (issue 45); the check keeps
        its interval instead."""
        if self._checked[key][2] and not is_false(status.conditions, INSTANCE_HEALTHY):
            status.phase = "Leased" if instance.spec.claim_ref else "Ready"
            await write_status(self.client, INSTANCES, obj, status)
        return Result(requeue_after=due)

    async def _starting(
        self,
        obj: Json,
        instance: ClusterInstance,
        status: ClusterInstanceStatus,
        *,
        lasting: bool = False,
    ) -> Result:
        """A new cluster, not ready yet. Past `start_timeout`, or at once for a failure that
        waiting cannot mend (`lasting`: an addon the API refuses), it failed to start:
        Unhealthy, which its pool replaces, pausing longer after each failure in a row
        (lessor.operator.cluster.pools)."""
        created = instance.metadata.creation_timestamp or utcnow()
        timed_out = utcnow() - created > self.start_timeout
        failed = timed_out or lasting
        turned = failed and status.phase != "Unhealthy"
        status.phase = "Unhealthy" if failed else "Creating"
        obj = await write_status(self.client, INSTANCES, obj, status)
        if turned:
            seconds = self.start_timeout.total_seconds()
            message = status.message
            why = f"not ready after {seconds:.0f}s: {message}" if timed_out else message
            await self.events.record(obj, "Warning", "FailedToStart", why)
            cluster_metrics.failed_to_start(instance, "timeout" if timed_out else "addon_failed")
        return Result(requeue_after=5.0 if failed else 1.0)

    async def _gates(
        self, instance: ClusterInstance, status: ClusterInstanceStatus, admin: str
    ) -> Gate | None:
        """The first of the instance's readiness gates that does not pass, each gate's condition
        set in `status`; None when all pass. A leased cluster is its tenant's: what they do to
        it is theirs, so its gates are not asked again (its API still is, by the backend)."""
        spec = instance.spec
        if spec.claim_ref or not (spec.addons or spec.readiness_gates):
            return None
        applied = find(status.conditions, ADDONS_APPLIED)
        gates = await self.preparation.gates(
            admin, spec, applied=applied is not None and applied.status == "True"
        )
        for gate in gates:
            status.conditions = with_condition(
                status.conditions, gate.type, gate.passed, gate.reason, gate.message,
                generation=instance.metadata.generation,
            )  # fmt: skip
        return next((gate for gate in gates if not gate.passed), None)

    async def _healthy(
        self,
        obj: Json,
        instance: ClusterInstance,
        status: ClusterInstanceStatus,
        message: str,
        health: HealthCheck,
    ) -> Result:
        status.kubeconfig_secret = kubeconfig_secret_name(instance.metadata.name or "")
        status.failed_checks = 0
        first_ready = status.ready_at is None
        if first_ready:
            status.ready_at = now_seconds()
        recovered = is_false(status.conditions, INSTANCE_HEALTHY)
        was_ready = status.phase in ClusterInstance.phases.checked
        status.phase = "Leased" if instance.spec.claim_ref else "Ready"
        status.conditions = with_condition(
            status.conditions, INSTANCE_HEALTHY, True, "HealthCheckPassed", message,
            generation=instance.metadata.generation,
        )  # fmt: skip
        obj = await write_status(self.client, INSTANCES, obj, status)
        if first_ready:
            cluster_metrics.started(instance)
        if recovered:
            await self.events.record(obj, "Normal", "Recovered", message)
        elif not was_ready:
            await self.events.record(obj, "Normal", "Ready", message)
        return Result(requeue_after=_seconds(health.period))

    async def _failing(
        self,
        obj: Json,
        instance: ClusterInstance,
        status: ClusterInstanceStatus,
        health: HealthCheck,
    ) -> Result:
        """A cluster that was ready fails its check. Its Healthy condition turns False at once
        (no new lease binds it); it becomes Unhealthy only once it has failed the pool's
        `healthCheck.failureThreshold` checks in a row, so that one slow answer does not cost a
        warm cluster. The count is in the status: a new leader goes on from it. A leased
        cluster is never torn down for it (the pool replaces only unclaimed ones): its lease
        reports it and it stays until the lease ends."""
        message = status.message
        status.conditions = with_condition(
            status.conditions, INSTANCE_HEALTHY, False, "HealthCheckFailed", message,
            generation=obj["metadata"].get("generation"),
        )  # fmt: skip
        status.failed_checks += 1
        turned = False
        if status.failed_checks >= health.failure_threshold:
            turned, status.phase = status.phase != "Unhealthy", "Unhealthy"
        obj = await write_status(self.client, INSTANCES, obj, status)
        if turned:
            await self.events.record(
                obj,
                "Warning",
                "Unhealthy",
                f"{status.failed_checks} checks failed in a row: {message}",
            )
        return Result(requeue_after=min(FAILING_RECHECK, _seconds(health.period)))

    def _trace_teardown(self, instance: ClusterInstance, started_at: datetime.datetime) -> None:
        """The teardown, verified, as a span of the trace of the lease that held the cluster."""
        claim = instance.spec.claim_ref
        if claim is None:
            return
        lease = self.leases.get(f"{instance.metadata.namespace}/{claim.name}")
        if lease is None or lease.uid != claim.uid:
            return
        cluster = {
            "lessor.cluster.name": instance.metadata.name or "",
            "lessor.backend.type": instance.spec.backend.type,
        }
        lease_traces.record("cluster.teardown", lease.model, started_at, attributes=cluster)

    def _claim_is_orphaned(self, instance: ClusterInstance) -> bool:
        claim = instance.spec.claim_ref
        assert claim is not None
        lease = self.leases.get(f"{instance.metadata.namespace}/{claim.name}")
        return lease is None or lease.uid != claim.uid

    async def _publish_kubeconfig(
        self, obj: Json, ref: InstanceRef, backend: ClusterBackend
    ) -> str:
        """The cluster's admin kubeconfig, published in its Secret."""
        name = kubeconfig_secret_name(ref.name)
        # Published on an earlier pass (a cluster's credentials never change): a read first, so
        # that a pass after a crash writes nothing it need not (a kubeconfig may cost a write:
        # a token request).
        with contextlib.suppress(NotFoundError):
            published = await self.client.get(SECRETS.path(ref.namespace, name))
            return base64.b64decode(published.get("data", {}).get("kubeconfig", "")).decode()
        kubeconfig = await backend.kubeconfig(ref)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": ref.namespace,
                "labels": {labels.INSTANCE: ref.name},
                "ownerReferences": [owner_reference(obj)],
            },
            "type": "Opaque",
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
        }
        with contextlib.suppress(ConflictError):
            await self.client.create(SECRETS.path(ref.namespace), secret)
        return kubeconfig

    async def _tear_down(self, obj: Json, instance: ClusterInstance, ref: InstanceRef) -> Result:
        if INSTANCE_FINALIZER not in instance.metadata.finalizers:
            return Result()
        backend = self.backends.for_spec(instance.spec.backend)
        status = _status(instance)
        if status.phase not in ClusterInstance.phases.ending:
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
            cluster_metrics.torn_down(instance, started_at)
            self._trace_teardown(instance, started_at)
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
