"""The JSON of every answer, pinned: each response model serialized by the API's one rule
(lessor.apiserver.http.answers.serialized) with representative values, optional fields left
out included, and the answers the services build from stored objects. A change of the rule, of
a field, or of which fields a service sets (absent, or null) fails here: clients read these
bytes. Keys are compared sorted (their order is nobody's contract); presence, nulls, aliases
and values are compared exactly."""

from __future__ import annotations

import inspect
import json
import time
from typing import Any, cast

import pytest
from pydantic import BaseModel

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http.errors import (
    BadRequestError,
    ForbiddenError,
    HttpError,
    HttpNotFoundError,
    TooManyRequestsError,
)
from lessor.apiserver.leases.cluster_leases import LeaseService
from lessor.apiserver.leases.pools import PoolService, pool_record, sandbox_pool_record
from lessor.apiserver.policy.store import NamedPolicy
from lessor.apiserver.sandboxes import executions
from lessor.apiserver.sandboxes.gate import SandboxGate, Verdict
from lessor.apiserver.sandboxes.sandbox_leases import SandboxLeaseService
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol import responses
from lessor.protocol.json_object import Json
from lessor.protocol.responses import (
    ClusterHealth,
    DiagnosticsBundle,
    Error,
    Execution,
    ExecutionLogs,
    ExecutionResult,
    ExecutionWindow,
    Expiry,
    Lease,
    LeaseCreated,
    LeaseEvent,
    LeaseSummary,
    PlacementRef,
    PoolLease,
    PoolPolicy,
    PoolRecord,
    SandboxExpiry,
    SandboxLease,
    SandboxLeaseCreated,
    SandboxLogs,
    SandboxPlacement,
    SessionIssued,
    Status,
    StatusAuth,
    StatusPool,
    StatusSandbox,
    serialized,
)
from lessor.resources.access_policy import AccessPolicySpec
from lessor.resources.cluster import ClusterPool
from lessor.resources.sandbox import SandboxExecution, SandboxPool
from lessor.resources.sandbox import SandboxLease as StoredSandboxLease
from lessor.runner.client import RunnerAnswer

T = "2026-01-02T03:04:05Z"
LATER = "2026-01-02T04:04:05Z"


def pinned(answer: BaseModel | list[BaseModel]) -> str:
    """An answer's JSON as pinned here: the bytes Falcon sends, keys sorted."""
    body = [serialized(a) for a in answer] if isinstance(answer, list) else serialized(answer)
    return json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


# -- every model, as the rule serializes it ------------------------------------------------------

