"""/v1/leases: create, list, read, release and extend cluster leases (spec 4.1, 4.2).

The API writes only what a caller intends: a new ClusterLease, `spec.releaseRequested`, or one
more entry in `spec.extensions`, each fenced by the lease's uid and resourceVersion. Everything
else (binding, expiry, teardown) is the operator's; what the API must answer at once
(queue_position, expires_at) it computes from what is already stored, with the same functions
the operator uses.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Callable
from typing import TypeVar

from lessor import tracing
from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http import lifecycle, metrics
from lessor.apiserver.http.bodies import CreateLease, ExtendLease
from lessor.apiserver.http.errors import (
    ForbiddenError,
    HttpConflictError,
    HttpNotFoundError,
    TooManyRequestsError,
)
from lessor.apiserver.leases.aliases import by_alias
from lessor.apiserver.leases.reservations import Reservations
from lessor.apiserver.policy.evaluation import effective_ttl, grant_for
from lessor.apiserver.policy.extension_ceiling import refuse_past_ceiling
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.fencing import append_operation, fenced_patch, retry_on_conflict
from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.durations import format_duration, parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.lease_ids import looks_like_an_id
from lessor.protocol.responses import ClusterHealth, Expiry, Lease, LeaseCreated, LeaseSummary
from lessor.protocol.timestamps import now_seconds, timestamp
from lessor.resources import labels
from lessor.resources.base import Condition, ObjectMeta, instant_json, json_pointer
from lessor.resources.cluster import (
    CLUSTER_HEALTHY,
    LEASE_FINALIZER,
    ClusterLease,
    ClusterLeaseSpec,
    ClusterPool,
    Extension,
)

SummaryT = TypeVar("SummaryT", bound=LeaseSummary)
# A Kubernetes object name (DNS subdomain): anything else in a path cannot name a lease or pool.
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# The longest a GET may wait for its lease to change (`waitSeconds`): under the idle timeout of
# the load balancers in front of the API (60 s is common), and of the graceful shutdown's 25 s
# a stopping worker cuts short anyway.
MAX_WAIT_SECONDS = 30
# A waiting request looks up at least this often (seconds): whether its worker is stopping, and,
# while the watch is down and announces no change, what kube-apiserver has.
WAIT_SLICE = 1.0


def requester_label(identity: str) -> str:
    """A label value standing for an identity (identities may hold characters labels cannot)."""
    return hashlib.sha256(identity.encode()).hexdigest()[:40]


def watch_active_leases(kube_factory: Callable[[], Kube]) -> WatchedObjects:
    """The ClusterLeases this process keeps in memory, indexed by their requester's label: the
    leases that are not finished. A day of ended leases (100,000 CI jobs' worth) is read by
    nobody often enough to be worth the memory of every worker and a list of it at every
    start; one is read from kube-apiserver when asked for."""
    return WatchedObjects(
        kube_factory,
        ClusterLease.crd.plural,
        field_selector=ClusterLease.phases.unfinished_selector(),
        index=lambda lease: lease["metadata"].get("labels", {}).get(labels.REQUESTER),
    )


def _phase(lease: ClusterLease) -> str | None:
    """The lease's phase; None until the operator has seen it."""
    return lease.status.phase if lease.status is not None else None


def _cluster_health(conditions: list[Condition]) -> ClusterHealth | None:
    """The lease's ClusterHealthy condition as the API shows it, once the operator wrote one."""
    for condition in conditions:
        if condition.type == CLUSTER_HEALTHY:
            return ClusterHealth(
                healthy=condition.status == "True",
                since=instant_json(condition.last_transition_time),
                message=condition.message,
            )
    return None


def _summary(kind: type[SummaryT], lease: ClusterLease) -> SummaryT:
    """What the owner sees of a lease in a listing, and first of it alone (`kind`: Lease). Its
    `expires_at` is null until the lease is bound; the alias lets a client find its named
    lease."""
    expires_at = lease.status.expires_at if lease.status is not None else None
    summary = kind(
        id=lease.metadata.name,
        phase=_phase(lease) or "Pending",
        profile=lease.spec.pool,
        expires_at=None if expires_at is None else instant_json(expires_at),
    )
    if lease.spec.alias is not None:
        summary.alias = lease.spec.alias
    return summary


class LeaseService:
    def __init__(
        self,
        kube: Kube,
        limiter: AdmissionLimiter,
        default_ceiling: int,
        watched_leases: WatchedObjects,
        watched_pools: WatchedObjects,
    ) -> None:
        """`watched_*`: the ClusterLeases and ClusterPools as this process watches them, which
        reads that may lag a moment are served from."""
        self.kube = kube
        self.watched_leases, self.watched_pools = watched_leases, watched_pools
        # Creates per principal and replica: each one is several writes to kube-apiserver, so a
        # caller in a loop must not take every replica's capacity (429 with Retry-After).
        self.limiter = limiter
        # default_ceiling: active leases an owner may hold where its rule sets no
        # maxConcurrentLeases.
        self.reservations = Reservations(kube, ClusterLease, default_ceiling)

    # -- helpers ---------------------------------------------------------------------------

    def usable(self, principal: Principal, lease_id: str, *, fresh: bool = False) -> ClusterLease:
        """The caller's lease while its policy still grants the lease's pool: one that no
        longer does is not served (404, as a Sandbox lease out of the caller's scope), so an
        administrator narrowing a policy cuts off kubeconfigs and extensions at once.
        `fresh`: read from kube-apiserver, not the watch (what a fenced write starts from)."""
        lease = self.owned(principal, lease_id, fresh=fresh)
        if not self.granted(principal, lease.spec.pool):
            raise HttpNotFoundError(f"no lease {lease_id}")
        return lease

    @staticmethod
    def granted(principal: Principal, pool: str) -> bool:
        """Whether the caller's policy still grants `pool` (a lease's, or a kept bundle's)."""
        return grant_for(principal.policy.spec, principal.claims, pool) is not None

    def owned(self, principal: Principal, lease_id: str, *, fresh: bool = False) -> ClusterLease:
        """The caller's lease; another identity's lease is indistinguishable from none (404).
        Release takes it even out of the policy's grant (ending a lease never hurts)."""
        if not OBJECT_NAME.match(lease_id):
            raise HttpNotFoundError(f"no lease {lease_id[:80]}")
        if fresh:
            found = self.kube.find_model(ClusterLease, lease_id)
        else:
            read = self.watched_leases.read(lease_id)
            found = None if read is None else ClusterLease.model_validate(read)
        if found is None and not looks_like_an_id(lease_id):
            found = self._by_alias(principal, lease_id)
        if found is None or found.spec.requester != principal.owner:
            raise HttpNotFoundError(f"no lease {lease_id}")
        return found

    def _by_alias(self, principal: Principal, alias: str) -> ClusterLease | None:
        """The caller's lease `alias` names: its active one, from the watch when there is one
        there; else from every lease of the caller's, ended ones included (aliases.py)."""
        active = ClusterLease.phases.holds_slot
        watched = self.watched_leases.indexed(requester_label(principal.owner))
        if watched is not None:
            live = [lease for lease in self._own(principal, watched) if active(_phase(lease))]
            if (found := by_alias(live, alias, active)) is not None:
                return found
        return by_alias(self._all_mine(principal), alias, active)

    def _active_mine(self, principal: Principal) -> list[ClusterLease]:
        """The caller's leases that are not finished (and, read from kube-apiserver, finished
        ones too: callers filter by phase). From this worker's watch, as a single lease is,
        with the same freshness: this worker's own writes at once, the operator's and other
        workers' a watch event later (milliseconds); from a consistent list while the watch
        cannot vouch for them (not synced, or a write of this worker not yet back)."""
        watched = self.watched_leases.indexed(requester_label(principal.owner))
        return self._all_mine(principal) if watched is None else self._own(principal, watched)

    def _all_mine(self, principal: Principal) -> list[ClusterLease]:
        """Every lease of the caller's, ended ones included (until the operator deletes them),
        from a consistent list."""
        selector = f"{labels.REQUESTER}={requester_label(principal.owner)}"
        return self._own(principal, self.kube.list_objects(ClusterLease.crd.plural, selector))

    @staticmethod
    def _own(principal: Principal, leases: list[Json]) -> list[ClusterLease]:
        """The caller's own of `leases`, by the requester their spec names: the label they were
        selected by is only a digest of it, which anyone who can write a lease can set."""
        validated = [ClusterLease.model_validate(lease) for lease in leases]
        return [lease for lease in validated if lease.spec.requester == principal.owner]

    def pool(self, name: str) -> ClusterPool:
        if not OBJECT_NAME.match(name):
            raise HttpNotFoundError(f"no pool {name[:80]}")
        found = self.watched_pools.read(name)
        if found is None:
            raise HttpNotFoundError(f"no pool {name}")
        return ClusterPool.model_validate(found)

    # -- create ----------------------------------------------------------------------------

    def create(self, principal: Principal, request: CreateLease) -> LeaseCreated:
        pool_name = request.pool_name
        grant = grant_for(principal.policy.spec, principal.claims, pool_name)
        if grant is None:
            raise ForbiddenError(
                f"{principal.identity} may not lease from {pool_name}", reason="forbidden"
            )
        decision = self.limiter.take(principal.owner)
        if not decision.allowed:
            metrics.LEASE_ADMISSION_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("lease requests", decision.retry_after)
        pool = self.pool(pool_name)
        ttl = effective_ttl(request.ttl, pool.spec.ttl, grant)
        name = f"l{secrets.token_hex(6)}"
        mine = self.watched_leases.indexed(requester_label(principal.owner), with_unseen=True)
        taken = self.reservations.take(
            principal.owner,
            grant.max_concurrent_leases,
            name,
            request.alias,
            too_many=lambda ceiling: (
                f"{principal.identity} holds {ceiling} active leases, the most its policy allows"
            ),
            alias_used=f"alias {request.alias} is already used by one of your active leases",
            active=None
            if mine is None
            else [
                lease
                for lease in map(ClusterLease.model_validate, mine)
                if ClusterLease.phases.holds_slot(_phase(lease))
            ],
        )
        try:
            lease = ClusterLease(
                metadata=ObjectMeta(
                    name=name,
                    finalizers=[LEASE_FINALIZER],
                    annotations={
                        **Reservations.annotation(taken),
                        **tracing.carried(),  # the operator's spans join this trace
                    },
                    labels={
                        labels.REQUESTER: requester_label(principal.owner),
                        labels.POOL: pool_name,
                    },
                ),
                spec=ClusterLeaseSpec(
                    pool=pool_name,
                    ttl=ttl,
                    requester=principal.owner,
                    max_extensions=grant.max_extensions,
                    max_ttl=None if grant.max_ttl is None else format_duration(grant.max_ttl),
                    alias=request.alias or None,
                    metadata=request.metadata,
                ),
            )
            created = self.kube.create(ClusterLease.crd.plural, lease.manifest())
        except BaseException:
            for reservation in taken:
                self.reservations.release(reservation)
            raise
        self._wrote(created)
        answer = LeaseCreated(
            id=name,
            phase="Pending",
            profile=pool_name,
            # Behind every lease the operator last counted as waiting: one read already made,
            # where counting them here meant listing every lease the pool ever had.
            queue_position=(pool.status.queue_depth if pool.status else 0) + 1,
            effective_ttl=ttl,
        )
        if request.alias:
            answer.alias = request.alias
        if request.metadata is not None:
            answer.metadata = request.metadata
        return answer

    # -- read ------------------------------------------------------------------------------

    def list_mine(self, principal: Principal) -> list[LeaseSummary]:
        return [
            _summary(LeaseSummary, lease)
            for lease in self._active_mine(principal)
            if ClusterLease.phases.holds_slot(_phase(lease))
            and self.granted(principal, lease.spec.pool)
        ]

    def read(
        self,
        principal: Principal,
        lease_id: str,
        wait: float = 0.0,
        gone: Callable[[], bool] = lambda: False,
    ) -> Lease:
        """The caller's lease as the API shows it. `wait` (seconds): a Pending lease is answered
        when it changes (bound, a new queue position, released), or after that long: a client
        waiting for its cluster learns of it the moment it is bound, with one request where
        polling cost one every few milliseconds (issue 19). A lease in any other phase is
        answered at once: what a waiting client waits for has happened, and nothing it needs
        would change (a wait there lasted the whole `wait` when the lease was bound before the
        client's first GET). `gone`: whether the client hung up, which ends the wait (its
        answer goes nowhere)."""
        first = self._answer(principal, lease_id)
        if wait <= 0 or first.phase != "Pending":
            return first
        deadline = time.monotonic() + wait
        with (
            metrics.LEASES_WAITING.track_inprogress(),
            self.watched_leases.changes(first.id) as changed,
        ):
            current = self._answer(principal, first.id)  # changed before `changes` began
            while current == first:
                left = deadline - time.monotonic()
                if left <= 0 or lifecycle.stopping() or gone():
                    break
                watched = self.watched_leases.synced()
                if changed.wait(min(left, WAIT_SLICE)) or not watched:
                    changed.clear()
                    current = self._answer(principal, first.id)
            return current

    def _answer(self, principal: Principal, lease_id: str) -> Lease:
        lease = self.usable(principal, lease_id)
        answer = _summary(Lease, lease)
        if lease.spec.metadata is not None:
            answer.metadata = lease.spec.metadata
        status = lease.status
        if status is None:
            return answer
        if answer.phase == "Pending" and status.queue_position:
            answer.queue_position = status.queue_position
        if answer.phase == ClusterLease.phases.usable:
            secret_name = status.kubeconfig_secret or ""
            value = self.kube.secret_value(self.kube.namespace, secret_name, "kubeconfig")
            if value:
                answer.kubeconfig = value
            health = _cluster_health(status.conditions)
            if health is not None:
                answer.cluster_health = health
        return answer

    # -- release and extend -----------------------------------------------------------------

    def release(self, principal: Principal, lease_id: str) -> None:
        def attempt() -> None:
            lease = self.owned(principal, lease_id, fresh=True)
            phase = _phase(lease)
            if phase == "Quarantined":
                raise HttpConflictError(
                    "the lease's cluster could not be verified as cleaned up; cleanup evidence "
                    "is kept for an administrator",
                    reason="teardown_quarantined",
                    error="TeardownQuarantined",
                )
            if phase in ClusterLease.phases.finished or lease.spec.release_requested:
                return
            path = json_pointer("spec", "release_requested", model=ClusterLease)
            self._wrote(
                fenced_patch(self.kube, lease, [{"op": "add", "path": path, "value": True}])
            )

        retry_on_conflict(attempt, doing="releasing it")

    def _wrote(self, lease: Json) -> None:
        self.watched_leases.wrote(lease)

    def extend(self, principal: Principal, lease_id: str, request: ExtendLease) -> Expiry:
        # A concurrent extension that wins makes the next attempt count against the fresh lease.
        def attempt() -> Expiry:
            lease = self.usable(principal, lease_id, fresh=True)
            status = lease.status
            usable = ClusterLease.phases.usable
            if status is None or status.phase != usable or status.bound_at is None:
                raise HttpConflictError(
                    f"only a {usable} lease can be extended", reason="not_ready"
                )
            if len(lease.spec.extensions) >= lease.spec.max_extensions:
                raise HttpConflictError(
                    f"this lease allows {lease.spec.max_extensions} extensions and has used them",
                    reason="extension_budget_exhausted",
                )
            ttl = lease.effective_ttl()
            if lease.spec.max_ttl:
                refuse_past_ceiling(
                    expiry=lease.spec.expires_at(status.bound_at, ttl),
                    extension=parse_duration(request.extend_ttl),
                    ceiling=status.bound_at + parse_duration(lease.spec.max_ttl),
                    start="binding",
                )
            extension = Extension(ttl=request.extend_ttl, requested_at=now_seconds())
            operation = append_operation(
                json_pointer("spec", "extensions", model=ClusterLease),
                lease.spec.extensions,
                extension.model_dump(mode="json", by_alias=True, exclude_none=True),
            )
            patched = fenced_patch(self.kube, lease, [operation])
            self._wrote(patched)
            updated = ClusterLease.model_validate(patched)
            return Expiry(expires_at=timestamp(updated.spec.expires_at(status.bound_at, ttl)))

        return retry_on_conflict(attempt, doing="extending it")
