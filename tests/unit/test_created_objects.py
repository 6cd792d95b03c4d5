"""What the API server writes, derived from the models: the objects it creates (apiVersion,
kind and camelCase keys from the classes), the JSON pointers of its intents (from the fields'
aliases), and the rules both components compute from a lease (the TTL fallback, the Sandbox
extension ceiling)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http.bodies import CreateLease, CreateSandboxLease
from lessor.apiserver.leases.cluster_leases import LeaseService, requester_label
from lessor.apiserver.policy.store import NamedPolicy
from lessor.apiserver.sandboxes.sandbox_leases import SandboxLeaseService
from lessor.apiserver.state.admission_limit import AdmissionLimiter, Decision
from lessor.apiserver.state.kube import Kube
from lessor.apiserver.state.watched import WatchedObjects
from lessor.protocol.json_object import Json
from lessor.protocol.responses import serialized
from lessor.resources import labels
from lessor.resources.access_policy import AccessPolicySpec, SandboxGrant
from lessor.resources.base import ObjectMeta, instant_json, json_pointer
from lessor.resources.cluster import (
    DEFAULT_POOL_TTL,
    LEASE_FINALIZER,
    ClusterLease,
    ClusterLeaseSpec,
    ClusterLeaseStatus,
    ClusterPoolSpec,
)
from lessor.resources.sandbox import (
    CEILING_WITHOUT_MAX_TTL,
    SandboxExecution,
    SandboxLease,
    SandboxLeaseSpec,
    SandboxPool,
)


def test_a_pointer_is_spelt_by_the_fields_aliases() -> None:
    assert json_pointer("spec", "release_requested", model=ClusterLease) == "/spec/releaseRequested"
    assert json_pointer("spec", "cancel_requested", model=SandboxExecution) == (
        "/spec/cancelRequested"
    )
    assert json_pointer("spec", "executions_reserved", model=SandboxLease) == (
        "/spec/executionsReserved"
    )
    assert json_pointer("spec", "extensions", "-", model=SandboxLease) == "/spec/extensions/-"
    assert json_pointer("status", "expires_at", model=ClusterLease) == "/status/expiresAt"
    assert json_pointer("metadata", "resource_version", model=ClusterLease) == (
        "/metadata/resourceVersion"
    )
    assert json_pointer("api_version", model=ClusterLease) == "/apiVersion"


def test_a_dict_key_below_a_pointer_is_escaped_as_rfc_6901_says() -> None:
    key = "lessor.dev/a~b"
    assert json_pointer("metadata", "annotations", key, model=SandboxLease) == (
        "/metadata/annotations/lessor.dev~1a~0b"
    )
    # Caller metadata is free-form (dict[str, Any]): anything goes below it.
    assert json_pointer("spec", "metadata", "a", "b", model=ClusterLease) == "/spec/metadata/a/b"


@pytest.mark.parametrize(
    "path",
    [
        ("spec", "releaseRequested"),  # the alias is not a field name: one spelling only
        ("spec", "release_requestd"),
        ("spek",),
        ("spec", "pool", "name"),  # below a string
        ("spec", "extensions", "last"),  # not an index
    ],
)
def test_a_pointer_to_no_field_is_refused_at_once(path: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        json_pointer(*path, model=ClusterLease)


def test_a_manifest_holds_what_its_creator_gave_and_the_class_names_the_kind() -> None:
    lease = ClusterLease(
        metadata=ObjectMeta(name="l1", labels={labels.POOL: "p"}),
        spec=ClusterLeaseSpec(pool="p", ttl="1h", max_extensions=2, alias=None),
    )
    assert lease.manifest() == {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {"name": "l1", "labels": {"lessor.dev/pool": "p"}},
        # No default nobody gave (releaseRequested, extensions: the CRD's), no null (alias).
        "spec": {"pool": "p", "ttl": "1h", "maxExtensions": 2},
    }


def test_a_misspelt_field_never_reaches_a_manifest() -> None:
    with pytest.raises(ValueError, match="maxTTL"):
        ClusterLeaseSpec.model_validate({"pool": "p", "maxTTL": "1h"})


def test_an_owner_reference_names_the_exact_object() -> None:
    lease = SandboxLease(metadata=ObjectMeta(name="s1", uid="u-1"), spec=SandboxLeaseSpec(pool="p"))
    assert lease.owner_reference() == {
        "apiVersion": "lessor.dev/v1alpha1", "kind": "SandboxLease", "name": "s1", "uid": "u-1"
    }  # fmt: skip
    with pytest.raises(ValueError, match="uid"):
        SandboxLease(
            metadata=ObjectMeta(name="s2"), spec=SandboxLeaseSpec(pool="p")
        ).owner_reference()


def test_an_instant_is_repeated_as_the_status_stored_it() -> None:
    stored = "2026-01-02T03:04:05Z"
    status = ClusterLeaseStatus.model_validate({"expiresAt": stored})
    assert status.expires_at is not None and instant_json(status.expires_at) == stored
    precise = ClusterLeaseStatus.model_validate({"expiresAt": "2026-01-02T03:04:05.250000Z"})
    assert precise.expires_at is not None
    assert instant_json(precise.expires_at) == "2026-01-02T03:04:05.250000Z"


def test_a_cluster_leases_ttl_is_the_recorded_one_else_the_specs_else_the_pool_default() -> None:
    assert ClusterPoolSpec.model_fields["ttl"].default == DEFAULT_POOL_TTL
    lease = ClusterLease(spec=ClusterLeaseSpec(pool="p"))
    assert lease.effective_ttl() == DEFAULT_POOL_TTL
    lease.spec.ttl = "2h"
    assert lease.effective_ttl() == "2h"
    lease.status = ClusterLeaseStatus(effective_ttl="30m")
    assert lease.effective_ttl() == "30m"


def test_a_sandbox_extension_ceiling_is_the_leases_else_the_one_for_leases_without() -> None:
    assert SandboxLeaseSpec(pool="p", max_ttl="4h").extension_ceiling() == "4h"
    assert SandboxLeaseSpec(pool="p").extension_ceiling() == CEILING_WITHOUT_MAX_TTL


# -- the objects the services create ------------------------------------------------------------


class FakeKube:
    """kube-apiserver as the services' creates need it: each create recorded and stored."""

    namespace = "lessor-system"

    def __init__(self) -> None:
        self.created: list[tuple[str, Json]] = []

    def create(self, plural: str, body: Json, timeout: float = 10) -> Json:
        self.created.append((plural, body))
        stored = {**body, "metadata": {**body["metadata"], "uid": "u-1", "resourceVersion": "1"}}
        stored["metadata"]["creationTimestamp"] = "2026-01-02T03:04:05Z"
        return stored

    def configmap_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{name}"

    def request(self, method: str, path: str, **_: Any) -> Json:
        return {}  # a reservation's create: it succeeds

    def names(self, path: str, label_selector: str) -> list[str]:
        return []