MODELS: list[tuple[BaseModel, str]] = [
    (Error(error="bad request"), '{"error":"bad request"}'),
    (
        Error(error="not found", detail="no lease l1", reason="not_found", code="not_found"),
        '{"code":"not_found","detail":"no lease l1","error":"not found","reason":"not_found"}',
    ),
    (
        LeaseCreated(
            id="l1", phase="Pending", profile="small", queue_position=1, effective_ttl="1h"
        ),
        '{"effective_ttl":"1h","id":"l1","phase":"Pending","profile":"small","queue_position":1}',
    ),
    (
        LeaseCreated(
            id="l1", phase="Pending", profile="small", queue_position=3, effective_ttl="2h",
            alias="main", metadata={"job": 7, "tags": ["a"]},
        ),
        '{"alias":"main","effective_ttl":"2h","id":"l1","metadata":{"job":7,"tags":["a"]},'
        '"phase":"Pending","profile":"small","queue_position":3}',
    ),
    # A Pending lease's expires_at is null (set to None), its alias absent (never set).
    (
        LeaseSummary(id="l1", phase="Pending", profile="small", expires_at=None),
        '{"expires_at":null,"id":"l1","phase":"Pending","profile":"small"}',
    ),
    (
        LeaseSummary(id="l1", phase="Bound", profile="small", expires_at=T, alias="main"),
        '{"alias":"main","expires_at":"2026-01-02T03:04:05Z","id":"l1","phase":"Bound",'
        '"profile":"small"}',
    ),
    (
        Lease(id="l1", phase="Pending", profile="small", expires_at=None, queue_position=2),
        '{"expires_at":null,"id":"l1","phase":"Pending","profile":"small","queue_position":2}',
    ),
    (
        Lease(
            id="l1", phase="Bound", profile="small", expires_at=T, alias="main",
            metadata={"job": 7}, kubeconfig="apiVersion: v1\n",
            cluster_health=ClusterHealth(healthy=False, since=T, message="probe failed"),
        ),
        '{"alias":"main","cluster_health":{"healthy":false,"message":"probe failed",'
        '"since":"2026-01-02T03:04:05Z"},"expires_at":"2026-01-02T03:04:05Z","id":"l1",'
        '"kubeconfig":"apiVersion: v1\\n","metadata":{"job":7},"phase":"Bound",'
        '"profile":"small"}',
    ),
    (
        LeaseEvent(
            type="Warning", reason="ClusterUnhealthy", message="ü", count=2, first_seen=T,
            last_seen=LATER,
        ),
        '{"count":2,"first_seen":"2026-01-02T03:04:05Z","last_seen":"2026-01-02T04:04:05Z",'
        '"message":"ü","reason":"ClusterUnhealthy","type":"Warning"}',
    ),
    (
        DiagnosticsBundle(
            url="https://s3/b?X-Amz=1", expires_at=LATER, captured_at=T, size_bytes=0,
            truncated=False,
        ),
        '{"captured_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T04:04:05Z",'
        '"size_bytes":0,"truncated":false,"url":"https://s3/b?X-Amz=1"}',
    ),
    (Expiry(expires_at=T), '{"expires_at":"2026-01-02T03:04:05Z"}'),
    (
        PoolRecord(
            name="small", resource_kind="Cluster", capabilities=["lease"], phase="Healthy",
            ready=1, leased=2, creating=0, recycling=0, unhealthy=0, quarantined=0,
            queue_depth=4, policy=PoolPolicy(mode="fixed", ttl="1h", warmTarget=2),
        ),
        '{"capabilities":["lease"],"creating":0,"leased":2,"name":"small","phase":"Healthy",'
        '"policy":{"mode":"fixed","ttl":"1h","warmTarget":2},"quarantined":0,"queueDepth":4,'
        '"ready":1,"recycling":0,"resourceKind":"Cluster","unhealthy":0}',
    ),
    (
        PoolRecord(
            name="sb", resource_kind="Sandbox", capabilities=[], phase="Degraded", ready=0,
            leased=0, creating=0, recycling=0, unhealthy=0, quarantined=1, queue_depth=0,
            policy=PoolPolicy(mode="fixed", ttl="30m", warmTarget=0),
            message="Ready: Failing",
        ),
        '{"capabilities":[],"creating":0,"leased":0,"message":"Ready: Failing","name":"sb",'
        '"phase":"Degraded","policy":{"mode":"fixed","ttl":"30m","warmTarget":0},'
        '"quarantined":1,"queueDepth":0,"ready":0,"recycling":0,"resourceKind":"Sandbox",'
        '"unhealthy":0}',
    ),
    # Another tenant's cluster lease: requester redacted, no alias, no metadata; not bound.
    (
        PoolLease(
            id="l2", phase="Pending", profile="small", cluster_name=None, requester="redacted",
            expires_at=None,
        ),
        '{"cluster_name":null,"expires_at":null,"id":"l2","phase":"Pending","profile":"small",'
        '"requester":"redacted"}',
    ),
    (
        PoolLease(
            id="l1", phase="Bound", profile="small", cluster_name="k3s-1", requester="alice",
            expires_at=T, alias="main", metadata={"job": 7},
        ),
        '{"alias":"main","cluster_name":"k3s-1","expires_at":"2026-01-02T03:04:05Z","id":"l1",'
        '"metadata":{"job":7},"phase":"Bound","profile":"small","requester":"alice"}',
    ),
    # A Sandbox lease in a pool's listing: no requester at all, no cluster (null).
    (
        PoolLease(id="s1", phase="Ready", profile="sb", cluster_name=None, expires_at=T),
        '{"cluster_name":null,"expires_at":"2026-01-02T03:04:05Z","id":"s1","phase":"Ready",'
        '"profile":"sb"}',
    ),
    (
        Status(
            version="0.1.0",
            auth=StatusAuth(methods=["oidc", "token"], sessions=[]),
            pools=[StatusPool(name="small", ready=1, leased=0, creating=2)],
            sandbox=StatusSandbox(mode="disabled", served=False),
        ),
        '{"auth":{"methods":["oidc","token"],"sessions":[]},"pools":[{"creating":2,"leased":0,'
        '"name":"small","ready":1}],"sandbox":{"mode":"disabled","served":false},'
        '"version":"0.1.0"}',
    ),
    (
        Status(
            version="0.1.0",
            auth=StatusAuth(methods=["ssh"], sessions=["ssh"]),
            pools=[
                StatusPool(
                    name="small", ready=1, leased=0, creating=2, phase="Healthy", quarantined=0
                )
            ],
            sandbox=StatusSandbox(mode="external", served=True, reason="compatible"),
        ),
        '{"auth":{"methods":["ssh"],"sessions":["ssh"]},"pools":[{"creating":2,"leased":0,'
        '"name":"small","phase":"Healthy","quarantined":0,"ready":1}],"sandbox":{"mode":'
        '"external","reason":"compatible","served":true},"version":"0.1.0"}',
    ),
    (
        SessionIssued(session_token="lss_x", identity="alice", method="oidc", expires_at=T),
        '{"expires_at":"2026-01-02T03:04:05Z","identity":"alice","method":"oidc",'
        '"session_token":"lss_x"}',
    ),
    (
        SandboxLeaseCreated(
            id="s1", phase="Pending", pool="sb", ttl="1h", provisioning_deadline=T
        ),
        '{"id":"s1","phase":"Pending","pool":"sb","provisioning_deadline":'
        '"2026-01-02T03:04:05Z","ttl":"1h"}',
    ),
    # The handoff variant, with every optional field.
    (
        SandboxLeaseCreated(
            id="s1", phase="Pending", pool="sb", ttl="4h", effective_ttl="2h", alias="dev",
            provisioning_deadline=T, status="admission_pending", retry=False,
            status_url="/v1/sandbox-leases/s1",
        ),
        '{"alias":"dev","effective_ttl":"2h","id":"s1","phase":"Pending","pool":"sb",'
        '"provisioning_deadline":"2026-01-02T03:04:05Z","retry":false,'
        '"status":"admission_pending","statusUrl":"/v1/sandbox-leases/s1","ttl":"4h"}',
    ),
    (
        SandboxLease(
            id="s1", phase="Pending", pool="sb", ttl="1h", provisioning_deadline=T,
            extensions_count=0, max_extensions=2, placement=SandboxPlacement(lease_uid="u-1"),
        ),
        '{"extensions_count":0,"id":"s1","max_extensions":2,"phase":"Pending",'
        '"placement":{"lease_uid":"u-1"},"pool":"sb","provisioning_deadline":'
        '"2026-01-02T03:04:05Z","ttl":"1h"}',
    ),
    (
        SandboxLease(
            id="s1", phase="Released", pool="sb", ttl="1h", effective_ttl="30m", alias="dev",
            provisioning_deadline=T, release_cause="Requested", ready_at=T, expires_at=LATER,
            message="released", extensions_count=1, max_extensions=2,
            placement=SandboxPlacement(
                lease_uid="u-1",
                claim=PlacementRef(name="c", uid="c-1"),
                sandbox=PlacementRef(name="s", uid="s-1"),
                pod=PlacementRef(name="p", uid="p-1"),
            ),
        ),
        '{"alias":"dev","effective_ttl":"30m","expires_at":"2026-01-02T04:04:05Z",'
        '"extensions_count":1,"id":"s1","max_extensions":2,"message":"released",'
        '"phase":"Released","placement":{"claim":{"name":"c","uid":"c-1"},"lease_uid":"u-1",'
        '"pod":{"name":"p","uid":"p-1"},"sandbox":{"name":"s","uid":"s-1"}},"pool":"sb",'
        '"provisioning_deadline":"2026-01-02T03:04:05Z","ready_at":"2026-01-02T03:04:05Z",'
        '"release_cause":"Requested","ttl":"1h"}',
    ),
    (
        SandboxExpiry(expires_at=T, extensions_count=1, max_extensions=2),
        '{"expiresAt":"2026-01-02T03:04:05Z","extensionsCount":1,"maxExtensions":2}',
    ),
    (
        SandboxLogs(id="s1", pod="p", data="line\n", truncated=False),
        '{"data":"line\\n","id":"s1","pod":"p","truncated":false}',
    ),
    (
        Execution(id="x1", state="Queued", truncated=False, timeout="60s"),
        '{"id":"x1","state":"Queued","timeout":"60s","truncated":false}',
    ),
    # An empty message is answered empty: set, so present.
    (
        Execution(
            id="x1", state="Failed", exit_code=2, started_at=T, finished_at=LATER, message="",
            truncated=True, timeout="60s",
        ),
        '{"exitCode":2,"finishedAt":"2026-01-02T04:04:05Z","id":"x1","message":"",'
        '"startedAt":"2026-01-02T03:04:05Z","state":"Failed","timeout":"60s",'
        '"truncated":true}',
    ),
    (
        ExecutionResult(
            id="x1", state="TimedOut", started_at=T, finished_at=LATER, truncated=False,
            timeout="5s", stdout="", stderr="killed\n",
        ),
        '{"finishedAt":"2026-01-02T04:04:05Z","id":"x1","startedAt":"2026-01-02T03:04:05Z",'
        '"state":"TimedOut","stderr":"killed\\n","stdout":"","timeout":"5s",'
        '"truncated":false}',
    ),
    (
        ExecutionLogs(
            id="x1", state="Running",
            stdout=ExecutionWindow(data="a", next_offset=1, more=True, truncated=False),
            stderr=ExecutionWindow(data="", next_offset=0, more=False, truncated=False),
        ),
        '{"id":"x1","state":"Running","stderr":{"data":"","more":false,"nextOffset":0,'
        '"truncated":false},"stdout":{"data":"a","more":true,"nextOffset":1,'
        '"truncated":false}}',
    ),
    (
        ExecutionLogs(
            id="x1", state="Succeeded", exit_code=0,
            stdout=ExecutionWindow(data="", next_offset=9, more=False, truncated=True),
            stderr=ExecutionWindow(data="", next_offset=0, more=False, truncated=True),
        ),
        '{"exitCode":0,"id":"x1","state":"Succeeded","stderr":{"data":"","more":false,'
        '"nextOffset":0,"truncated":true},"stdout":{"data":"","more":false,"nextOffset":9,'
        '"truncated":true}}',
    ),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "expected"), MODELS)
