"""/v1/sandbox-leases: admission, idempotency, the handoff variant, read, extend, release, logs
(spec 4.3, 4.4, 7.2).

Like the cluster lease API, this one writes only intents: a new SandboxLease (with what the
caller's grant allowed, so the operator never needs the caller's claims), `releaseRequested`,
or one more extension, each fenced. The placement controller owns every phase.

Idempotency. A keyed create's lease name is a digest of the identity and the key, so a keyed
retry, a concurrent identical request and a request on another replica all meet on one name,
and the Kubernetes create is the one atomic decision among them; the loser reads the winner
and answers with the same lease, or 409 when the pool, TTL or alias differ. An unkeyed create
gets a random name.

Handoff. When the create's outcome cannot be classified (the Kubernetes API timed out, reset
the connection or failed with a 5xx after the request was sent) the lease may or may not exist.
A worker that is shutting down waits for its create only SHUTDOWN_CREATE_TIMEOUT, so that its
caller gets an answer before gunicorn's graceful time runs out, and hands off what it did not
confirm. The answer is
the usual 202 plus `status: admission_pending`, `retry: false` and `statusUrl`. The arbiter is
the store itself: the first read, release or extension of that id that finds nothing creates a
tombstone of the same name (a SandboxLease with `cancelled: true`, which nothing treats as a
lease), so a create still in flight can no longer land: it was cancelled, and every later
request for the id is 404. If the create did land first, the tombstone's create fails and the
lease is admitted and served as usual. The operator deletes tombstones after ten minutes, long
after any create could still arrive.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http import lifecycle, metrics
from lessor.apiserver.http.bodies import CreateSandboxLease, ExtendSandboxLease
from lessor.apiserver.http.errors import (
    BadRequestError,
    ForbiddenError,
    HttpConflictError,
    HttpNotFoundError,
    TooManyRequestsError,
    UnavailableError,
)
from lessor.apiserver.leases.aliases import by_alias
from lessor.apiserver.leases.cluster_leases import OBJECT_NAME, requester_label
from lessor.apiserver.leases.reservations import Reservation, Reservations
from lessor.apiserver.policy.evaluation import ceiling_exceeded, matches, sandbox_grant, sandbox_ttl
from lessor.apiserver.policy.extension_ceiling import refuse_past_ceiling
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.fencing import append_operation, fenced_patch, retry_on_conflict
from lessor.apiserver.state.kube import TIMEOUT, Kube
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.lease_ids import SANDBOX_LEASE_ID, looks_like_an_id
from lessor.protocol.responses import (
    PlacementRef,
    SandboxExpiry,
    SandboxLeaseCreated,
    SandboxLogs,
    SandboxPlacement,
)
from lessor.protocol.responses import SandboxLease as SandboxLeaseView
from lessor.protocol.sandbox_limits import LOG_BYTES_MAX
from lessor.protocol.timestamps import now_seconds, timestamp, utcnow
from lessor.resources import labels
from lessor.resources.access_policy import SandboxGrant
from lessor.resources.base import (
    ObjectMeta,
    ObjectRef,
    instant_json,
    json_pointer,
    problems_for_tenants,
)
from lessor.resources.cluster import Extension
from lessor.resources.lease_time import provisioning_deadline
from lessor.resources.sandbox import (
    DEFAULT_PROVISIONING_TIMEOUT,
    SandboxLease,
    SandboxLeaseSpec,
    SandboxLeaseStatus,
    SandboxPool,
)

PATH = "/v1/sandbox-leases"
SHUTDOWN_CREATE_TIMEOUT = 2.0  # seconds; gunicorn's graceful timeout is 25 by default
TOMBSTONE_POOL = "cancelled"
TOMBSTONE_LABEL = "lessor.dev/tombstone"
# A view of a lease that carries its terms (effective_ttl, alias): the 202 of a create, or GET's.
ViewT = TypeVar("ViewT", SandboxLeaseCreated, SandboxLeaseView)


def lease_id(identity: str, key: str | None) -> str:
    if key is None:
        return "s" + secrets.token_hex(12)
    return "s" + hashlib.sha256(f"{identity}\0{key}".encode()).hexdigest()[:24]


def _unknown_outcome(error: ApiException) -> bool:
    """A server failure after the request was sent: it may or may not have been applied. (A
    lost answer or a timeout is a urllib3 error, caught beside this.)"""
    return (error.status or 0) >= 500


def _phase(lease: SandboxLease) -> str | None:
    """The lease's phase; None until the operator has seen it."""
    return lease.status.phase if lease.status is not None else None