class FakeWatched:
    def __init__(self, objects: dict[str, Json]) -> None:
        self.objects = objects

    def read(self, name: str) -> Json | None:
        return self.objects.get(name)

    def indexed(self, value: str, *, with_unseen: bool = False) -> list[Json]:
        return []

    def wrote(self, obj: Json) -> None:
        pass


class Allow:
    def take(self, identity: str) -> Decision:
        return Decision(True)


def principal() -> Principal:
    spec = AccessPolicySpec.model_validate({
        "auth": {"oidc": {"issuer": "https://token.example", "audience": ["lessor"]}},
        "identity": "{sub}",
        "rules": [{"pools": ["*"], "maxTtl": "2h", "maxExtensions": 3}],
        "sandbox": [{"pools": ["*"], "verbs": ["lease"], "maxExtensions": 1}],
    })  # fmt: skip
    return Principal(identity="alice", method="oidc", claims={"sub": "alice"},
                     policy=NamedPolicy("ci", spec))  # fmt: skip


def test_a_created_cluster_lease_is_what_the_api_always_wrote() -> None:
    kube = FakeKube()
    pool = {"apiVersion": "lessor.dev/v1alpha1", "kind": "ClusterPool",
            "metadata": {"name": "small"}, "spec": {"ttl": "1h", "backend": {"type": "k3s"}},
            "status": {"queueDepth": 2}}  # fmt: skip
    service = LeaseService(
        cast(Kube, kube),
        cast(AdmissionLimiter, Allow()),
        default_ceiling=5,
        watched_leases=cast(WatchedObjects, FakeWatched({})),
        watched_pools=cast(WatchedObjects, FakeWatched({"small": pool})),
    )
    request = CreateLease(profile="small", ttl="3h", alias="main", metadata={"job": 7})
    answer = serialized(service.create(principal(), request))
    ((plural, body),) = kube.created
    name = answer["id"]
    slot = body["metadata"]["annotations"][labels.RESERVATIONS].split(",")
    assert plural == "clusterleases" and len(slot) == 2  # a slot and the alias
    # As the API wrote it by hand before the models did (issue 48), key for key.
    assert body == {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {
            "name": name,
            "finalizers": [LEASE_FINALIZER],
            "annotations": {"lessor.dev/reservations": ",".join(slot)},
            "labels": {
                "lessor.dev/requester": requester_label("ci/alice"),
                "lessor.dev/pool": "small",
            },
        },
        "spec": {
            "pool": "small",
            "ttl": "2h",
            "requester": "ci/alice",
            "maxExtensions": 3,
            "maxTtl": "2h",
            "alias": "main",
            "metadata": {"job": 7},
        },
    }
    assert answer == {"id": name, "phase": "Pending", "profile": "small", "queue_position": 3,
                      "effective_ttl": "2h", "alias": "main", "metadata": {"job": 7}}  # fmt: skip