def test_a_models_answer_is_pinned(answer: BaseModel, expected: str) -> None:
    assert pinned(answer) == expected


def _models_in(value: object) -> set[type[BaseModel]]:
    """The classes of `value` and of every model nested in it."""
    if isinstance(value, list):
        return set().union(*map(_models_in, value))
    if not isinstance(value, BaseModel):
        return set()
    nested = (_models_in(getattr(value, name)) for name in type(value).model_fields)
    return {type(value)}.union(*nested)


def test_every_response_model_has_an_answer_pinned() -> None:
    declared = {
        model
        for name, model in inspect.getmembers(responses, inspect.isclass)
        if issubclass(model, responses.ResponseBody)
        and model is not responses.ResponseBody
        and not name.startswith("_")
    }
    assert declared == set().union(*(_models_in(answer) for answer, _ in MODELS))


# -- errors: their models by the same rule --------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (BadRequestError(), '{"error":"bad request"}'),
        (
            HttpNotFoundError("no lease l1"),
            '{"code":"not_found","detail":"no lease l1","error":"not found","reason":"not_found"}',
        ),
        # lessor's own code: in `code` only, never in the spec's `reason`.
        (
            ForbiddenError("no", reason="forbidden"),
            '{"code":"forbidden","detail":"no","error":"forbidden"}',
        ),
        (
            TooManyRequestsError.rate_limited("logins", 3),
            '{"code":"rate_limited","detail":"too many logins; retry in 3s",'
            '"error":"too many requests"}',
        ),
    ],
)
def test_an_errors_answer_is_pinned(error: HttpError, expected: str) -> None:
    assert pinned(error.body()) == expected


