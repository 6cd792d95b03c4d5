"""The SandboxLease placement controller: one agent-sandbox SandboxClaim per admitted lease, and
the whole lifecycle of spec 3.2.

    Pending -> Provisioning -> Ready -> Releasing -> Released | Expired | Quarantined

- Pending: admitted by the API, no claim yet (the pool is missing or not yet served by a
  compatible agent-sandbox). Provisioning: the claim exists (named after the lease, owned by it,
  created atomically, so a replayed reconcile finds it instead of making a second), in the
  sandbox namespace (`--sandbox-namespace`, lessor.operator.core.ownership), which the lease's
  status records with every reference. Ready: the claim's Ready condition is True; the expiry is
  counted from that moment.
- Teardown starts for one of three causes, and the first one is written to `releaseCause` in
  the same status write that enters Releasing; nothing later rewrites it, so a release request
  after an expiry leaves the lease Expired. `provisioningDeadline` is the lease's
  creationTimestamp plus the timeout it was admitted with: a controller that was down, or a
  reconcile that was retried, computes the same instant.
- Releasing deletes the claim (uid precondition) and then checks that the claim, its sandbox,
  the sandbox's pod and its service are gone. Only then is the lease Released (cause Requested)
  or Expired (the two TTL causes). When cleanup is not verified within the teardown grace the
  lease is Quarantined with what was left behind as evidence; the SandboxPool counts it and the
  capacity stays withheld until an administrator cleans up.

- While Ready, `status.pod` follows the sandbox's pod: agent-sandbox replaces a pod that is
  deleted or evicted (same name, new uid), and executions, attach and port-forward go to the pod
  recorded there. The pods of the sandbox namespace are watched; a pod of a leased sandbox that
  changes makes its lease look again, and the lease records the sandbox's live pod, or none while
  there is none (the API then answers `target_unresolved`, retryable), with a TargetChanged event.

Every step is recomputed from stored objects, so a kill -9 anywhere is completed by the next
reconcile. agent-sandbox objects are read with direct GETs rather than informers: their CRDs may
be absent (the compatibility check then fails and nothing is placed), and an informer on a
missing resource would keep the operator from ever becoming ready. Pods are a core kind.
"""

from __future__ import annotations

import datetime
import logging

from lessor.operator.core import lease_metrics
from lessor.operator.core.compatibility import CompatibilityCache
from lessor.operator.core.kinds import (
    CLAIMS,
    PODS,
    SANDBOX_LEASES,
    SANDBOXES,
    SERVICES,
)
from lessor.operator.core.ownership import owned_by, owned_metadata
from lessor.operator.core.typed import Cached, Typed
from lessor.operator.core.writes import (
    add_finalizer,
    delete_fenced,
    remove_finalizer,
    without,
    write_status,
)
from lessor.operator.runtime.client import ConflictError, KubeClient, NotFoundError, ResourceType
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.events import EventRecorder
from lessor.operator.runtime.informer import Informer
from lessor.operator.runtime.store import key_of
from lessor.operator.sandbox.pools import BY_SANDBOX_POOL, child_name, index_by_sandbox_pool
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.phases import EndReason, ReleaseCause
from lessor.protocol.timestamps import now_seconds, timestamp, utcnow
from lessor.resources import labels
from lessor.resources.base import ObjectRef
from lessor.resources.lease_time import provisioning_deadline
from lessor.resources.sandbox import (
    DEFAULT_PROVISIONING_TIMEOUT,
    SandboxLease,
    SandboxLeaseStatus,
    SandboxPool,
)

log = logging.getLogger(__name__)

FINALIZER = "lessor.dev/sandbox-release"
POLL_SECONDS = 0.5  # agent-sandbox objects are polled, not watched (see the module docstring)
TOMBSTONE_RETENTION = datetime.timedelta(minutes=10)