def test_a_created_sandbox_lease_is_what_the_api_always_wrote() -> None:
    pool = SandboxPool.model_validate({
        "metadata": {"name": "sb"},
        "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}, "maxTtl": "4h"},
    })  # fmt: skip
    service = SandboxLeaseService(cast(Kube, FakeKube()), cast(AdmissionLimiter, Allow()), 5)
    request = CreateSandboxLease(pool="sb", ttl="1h", idempotency_key="k1")
    grant = SandboxGrant.model_validate({"pools": ["*"], "verbs": ["lease"], "maxExtensions": 1})
    lease = service._new_lease(
        principal(), request, "s1", grant=grant, pool=pool, ttl="1h", ceiling="4h"
    )
    assert lease.manifest() == {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "SandboxLease",
        "metadata": {
            "name": "s1",
            "labels": {
                "lessor.dev/requester": requester_label("ci/alice"),
                "lessor.dev/sandbox-pool": "sb",
            },
        },
        "spec": {
            "pool": "sb",
            "ttl": "1h",
            "effectiveTtl": "1h",
            "maxTtl": "4h",
            "provisioningTimeout": "5m",
            "idempotencyKey": "k1",
            "requester": "ci/alice",
            "maxExtensions": 1,
            "maxExecutions": 500,
        },
    }
    created = SandboxLease.model_validate(FakeKube().create("sandboxleases", lease.manifest()))
    assert serialized(service.created(created)) == {
        "id": "s1", "phase": "Pending", "pool": "sb", "ttl": "1h",
        "provisioning_deadline": "2026-01-02T03:09:05Z",
    }  # fmt: skip


def test_a_sandbox_lease_view_repeats_its_status_as_stored() -> None:
    stored = {
        "metadata": {"name": "s1", "uid": "u-1", "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"pool": "sb", "effectiveTtl": "30m", "ttl": "1h", "maxExtensions": 2},
        "status": {
            "phase": "Ready",
            "provisioningDeadline": "2026-01-02T03:09:05Z",
            "readyAt": "2026-01-02T03:05:00Z",
            "expiresAt": "2026-01-02T03:35:00Z",
            "extensionsCount": 1,
            "claim": {"name": "c", "uid": "c-1"},
            "pod": {"name": "p", "uid": "p-1", "namespace": "x"},
        },
    }
    service = SandboxLeaseService(cast(Kube, FakeKube()), cast(AdmissionLimiter, Allow()), 5)
    assert serialized(service.view(SandboxLease.model_validate(stored))) == {
        "id": "s1",
        "phase": "Ready",
        "pool": "sb",
        "ttl": "1h",
        "provisioning_deadline": "2026-01-02T03:09:05Z",
        "effective_ttl": "30m",
        "ready_at": "2026-01-02T03:05:00Z",
        "expires_at": "2026-01-02T03:35:00Z",
        "extensions_count": 1,
        "max_extensions": 2,
        "placement": {"lease_uid": "u-1", "claim": {"name": "c", "uid": "c-1"},
                      "pod": {"name": "p", "uid": "p-1"}},
    }  # fmt: skip