# -- what the services answer from stored objects -------------------------------------------------


def principal() -> Principal:
    spec = AccessPolicySpec.model_validate({
        "auth": {"oidc": {"issuer": "https://token.example", "audience": ["lessor"]}},
        "identity": "{sub}",
        "rules": [{"pools": ["*"], "maxTtl": "2h", "maxExtensions": 3}],
        "sandbox": [{"pools": ["*"], "verbs": ["lease"], "maxExtensions": 1}],
    })  # fmt: skip
    return Principal(identity="alice", method="oidc", claims={"sub": "alice"},
                     policy=NamedPolicy("ci", spec))  # fmt: skip


class Stored:
    """kube-apiserver and the watches, as the read paths need them: objects by name."""

    namespace = "lessor-system"

    def __init__(self, *objects: Json, secrets: dict[str, str] | None = None) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.secrets = secrets or {}

    def read(self, name: str) -> Json | None:
        return self.objects.get(name)

    def listed(self) -> list[Json]:
        return list(self.objects.values())

    def indexed(self, value: str, *, with_unseen: bool = False) -> list[Json]:
        return self.listed()

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        return self.secrets.get(name)


def cluster_lease(name: str, requester: str, status: Json | None = None, **spec: Any) -> Json:
    return {
        "metadata": {"name": name, "uid": f"u-{name}"},
        "spec": {"pool": "small", "requester": requester, **spec},
        **({"status": status} if status is not None else {}),
    }