def _ready(claim: Json) -> bool:
    """agent-sandbox's SandboxClaim is a foreign kind, read as kube-apiserver serves it."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in claim.get("status", {}).get("conditions", [])
    )


def _ref(obj: Json) -> ObjectRef:
    metadata = obj["metadata"]
    return ObjectRef(name=metadata["name"], uid=metadata["uid"], namespace=metadata["namespace"])


BY_SANDBOX = "sandbox"
BY_OWNER = "owner"


def index_by_sandbox(lease: Json) -> list[str]:
    """A placed lease under the name of its sandbox (what a sandbox pod's owner names). Raw, as
    every index function reads: it runs on each watch event, before any model is asked for."""
    name = (lease.get("status", {}).get("sandbox") or {}).get("name")
    return [name] if name else []


def index_by_owner(pod: Json) -> list[str]:
    """A pod under the uid of the Sandbox that owns it."""
    owners = pod["metadata"].get("ownerReferences", [])
    return [o["uid"] for o in owners if o.get("kind") == SANDBOXES.kind and "uid" in o]


def _status(lease: SandboxLease) -> SandboxLeaseStatus:
    """A copy of the lease's status to change and write: the cached model is shared."""
    return lease.status.model_copy(deep=True) if lease.status else SandboxLeaseStatus()


def setup(context: Context) -> Controller:
    """A lease is reconciled when it changes, and a pending one also when its pool does (the
    pool may now exist, or have its warm pool)."""
    settings = context.settings
    pools = context.cache(SandboxPool)
    leases = context.cache(
        SandboxLease, {BY_SANDBOX_POOL: index_by_sandbox_pool, BY_SANDBOX: index_by_sandbox}
    )
    # The pods of the sandbox namespace, by the Sandbox that owns them (others index nowhere).
    pods = context.manager.informer(context.client, PODS, namespace=settings.sandbox_namespace)
    pods.store.add_indexer(BY_OWNER, index_by_owner)
    reconciler = SandboxLeaseReconciler(
        context.client,
        leases=leases,
        pools=pools,
        pods=pods,
        events=context.events,
        compatibility=context.compatibility,
        sandboxes=settings.sandbox_namespace,
        teardown_grace=settings.teardown_grace,
        retention=settings.lease_retention,
    )

    def pending_of(pool: Json) -> list[str]:
        return [
            lease.key
            for lease in leases.by_index(BY_SANDBOX_POOL, key_of(pool))
            if SandboxLease.phases.waiting(lease.model.status.phase if lease.model.status else None)
        ]

    def placed_on(pod: Json) -> list[str]:
        owners = pod["metadata"].get("ownerReferences", [])
        sandboxes = [o["name"] for o in owners if o.get("kind") == SANDBOXES.kind]
        return [
            key_of(lease)
            for name in sandboxes
            for lease in leases.informer.store.by_index(BY_SANDBOX, name)
        ]

    return (
        context.controller(SandboxLease)
        .for_(leases, reconciler.reconcile)
        .watch(pools.informer, pending_of)
        .watch(pods, placed_on)
    )


class SandboxLeaseReconciler:
    def __init__(
        self,
        client: KubeClient,
        *,
        leases: Typed[SandboxLease],
        pools: Typed[SandboxPool],
        pods: Informer,
        events: EventRecorder,
        compatibility: CompatibilityCache,
        sandboxes: str,
        teardown_grace: datetime.timedelta,
        retention: datetime.timedelta | None,
    ) -> None:
        self.client = client
        self.leases = leases
        self.pools = pools
        self.pods = pods
        self.events = events
        self.teardown_grace = teardown_grace
        self.retention = retention
        self.compatibility = compatibility
        self.sandboxes = sandboxes

    async def reconcile(self, key: str, cached: Cached[SandboxLease] | None) -> Result:
        if cached is None:
            return Result()
        lease = cached.model
        if lease.spec.cancelled:
            return await self._expire_tombstone(cached.raw)
        phase = lease.status.phase if lease.status else None
        if phase in SandboxLease.phases.finished:
            return await self._ended(cached)
        if phase == "Quarantined":
            return Result()  # cleanup is uncertain: nothing is returned until a person acts
        return await self._active(cached, phase)

    async def _active(self, cached: Cached[SandboxLease], phase: str | None) -> Result:
        deleting = cached.deleting
        if not deleting:
            written = await add_finalizer(self.client, SANDBOX_LEASES, cached.raw, FINALIZER)
            cached = self.leases.decode(written)
        obj, lease = cached.raw, cached.model
        status = _status(lease)
        if phase == "Releasing":
            return await self._releasing(cached, status)
        now = utcnow()
        deadline = self._deadline(lease)
        if status.provisioning_deadline is None:
            status.provisioning_deadline = deadline.replace(microsecond=0)
        if status.effective_ttl is None:
            status.effective_ttl = lease.spec.effective_ttl or lease.spec.ttl
        cause = self._cause(lease, phase, now, deadline, deleting)
        if cause is not None:
            return await self._start_release(obj, status, cause)
        if phase == SandboxLease.phases.usable:
            return await self._ready(cached, status, now)
        return await self._provision(cached, status, now, deadline)

    # -- deciding -------------------------------------------------------------------------

    @staticmethod
    def _deadline(lease: SandboxLease) -> datetime.datetime:
        if lease.status and lease.status.provisioning_deadline:
            return lease.status.provisioning_deadline
        created = lease.metadata.creation_timestamp or utcnow()
        timeout = lease.spec.provisioning_timeout or DEFAULT_PROVISIONING_TIMEOUT
        return provisioning_deadline(created, timeout)

    def _expiry(self, lease: SandboxLease) -> datetime.datetime | None:
        status = lease.status
        if status is None or status.ready_at is None:
            return None
        return lease.spec.expires_at(status.ready_at)

    def _cause(
        self,
        lease: SandboxLease,
        phase: str | None,
        now: datetime.datetime,
        deadline: datetime.datetime,
        deleting: bool,
    ) -> ReleaseCause | None:
        """Why teardown starts now, if it does. A requested release and a passed deadline can
        both hold: whichever the lease's state reached first is the honest cause, and for a
        lease that is not yet Ready the deadline is checked first (it cannot be extended)."""
        if phase == SandboxLease.phases.usable:
            expiry = self._expiry(lease)
            if expiry is not None and now >= expiry:
                return "RuntimeTtl"
        elif now >= deadline:
            return "ProvisioningDeadline"
        if lease.spec.release_requested or deleting:
            return "Requested"
        return None

    # -- Pending and Provisioning --------------------------------------------------------

    async def _provision(
        self,
        cached: Cached[SandboxLease],
        status: SandboxLeaseStatus,
        now: datetime.datetime,
        deadline: datetime.datetime,
    ) -> Result:
        obj, lease = cached.raw, cached.model
        namespace = self.sandboxes
        name = obj["metadata"]["name"]
        until_deadline = max(0.0, (deadline - now).total_seconds())
        claim = await self._get(CLAIMS.path(namespace, name))
        if claim is not None and not owned_by(claim, obj):
            claim = None  # a stranger's claim of the same name: never adopted
        if claim is None:
            waiting = await self._why_not_placeable(obj["metadata"]["namespace"], lease.spec.pool)
            if waiting is not None:
                status.phase, status.message = "Pending", waiting
                await write_status(self.client, SANDBOX_LEASES, obj, status)
                return Result(requeue_after=min(5.0, until_deadline))
            claim = await self._create_claim(obj, lease.spec.pool)
            await self.events.record(
                obj, "Normal", "Provisioning", f"claimed from {lease.spec.pool}"
            )
        status.phase, status.claim = "Provisioning", _ref(claim)
        status.message = "waiting for the sandbox"
        if not _ready(claim):
            await write_status(self.client, SANDBOX_LEASES, obj, status)
            return Result(requeue_after=min(POLL_SECONDS, until_deadline))
        sandbox_name = claim.get("status", {}).get("sandbox", {}).get("name")  # foreign, as _ready
        sandbox = await self._get(SANDBOXES.path(namespace, sandbox_name)) if sandbox_name else None
        if sandbox is None:
            await write_status(self.client, SANDBOX_LEASES, obj, status)
            return Result(requeue_after=min(POLL_SECONDS, until_deadline))
        pod_name = (
            sandbox["metadata"]
            .get("annotations", {})
            .get("agents.x-k8s.io/pod-name", sandbox["metadata"]["name"])
        )
        pod = await self._get(PODS.path(namespace, pod_name))
        ready_at = now.replace(microsecond=0)
        expiry = lease.spec.expires_at(ready_at)
        status.phase, status.message = "Ready", ""
        status.ready_at, status.expires_at = ready_at, expiry.replace(microsecond=0)
        status.extensions_count = min(len(lease.spec.extensions), lease.spec.max_extensions)
        status.sandbox, status.pod = _ref(sandbox), _ref(pod) if pod else None
        obj = await self._transition(obj, status)
        await self.events.record(
            obj, "Normal", "Ready", f"sandbox {sandbox_name} until {timestamp(expiry)}"
        )
        return Result(requeue_after=max(0.0, (expiry - utcnow()).total_seconds()))

    async def _transition(self, obj: Json, status: SandboxLeaseStatus) -> Json:
        """The status write that moves the lease to another phase, counted once it succeeded
        (lessor.operator.core.lease_metrics)."""
        written = await write_status(self.client, SANDBOX_LEASES, obj, status)
        exists = self.pools.informer.store.get(index_by_sandbox_pool(obj)[0]) is not None
        before, after = self.leases.decode(obj).model, self.leases.decode(written).model
        lease_metrics.transition("sandbox", before, after, pool_exists=exists)
        return written

    async def _why_not_placeable(self, namespace: str, pool_name: str) -> str | None:
        verdict = await self.compatibility.verdict()
        if not verdict.ok:
            return verdict.reason
        pool = self.pools.get(f"{namespace}/{pool_name}")
        if pool is None:
            return f"SandboxPool {pool_name} does not exist"
        if pool.model.status is None or pool.model.status.warm_pool_ref is None:
            return f"SandboxPool {pool_name} has no warm pool yet"
        return None

    async def _create_claim(self, obj: Json, pool: str) -> Json:
        namespace, name = self.sandboxes, obj["metadata"]["name"]
        body = {
            "apiVersion": CLAIMS.api_version,
            "kind": CLAIMS.kind,
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {labels.SANDBOX_LEASE: name},
                **owned_metadata(obj, namespace),
            },
            "spec": {"warmPoolRef": {"name": child_name(pool)}},
        }
        try:
            return await self.client.create(CLAIMS.path(namespace), body)
        except ConflictError:
            existing = await self._get(CLAIMS.path(namespace, name))
            if existing is None or not owned_by(existing, obj):
                raise
            return existing  # created by an interrupted earlier pass

    # -- Ready -------------------------------------------------------------------------

    async def _ready(
        self, cached: Cached[SandboxLease], status: SandboxLeaseStatus, now: datetime.datetime
    ) -> Result:
        obj, lease = cached.raw, cached.model
        obj = await self._follow_pod(obj, status)
        expiry = self._expiry(lease)
        assert expiry is not None
        expires_at = expiry.replace(microsecond=0)
        applied = min(len(lease.spec.extensions), lease.spec.max_extensions)
        if status.expires_at != expires_at or status.extensions_count != applied:
            status.expires_at, status.extensions_count = expires_at, applied
            obj = await write_status(self.client, SANDBOX_LEASES, obj, status)
            if applied:
                await self.events.record(obj, "Normal", "Extended", f"expires {timestamp(expiry)}")
        return Result(requeue_after=max(0.0, (expiry - now).total_seconds()))

    async def _follow_pod(self, obj: Json, status: SandboxLeaseStatus) -> Json:
        """Record the sandbox's live pod (or none) if it is not the one recorded."""
        if status.sandbox is None:
            return obj
        live = [
            pod
            for pod in self.pods.store.by_index(BY_OWNER, status.sandbox.uid)
            if not pod["metadata"].get("deletionTimestamp")
        ]
        current = (
            _ref(max(live, key=lambda p: p["metadata"]["creationTimestamp"])) if live else None
        )
        recorded = status.pod
        if (current and current.uid) == (recorded and recorded.uid):
            return obj
        status.pod = current
        obj = await write_status(self.client, SANDBOX_LEASES, obj, status)
        if current is None:
            message = f"pod {recorded.name if recorded else ''} is gone; waiting for its successor"
            await self.events.record(obj, "Warning", "TargetChanged", message)
        else:
            await self.events.record(
                obj, "Normal", "TargetChanged", f"now pod {current.name} ({current.uid})"
            )
        return obj

    # -- Releasing -----------------------------------------------------------------------

    async def _start_release(
        self, obj: Json, status: SandboxLeaseStatus, cause: ReleaseCause
    ) -> Result:
        # The one place a cause is written, with the phase, in one fenced status write; a later
        # pass reads Releasing and never comes back here.
        status.phase, status.release_cause = "Releasing", status.release_cause or cause
        status.releasing_since = now_seconds()
        status.message = "revoking access and removing the sandbox"
        obj = await write_status(self.client, SANDBOX_LEASES, obj, status)
        await self.events.record(obj, "Normal", "Releasing", f"cause {status.release_cause}")
        cached = self.leases.decode(obj)
        return await self._releasing(cached, _status(cached.model))

    async def _releasing(self, cached: Cached[SandboxLease], status: SandboxLeaseStatus) -> Result:
        obj, lease = cached.raw, cached.model
        recorded = lease.status.claim if lease.status else None
        namespace = (recorded.namespace if recorded else None) or self.sandboxes
        left = await self._left_behind(namespace, cached)
        # Everything left is deleted directly, claim first, each with its uid as precondition,
        # rather than left to the garbage collector's cascade: that is only as quick as its view
        # of the agent-sandbox kinds (it learns of a new CRD at its next discovery, up to 30 s).
        for kind, found in left:
            if not found["metadata"].get("deletionTimestamp"):
                await delete_fenced(self.client, kind, found)
        if not left:
            final: EndReason = "Released" if status.release_cause == "Requested" else "Expired"
            status = without(status, "evidence")
            status.phase, status.message = final, "sandbox removed; cleanup verified"
            if status.ended_at is None:
                status.ended_at = now_seconds()
            obj = await self._transition(obj, status)
            await self.events.record(obj, "Normal", f"Lease{final}", status.message)
            if obj["metadata"].get("deletionTimestamp"):
                await remove_finalizer(self.client, SANDBOX_LEASES, obj, FINALIZER)
            return Result()
        since = lease.status.releasing_since if lease.status else None
        if since is not None and utcnow() - since > self.teardown_grace:
            evidence = [
                f"{kind.kind} {found['metadata']['name']} still exists" for kind, found in left
            ]
            status.phase, status.evidence = "Quarantined", evidence
            status.message = "cleanup could not be verified: " + "; ".join(evidence)
            obj = await self._transition(obj, status)
            await self.events.record(obj, "Warning", "TeardownQuarantined", status.message)
            return Result()
        return Result(requeue_after=POLL_SECONDS)

    async def _left_behind(
        self, namespace: str, cached: Cached[SandboxLease]
    ) -> list[tuple[ResourceType, Json]]:
        """Every object of this lease that still exists: its claim, and the sandbox, pod and
        service it was placed on, matched by uid (or, for the service, by owner), so that a
        successor of the same name is never mistaken for what was left."""
        obj, lease = cached.raw, cached.model
        left: list[tuple[ResourceType, Json]] = []
        claim = await self._get(CLAIMS.path(namespace, obj["metadata"]["name"]))
        if claim is not None and owned_by(claim, obj):
            left.append((CLAIMS, claim))
        status = lease.status
        sandbox_ref = status.sandbox if status else None
        if sandbox_ref is None and claim is not None and owned_by(claim, obj):
            # Released before Ready: the claim may already have a sandbox (foreign, as _ready).
            sandbox_name = claim.get("status", {}).get("sandbox", {}).get("name")
            sandbox = (
                await self._get(SANDBOXES.path(namespace, sandbox_name)) if sandbox_name else None
            )
            if sandbox is not None:
                left.append((SANDBOXES, sandbox))
        sandbox_uid = sandbox_ref.uid if sandbox_ref else None
        for kind, ref in ((SANDBOXES, sandbox_ref), (PODS, status.pod if status else None)):
            if ref is not None:
                found = await self._get(kind.path(namespace, ref.name))
                # A pod the sandbox recreated under the same name (its controller replaces a
                # deleted pod until the sandbox itself is gone) is this lease's all the same.
                if found is not None and (
                    found["metadata"]["uid"] == ref.uid or _owned_by_uid(found, sandbox_uid)
                ):
                    left.append((kind, found))
        # Every pod the sandbox owns, not only the one recorded: `status.pod` can be empty or
        # behind (the pod cache lagged when it was last followed), and a lease must not end
        # while a pod of its sandbox still runs.
        counted = {found["metadata"]["uid"] for _, found in left}
        for pod in self.pods.store.by_index(BY_OWNER, sandbox_uid) if sandbox_uid else []:
            if pod["metadata"]["uid"] not in counted:
                found = await self._get(PODS.path(namespace, pod["metadata"]["name"]))
                if found is not None and _owned_by_uid(found, sandbox_uid):
                    left.append((PODS, found))
        if sandbox_ref is not None:
            service = await self._get(SERVICES.path(namespace, sandbox_ref.name))
            if service is not None and _owned_by_uid(service, sandbox_uid):
                left.append((SERVICES, service))
        return left

    # -- ended leases and tombstones -----------------------------------------------------

    async def _ended(self, cached: Cached[SandboxLease]) -> Result:
        """Released or Expired: let a deletion through, else keep the lease for the retention
        period (its owner can still read how it ended), then delete it."""
        obj, lease = cached.raw, cached.model
        if cached.deleting:
            await remove_finalizer(self.client, SANDBOX_LEASES, obj, FINALIZER)
            return Result()
        if self.retention is None:
            return Result()
        ended = lease.status.ended_at if lease.status else None
        if ended is None:
            return Result()
        left = (ended + self.retention - utcnow()).total_seconds()
        if left > 0:
            return Result(requeue_after=left)
        await delete_fenced(self.client, SANDBOX_LEASES, obj)
        return Result()

    async def _expire_tombstone(self, obj: Json) -> Result:
        """A tombstone only has to outlive any create that could still be in flight (the API
        gives up on a create after seconds; Kubernetes times requests out after a minute)."""
        created = datetime.datetime.fromisoformat(obj["metadata"]["creationTimestamp"])
        left = (created + TOMBSTONE_RETENTION - utcnow()).total_seconds()
        if left > 0:
            return Result(requeue_after=left)
        await delete_fenced(self.client, SANDBOX_LEASES, obj)
        return Result()

    async def _get(self, path: str) -> Json | None:
        try:
            return await self.client.get(path)
        except NotFoundError:
            return None


def _owned_by_uid(obj: Json, owner_uid: str | None) -> bool:
    owners = obj["metadata"].get("ownerReferences") or []
    return owner_uid is not None and any(o.get("uid") == owner_uid for o in owners)