def placed_pod(lease: SandboxLease) -> ObjectRef:
    """The Ready lease's pod reference (name, uid, namespace), where executions, logs, attach
    and port-forward go. 409 `expired` once the sandbox is gone, `not_ready` before it is placed,
    `target_unresolved` while its pod is not known (being replaced: the operator records the
    successor). 503 `provenance_incomplete` when the record that ties the pod to this lease
    (claim, sandbox and pod, each with its uid) is incomplete: the target cannot be verified,
    and no retry will fix it; an administrator must."""
    phase = _phase(lease) or "Pending"
    if phase in SandboxLease.phases.ended:
        raise HttpConflictError(f"the lease is {phase}; its sandbox is gone", reason="expired")
    if lease.status is None or phase != SandboxLease.phases.usable:
        raise HttpConflictError("the sandbox is not placed yet", reason="not_ready")
    pod = lease.status.pod
    if pod is None:
        raise HttpConflictError(
            "the sandbox's pod is not known yet; retry shortly", reason="target_unresolved"
        )
    chain = [lease.status.claim, lease.status.sandbox, pod]
    if not all(ref is not None and ref.name and ref.uid for ref in chain):
        raise UnavailableError(
            "the lease's placement record is incomplete (claim, sandbox and pod, each with its "
            "uid), so its target cannot be verified; an administrator must look at it",
            reason="provenance_incomplete",
        )
    return pod


def pod_namespace(pod: ObjectRef, service_namespace: str) -> str:
    """Where a lease's pod is: the namespace its reference records, else the service
    namespace. Written once, for every reader of a pod reference (logs, attach, port-forward)."""
    return pod.namespace or service_namespace


def live_pod(kube: Kube, placed: ObjectRef) -> Json:
    """The lease's pod as it is now, when it is still the one the lease records: one that is gone,
    or replaced under its name by a pod of another uid, is 409 `target_unresolved` (agent-sandbox
    is replacing it, and the operator records the successor; a retry reaches that one), never
    the successor reached by its name before the lease says it is the lease's."""
    try:
        found = kube.core.read_namespaced_pod(
            placed.name, pod_namespace(placed, kube.namespace), _request_timeout=10
        )
    except ApiException as error:
        if error.status == 404:
            raise _being_replaced() from None
        raise
    pod: Json = kube.api_client.sanitize_for_serialization(found)  # type: ignore[no-untyped-call]
    if pod["metadata"]["uid"] != placed.uid:
        raise _being_replaced()
    return pod


def _asked(spec: SandboxLeaseSpec) -> str | None:
    """The TTL the lease was asked for; without one, the TTL granted."""
    return spec.ttl or spec.effective_ttl


def _with_terms(answer: ViewT, spec: SandboxLeaseSpec) -> ViewT:
    """`answer` with the lease's `effective_ttl` when the TTL granted is less than the TTL
    asked for, and its `alias` when it has one."""
    asked, granted = _asked(spec), spec.effective_ttl
    if granted and asked and parse_duration(granted) < parse_duration(asked):
        answer.effective_ttl = granted
    if spec.alias:
        answer.alias = spec.alias
    return answer


def _created(name: str, spec: SandboxLeaseSpec, deadline: str) -> SandboxLeaseCreated:
    """The create response's fields: id, phase, pool, ttl, alias, provisioning_deadline,
    and effective_ttl when reduced."""
    answer = SandboxLeaseCreated(
        id=name, phase="Pending", pool=spec.pool, ttl=_asked(spec), provisioning_deadline=deadline
    )
    return _with_terms(answer, spec)


def _deadline(lease: SandboxLease) -> str:
    """The lease's provisioning deadline: as the operator recorded it, else as it will."""
    if lease.status is not None and lease.status.provisioning_deadline is not None:
        return instant_json(lease.status.provisioning_deadline)
    created = lease.metadata.creation_timestamp
    assert created is not None  # a lease read from kube-apiserver has its creation time
    timeout = lease.spec.provisioning_timeout or DEFAULT_PROVISIONING_TIMEOUT
    return timestamp(provisioning_deadline(created, timeout))