PENDING = cluster_lease("l1", "ci/alice", {"phase": "Pending", "queuePosition": 2})
BOUND = cluster_lease(
    "l2",
    "ci/alice",
    {
        "phase": "Bound",
        "expiresAt": LATER,
        "clusterName": "k3s-2",
        "kubeconfigSecret": "l2-kubeconfig",
        "conditions": [
            {
                "type": "ClusterHealthy",
                "status": "False",
                "reason": "ProbeFailed",
                "message": "probe failed",
                "lastTransitionTime": T,
            }
        ],
    },
    alias="main",
    metadata={"job": 7},
)
THEIRS = cluster_lease("l3", "ci/bob", {"phase": "Bound", "expiresAt": LATER}, alias="x")
POOL = {
    "metadata": {"name": "small"},
    "spec": {"ttl": "1h", "backend": {"type": "k3s"}},
    "status": {"phase": "Healthy", "ready": 1, "leased": 2, "queueDepth": 1},
}


def lease_service(*leases: Json) -> LeaseService:
    stored = Stored(*leases, secrets={"l2-kubeconfig": "apiVersion: v1\n"})
    return LeaseService(
        cast(Kube, stored),
        cast(AdmissionLimiter, None),
        default_ceiling=5,
        watched_leases=cast(WatchedObjects, stored),
        watched_pools=cast(WatchedObjects, Stored(POOL)),
    )


def test_a_listed_lease_has_expires_at_null_until_it_is_bound() -> None:
    assert pinned(lease_service(PENDING, BOUND).list_mine(principal())) == (
        '[{"expires_at":null,"id":"l1","phase":"Pending","profile":"small"},'
        '{"alias":"main","expires_at":"2026-01-02T04:04:05Z","id":"l2","phase":"Bound",'
        '"profile":"small"}]'
    )


def test_a_read_lease_adds_its_queue_position_or_its_kubeconfig_and_health() -> None:
    service = lease_service(PENDING, BOUND)
    assert pinned(service.read(principal(), "l1")) == (
        '{"expires_at":null,"id":"l1","phase":"Pending","profile":"small","queue_position":2}'
    )
    assert pinned(service.read(principal(), "l2")) == (
        '{"alias":"main","cluster_health":{"healthy":false,"message":"probe failed",'
        '"since":"2026-01-02T03:04:05Z"},"expires_at":"2026-01-02T04:04:05Z","id":"l2",'
        '"kubeconfig":"apiVersion: v1\\n","metadata":{"job":7},"phase":"Bound",'
        '"profile":"small"}'
    )


def sandbox_view(**status: Any) -> SandboxLease:
    lease = StoredSandboxLease.model_validate({
        "metadata": {"name": "s1", "uid": "u-s1", "creationTimestamp": T},
        "spec": {"pool": "sb", "ttl": "1h", "alias": "dev", "maxExtensions": 1},
        "status": status,
    })  # fmt: skip
    return SandboxLeaseService.view(lease)


def test_a_pools_leases_are_null_where_nothing_is_known_and_another_tenants_redacted() -> None:
    stored = Stored(PENDING, BOUND, THEIRS)
    own = [sandbox_view(phase="Ready", expiresAt=LATER), sandbox_view(phase="Pending")]
    pools = PoolService(
        cast(Kube, stored),
        cast(WatchedObjects, Stored(POOL)),
        cast(WatchedObjects, stored),
        own_sandbox_leases=lambda _: own,
    )
    assert pinned(pools.leases(principal(), "small")) == (
        '[{"cluster_name":null,"expires_at":null,"id":"l1","phase":"Pending","profile":"small",'
        '"requester":"alice"},{"alias":"main","cluster_name":"k3s-2","expires_at":'
        '"2026-01-02T04:04:05Z","id":"l2","metadata":{"job":7},"phase":"Bound",'
        '"profile":"small","requester":"alice"},{"cluster_name":null,"expires_at":'
        '"2026-01-02T04:04:05Z","id":"l3","phase":"Bound","profile":"small",'
        '"requester":"redacted"}]'
    )
    assert pinned(pools._own_sandbox_leases(principal(), "sb")) == (
        '[{"alias":"dev","cluster_name":null,"expires_at":"2026-01-02T04:04:05Z","id":"s1",'
        '"phase":"Ready","profile":"sb"},{"alias":"dev","cluster_name":null,"expires_at":null,'
        '"id":"s1","phase":"Pending","profile":"sb"}]'
    )


def test_a_pools_record_and_status_rows() -> None:
    assert pinned(pool_record(ClusterPool.model_validate(POOL))) == (
        '{"capabilities":["lease","kubeconfig","extend","release"],"creating":0,"leased":2,'
        '"name":"small","phase":"Healthy","policy":{"mode":"fixed","ttl":"1h","warmTarget":1},'
        '"quarantined":0,"queueDepth":1,"ready":1,"recycling":0,"resourceKind":"Cluster",'
        '"unhealthy":0}'
    )
    sandbox = SandboxPool.model_validate({
        "metadata": {"name": "sb"},
        "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}, "warm": 1,
                 "runner": {"path": "/runner"}},
    })  # fmt: skip
    assert pinned(sandbox_pool_record(sandbox)) == (
        '{"capabilities":["lease","extend","release","logs","attach","exec"],"creating":0,'
        '"leased":0,"name":"sb","phase":"Unavailable","policy":{"mode":"fixed","ttl":"30m",'
        '"warmTarget":1},"quarantined":0,"queueDepth":0,"ready":0,"recycling":0,'
        '"resourceKind":"Sandbox","unhealthy":0}'
    )
    pools = PoolService(
        cast(Kube, None), cast(WatchedObjects, Stored(POOL)), cast(WatchedObjects, Stored())
    )
    assert pinned(pools.status_rows(None)) == (
        '[{"creating":0,"leased":2,"name":"small","ready":1}]'
    )
    assert pinned(pools.status_rows(principal())) == (
        '[{"creating":0,"leased":2,"name":"small","phase":"Healthy","quarantined":0,"ready":1}]'
    )


def test_the_sandbox_apis_status() -> None:
    assert pinned(SandboxGate("disabled", None).status()) == ('{"mode":"disabled","served":false}')
    gate = SandboxGate("external", cast(Kube, object()))
    gate._verdict, gate._checked = Verdict(False, "no CRDs"), time.monotonic()
    assert pinned(gate.status()) == '{"mode":"external","reason":"no CRDs","served":false}'