def _placement(lease_uid: str | None, status: SandboxLeaseStatus) -> SandboxPlacement:
    """Where the lease's sandbox is: the objects the placement controller recorded so far."""
    placement = SandboxPlacement(lease_uid=lease_uid)
    if status.claim is not None:
        placement.claim = _ref(status.claim)
    if status.sandbox is not None:
        placement.sandbox = _ref(status.sandbox)
    if status.pod is not None:
        placement.pod = _ref(status.pod)
    return placement


def _ref(ref: ObjectRef) -> PlacementRef:
    return PlacementRef(name=ref.name, uid=ref.uid)


def _being_replaced() -> HttpConflictError:
    return HttpConflictError(
        "the sandbox's pod is being replaced; retry shortly", reason="target_unresolved"
    )


class SandboxLeaseService:
    def __init__(self, kube: Kube, limiter: AdmissionLimiter, default_ceiling: int) -> None:
        self.kube = kube
        self.limiter = limiter
        # default_ceiling: active Sandbox leases an owner may hold where its grant sets none.
        self.reservations = Reservations(kube, SandboxLease, default_ceiling, family="sandbox-")

    # -- create ----------------------------------------------------------------------------

    def create(self, principal: Principal, request: CreateSandboxLease) -> SandboxLeaseCreated:
        """The 202 body (the handoff variant's when the outcome could not be classified)."""
        grant = self._grant(principal, request.pool, "lease")
        if grant is None:
            raise ForbiddenError(
                f"you have no Sandbox lease permission for {request.pool}",
                reason="forbidden",
            )
        name = lease_id(principal.owner, request.idempotency_key)
        decision = self.limiter.take(principal.owner)
        if not decision.allowed:
            # One exact-name read, only to recover a lease this key already committed.
            if request.idempotency_key is not None and (found := self._find(name)):
                return self._replay(principal, request, found)
            metrics.SANDBOX_ADMISSION_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("Sandbox lease requests", decision.retry_after)
        if request.idempotency_key is not None and (found := self._find(name)):
            return self._replay(principal, request, found)
        pool = self._admissible_pool(request.pool, grant)
        ttl, ceiling = sandbox_ttl(request.ttl, pool.spec.default_ttl, pool.spec.max_ttl, grant)
        lease = self._new_lease(
            principal, request, name, grant=grant, pool=pool, ttl=ttl, ceiling=ceiling
        )
        try:
            taken = self._reserve(principal, request, grant, name)
        except _Replay as replay:
            return replay.answer
        return self._commit(principal, request, lease, pool, taken)

    def _admissible_pool(self, name: str, grant: SandboxGrant) -> SandboxPool:
        pool = self.pool(name)
        too_big = ceiling_exceeded(grant, pool.spec.template)
        if too_big:
            raise ForbiddenError(too_big, reason="resource_ceiling")
        if pool.status is None or pool.status.phase in (None, "Unavailable"):
            why = "; ".join(
                problems_for_tenants(pool.status.conditions if pool.status else [])
            ) or ("the operator has not reconciled it")
            raise UnavailableError(
                f"SandboxPool {name} is not served yet: {why}", reason="pool_unresolvable"
            )
        return pool

    def _commit(
        self,
        principal: Principal,
        request: CreateSandboxLease,
        lease: SandboxLease,
        pool: SandboxPool,
        taken: list[Reservation],
    ) -> SandboxLeaseCreated:
        """The one create that decides; see the module docstring for the outcomes."""
        # A worker that is stopping has only gunicorn's graceful time left, after which its
        # caller would get no answer at all: it waits for the create a short while, and hands
        # off what it could not confirm (spec 4.3: "when the service is shutting down").
        timeout = SHUTDOWN_CREATE_TIMEOUT if lifecycle.stopping() else TIMEOUT
        lease.metadata.annotations = Reservations.annotation(taken)
        name = lease.metadata.name or ""
        try:
            created = self.kube.create(SandboxLease.crd.plural, lease.manifest(), timeout=timeout)
        except ApiException as error:
            if error.status == 409 and request.idempotency_key is not None:
                self._release_all(taken)  # a racing identical request won the name
                found = self._find(name)
                if found is not None:
                    return self._replay(principal, request, found)
            if not _unknown_outcome(error):
                self._release_all(taken)
                raise
            return self._handoff(lease, pool)  # reservations stay: the lease may exist
        except urllib3.exceptions.HTTPError:
            return self._handoff(lease, pool)
        except BaseException:
            self._release_all(taken)
            raise
        return self.created(SandboxLease.model_validate(created))

    def _new_lease(
        self,
        principal: Principal,
        request: CreateSandboxLease,
        name: str,
        *,
        grant: SandboxGrant,
        pool: SandboxPool,
        ttl: str,
        ceiling: str,
    ) -> SandboxLease:
        """The lease to create: what the caller asked and what its grant and the pool allowed,
        so the operator never needs the caller's claims."""
        return SandboxLease(
            metadata=ObjectMeta(
                name=name,
                labels={
                    labels.REQUESTER: requester_label(principal.owner),
                    labels.SANDBOX_POOL: request.pool,
                },
            ),
            spec=SandboxLeaseSpec(
                pool=request.pool,
                effective_ttl=ttl,
                max_ttl=ceiling,
                provisioning_timeout=pool.spec.provisioning_timeout,
                requester=principal.owner,
                max_extensions=grant.max_extensions,
                max_executions=pool.spec.max_executions,
                ttl=request.ttl,
                alias=request.alias,
                idempotency_key=request.idempotency_key,
            ),
        )

    def _reserve(
        self, principal: Principal, request: CreateSandboxLease, grant: SandboxGrant, name: str
    ) -> list[Reservation]:
        try:
            return self.reservations.take(
                principal.owner,
                grant.max_concurrent_sandboxes,
                name,
                request.alias,
                too_many=lambda ceiling: (
                    f"you hold {ceiling} active Sandbox leases, the most your grant allows"
                ),
                alias_used=f"alias {request.alias} is already used by one of your active "
                "Sandbox leases",
            )
        except (TooManyRequestsError, HttpConflictError):
            # An identical keyed request may have created the lease while we were refused.
            if request.idempotency_key is not None and (found := self._find(name)):
                raise _Replay(self._replay(principal, request, found)) from None
            raise

    def _release_all(self, taken: list[Reservation]) -> None:
        for reservation in taken:
            self.reservations.release(reservation)

    def _find(self, name: str) -> SandboxLease | None:
        return self.kube.find_model(SandboxLease, name)

    def _replay(
        self, principal: Principal, request: CreateSandboxLease, found: SandboxLease
    ) -> SandboxLeaseCreated:
        """The answer to a keyed retry: the same lease, unless the key meant something else."""
        spec = found.spec
        if spec.requester != principal.owner:
            raise HttpConflictError(
                "this idempotency key cannot be used", reason="idempotency_conflict"
            )
        if spec.cancelled:
            raise HttpConflictError(
                "the lease of this idempotency key was cancelled; use a new key",
                reason="idempotency_conflict",
            )
        sent = (request.pool, request.ttl, request.alias)
        if sent != (spec.pool, spec.ttl, spec.alias):
            raise HttpConflictError(
                "this idempotency key was used for a lease with a different pool, TTL or alias",
                reason="idempotency_conflict",
            )
        return self.created(found)

    def _handoff(self, lease: SandboxLease, pool: SandboxPool) -> SandboxLeaseCreated:
        name = lease.metadata.name or ""
        deadline = provisioning_deadline(utcnow(), pool.spec.provisioning_timeout)
        answer = _created(name, lease.spec, timestamp(deadline))
        answer.status = "admission_pending"
        answer.retry = False
        answer.status_url = f"{PATH}/{name}"
        return answer

    # -- views -----------------------------------------------------------------------------

    @staticmethod
    def created(lease: SandboxLease) -> SandboxLeaseCreated:
        """The 202 of a create, and of each keyed retry of it."""
        return _created(lease.metadata.name or "", lease.spec, _deadline(lease))

    @staticmethod
    def view(lease: SandboxLease) -> SandboxLeaseView:
        """What the owner sees. Never the requester identity, a credential or a kubeconfig:
        only whitelisted fields are copied out of the object."""
        spec, status = lease.spec, lease.status or SandboxLeaseStatus()
        answer = SandboxLeaseView(
            id=lease.metadata.name or "",
            phase=status.phase or "Pending",
            pool=spec.pool,
            ttl=_asked(spec),
            provisioning_deadline=_deadline(lease),
            extensions_count=status.extensions_count,
            max_extensions=spec.max_extensions,
            placement=_placement(lease.metadata.uid, status),
        )
        _with_terms(answer, spec)
        if status.release_cause:
            answer.release_cause = status.release_cause
        if status.ready_at is not None:
            answer.ready_at = instant_json(status.ready_at)
        if status.expires_at is not None:
            answer.expires_at = instant_json(status.expires_at)
        if status.message:
            answer.message = status.message
        return answer

    # -- read, list ------------------------------------------------------------------------

    def owned(self, principal: Principal, lease_name: str, verb: str = "lease") -> SandboxLease:
        """The caller's lease within its Sandbox scope; anything else is indistinguishable
        from no lease (404). A miss on a well-formed id is arbitrated (module docstring)."""
        if not OBJECT_NAME.match(lease_name):
            raise HttpNotFoundError(f"no Sandbox lease {lease_name[:80]}")
        found = self._find(lease_name)
        if found is None and not looks_like_an_id(lease_name):
            found = by_alias(self._all_mine(principal), lease_name, SandboxLease.phases.holds_slot)
        if found is None and SANDBOX_LEASE_ID.match(lease_name) and self._may_arbitrate(principal):
            found = self._arbitrate(principal, lease_name)
        if found is None or found.spec.cancelled or found.spec.requester != principal.owner:
            raise HttpNotFoundError(f"no Sandbox lease {lease_name}")
        pool = found.spec.pool
        if self._grant(principal, pool, "lease") is None:
            raise HttpNotFoundError(f"no Sandbox lease {lease_name}")  # outside the caller's scope
        if verb != "lease" and self._grant(principal, pool, verb) is None:
            raise ForbiddenError(f"you may not {verb} Sandbox leases of {pool}", reason="forbidden")
        return found

    def _may_arbitrate(self, principal: Principal) -> bool:
        """Only a caller who could have created a Sandbox lease has one in doubt, so only such
        a caller's miss is arbitrated (a tombstone is a write), and each arbitration spends a
        token of the caller's admission bucket, as a create does: reads cannot be turned into
        a stream of writes. Without a token the answer is 429, not 404, which would claim a
        cancellation that did not happen."""
        grants = principal.policy.spec.sandbox
        if not any("lease" in g.verbs and matches(g.match, principal.claims) for g in grants):
            return False
        decision = self.limiter.take(principal.owner)
        if not decision.allowed:
            metrics.SANDBOX_ADMISSION_RATE_LIMITED.inc()
            raise TooManyRequestsError.rate_limited("Sandbox lease requests", decision.retry_after)
        return True

    def _arbitrate(self, principal: Principal, name: str) -> SandboxLease | None:
        tombstone = SandboxLease(
            metadata=ObjectMeta(name=name, labels={TOMBSTONE_LABEL: "true"}),
            spec=SandboxLeaseSpec(pool=TOMBSTONE_POOL, cancelled=True, requester=principal.owner),
        )
        try:
            self.kube.create(SandboxLease.crd.plural, tombstone.manifest())
        except ApiException as error:
            if error.status == 409:  # the lease landed first: it is admitted
                return self._find(name)
            raise
        return None

    def read(self, principal: Principal, lease_name: str) -> SandboxLeaseView:
        return self.view(self.owned(principal, lease_name))

    def list_mine(self, principal: Principal) -> list[SandboxLeaseView]:
        return [
            self.view(lease)
            for lease in self._all_mine(principal)
            if self._grant(principal, lease.spec.pool, "lease") is not None
        ]

    def _all_mine(self, principal: Principal) -> list[SandboxLease]:
        """The caller's leases, ended ones included, tombstones not."""
        selector = f"{labels.REQUESTER}={requester_label(principal.owner)}"
        return [
            lease
            for lease in self.kube.list_models(SandboxLease, selector)
            if lease.spec.requester == principal.owner and not lease.spec.cancelled
        ]

    # -- extend, release -------------------------------------------------------------------

    def extend(
        self, principal: Principal, lease_name: str, request: ExtendSandboxLease
    ) -> SandboxExpiry:
        duration = parse_duration(request.duration)

        def attempt() -> SandboxExpiry:
            lease = self.owned(principal, lease_name)
            status = lease.status
            usable = SandboxLease.phases.usable
            if status is None or status.phase != usable or status.ready_at is None:
                raise HttpConflictError(
                    f"only a {usable} Sandbox lease can be extended", reason="not_ready"
                )
            grant = self._grant(principal, lease.spec.pool, "lease")
            budget = min(lease.spec.max_extensions, grant.max_extensions if grant else 0)
            if len(lease.spec.extensions) >= budget:
                raise HttpConflictError(
                    f"this lease allows {budget} extensions and has used them",
                    reason="extension_budget_exhausted",
                )
            current = lease.spec.expires_at(status.ready_at).replace(microsecond=0)
            caught_up = status.extensions_count == len(lease.spec.extensions)
            if caught_up and status.expires_at is not None and status.expires_at != current:
                # The operator recorded another expiry than the lease's terms give: one of the
                # two derivations is wrong, and extending either would build on it.
                raise HttpConflictError(
                    f"the lease records expiry {timestamp(status.expires_at)}, its terms give "
                    f"{timestamp(current)}; an administrator must look at it",
                    reason="expiry_derivation_mismatch",
                )
            refuse_past_ceiling(
                expiry=current,
                extension=duration,
                ceiling=status.ready_at + parse_duration(lease.spec.extension_ceiling()),
                start="readiness",
            )
            extension = Extension(ttl=request.duration, requested_at=now_seconds())
            operation = append_operation(
                json_pointer("spec", "extensions", model=SandboxLease),
                lease.spec.extensions,
                extension.model_dump(mode="json", by_alias=True, exclude_none=True),
            )
            updated = SandboxLease.model_validate(fenced_patch(self.kube, lease, [operation]))
            return SandboxExpiry(
                expires_at=timestamp(updated.spec.expires_at(status.ready_at)),
                extensions_count=len(updated.spec.extensions),
                max_extensions=budget,
            )

        return retry_on_conflict(attempt, doing="extending it")

    def release(self, principal: Principal, lease_name: str) -> None:
        def attempt() -> None:
            lease = self.owned(principal, lease_name, verb="release")
            phase = _phase(lease)
            if phase == "Quarantined":
                raise HttpConflictError(
                    "the sandbox's cleanup could not be verified; an administrator must resolve "
                    "it first",
                    reason="teardown_quarantined",
                )
            # Quarantined is refused above; every other phase of `ended` is on its way out.
            if phase in SandboxLease.phases.ended or lease.spec.release_requested:
                return
            path = json_pointer("spec", "release_requested", model=SandboxLease)
            fenced_patch(self.kube, lease, [{"op": "add", "path": path, "value": True}])

        retry_on_conflict(attempt, doing="releasing it")

    def logs(
        self, principal: Principal, lease_name: str, tail: int, container: str | None
    ) -> SandboxLogs:
        lease = self.owned(principal, lease_name)
        pod = placed_pod(lease)
        live_pod(self.kube, pod)
        if container is not None and container not in self.offered(lease.spec.pool):
            raise BadRequestError(f"the sandbox has no container {container}")
        try:
            text = self.kube.core.read_namespaced_pod_log(
                pod.name,
                pod_namespace(pod, self.kube.namespace),
                container=container,
                tail_lines=tail,
                limit_bytes=LOG_BYTES_MAX,
                _request_timeout=10,
            )
        except ApiException as error:
            if error.status == 400:
                raise BadRequestError("no such container in the sandbox") from error
            raise
        return SandboxLogs(
            id=lease.metadata.name or "",
            pod=pod.name,
            data=text,
            truncated=len(text.encode()) >= LOG_BYTES_MAX,
        )

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _grant(principal: Principal, pool: str, verb: str) -> SandboxGrant | None:
        return sandbox_grant(principal.policy.spec, principal.claims, pool, verb)

    def offered(self, pool_name: str) -> list[str]:
        """The containers the pool's template offers (SandboxPoolSpec.containers); none once the
        pool is gone."""
        try:
            return self.pool(pool_name).spec.containers()
        except HttpNotFoundError:
            return []

    def pool(self, name: str) -> SandboxPool:
        try:
            return SandboxPool.model_validate(self.kube.get(SandboxPool.crd.plural, name))
        except ApiException as error:
            if error.status == 404:
                raise HttpNotFoundError(f"no SandboxPool {name}") from error
            raise


class _Replay(Exception):  # noqa: N818 - control flow, not an error
    """A refused keyed create whose lease a racing identical request had already created."""

    def __init__(self, answer: SandboxLeaseCreated) -> None:
        super().__init__("replay")
        self.answer = answer