def test_a_sandbox_lease_as_created_handed_off_and_read() -> None:
    lease = StoredSandboxLease.model_validate({
        "metadata": {"name": "s1", "uid": "u-s1", "creationTimestamp": T},
        "spec": {"pool": "sb", "ttl": "4h", "effectiveTtl": "2h", "maxExtensions": 1,
                 "provisioningTimeout": "5m"},
    })  # fmt: skip
    assert pinned(SandboxLeaseService.created(lease)) == (
        '{"effective_ttl":"2h","id":"s1","phase":"Pending","pool":"sb",'
        '"provisioning_deadline":"2026-01-02T03:09:05Z","ttl":"4h"}'
    )
    pool = SandboxPool.model_validate({"metadata": {"name": "sb"}, "spec": {"template": {}}})
    service = SandboxLeaseService(cast(Kube, None), cast(AdmissionLimiter, None), 5)
    handed_off = serialized(service._handoff(lease, pool))
    assert handed_off.pop("provisioning_deadline")  # counted from now
    assert handed_off == {
        "id": "s1", "phase": "Pending", "pool": "sb", "ttl": "4h", "effective_ttl": "2h",
        "status": "admission_pending", "retry": False, "statusUrl": "/v1/sandbox-leases/s1",
    }  # fmt: skip
    # No status yet: Pending, the deadline from the creation time, an empty placement.
    assert pinned(SandboxLeaseService.view(lease)) == (
        '{"effective_ttl":"2h","extensions_count":0,"id":"s1","max_extensions":1,'
        '"phase":"Pending","placement":{"lease_uid":"u-s1"},"pool":"sb",'
        '"provisioning_deadline":"2026-01-02T03:09:05Z","ttl":"4h"}'
    )
    # An empty message and no release cause are left out.
    assert pinned(sandbox_view(phase="Ready", message="", readyAt=T, extensionsCount=1)) == (
        '{"alias":"dev","extensions_count":1,"id":"s1","max_extensions":1,"phase":"Ready",'
        '"placement":{"lease_uid":"u-s1"},"pool":"sb","provisioning_deadline":'
        '"2026-01-02T03:09:05Z","ready_at":"2026-01-02T03:04:05Z","ttl":"1h"}'
    )


def execution(**status: Any) -> SandboxExecution:
    return SandboxExecution.model_validate({
        "metadata": {"name": "x1"},
        "spec": {"lease": {"name": "s1", "uid": "u-s1"}, "commandDigest": "0" * 64,
                 "idempotencyKey": "k", "timeout": "60s"},
        **({"status": status} if status else {}),
    })  # fmt: skip


def test_an_execution_as_stored_then_as_the_runner_tells_it() -> None:
    queued = executions._view(execution())
    assert pinned(queued) == '{"id":"x1","state":"Queued","timeout":"60s","truncated":false}'
    stored = executions._view(execution(state="Failed", exitCode=1, startedAt=T, message=""))
    assert pinned(stored) == (
        '{"exitCode":1,"id":"x1","message":"","startedAt":"2026-01-02T03:04:05Z",'
        '"state":"Failed","timeout":"60s","truncated":false}'
    )
    # Only what the runner reported is laid over the view.
    ran = RunnerAnswer.model_validate({"state": "Running", "startedAt": T})
    running = executions._merge(queued, ran)
    assert pinned(running) == (
        '{"id":"x1","startedAt":"2026-01-02T03:04:05Z","state":"Running","timeout":"60s",'
        '"truncated":false}'
    )
    assert executions._merge(queued, RunnerAnswer()) is queued  # a runner that knows nothing
    ended = RunnerAnswer.model_validate({"state": "Succeeded", "exitCode": 0, "finishedAt": LATER})
    result = executions._result(executions._merge(running, ended), bytearray(b"ok\n"), bytearray())
    assert pinned(result) == (
        '{"exitCode":0,"finishedAt":"2026-01-02T04:04:05Z","id":"x1","startedAt":'
        '"2026-01-02T03:04:05Z","state":"Succeeded","stderr":"","stdout":"ok\\n",'
        '"timeout":"60s","truncated":false}'
    )
    assert pinned(executions._window(None, truncated=True)) == (
        '{"data":"","more":false,"nextOffset":0,"truncated":true}'
    )
