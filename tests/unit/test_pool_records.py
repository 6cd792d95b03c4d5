"""What a pool's tenants read of its health (review N17): the operator's error text stays in the
pool's status, for administrators."""

from __future__ import annotations

from lessor.apiserver.leases.pools import pool_record
from lessor.resources.cluster import ClusterPool

OPERATOR_ERROR = (
    "creating StatefulSet k3s-x failed: 403 Forbidden: User "
    '"system:serviceaccount:lessor-system:lessor-operator" cannot create statefulsets'
)


def test_a_tenant_reads_which_condition_fails_and_why_in_a_word_never_the_operators_error() -> None:
    pool = ClusterPool.model_validate(
        {
            "apiVersion": "lessor.dev/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": "ci", "namespace": "lessor-system"},
            "spec": {"backend": {"type": "vcluster"}},
            "status": {
                "phase": "Degraded",
                "conditions": [
                    {"type": "BackendHealthy", "status": "False", "reason": "StartFailing",
                     "message": OPERATOR_ERROR, "lastTransitionTime": "2026-11-27T10:00:00Z"},
                    {"type": "DiagnosticsReady", "status": "False", "reason": "StoreUnreachable",
                     "message": "bucket secret-bucket at https://minio.internal:9000: 403",
                     "lastTransitionTime": "2026-11-27T10:00:00Z"},
                ],
            },
        }
    )  # fmt: skip
    message = pool_record(pool).message or ""
    assert message == "BackendHealthy: StartFailing; DiagnosticsReady: StoreUnreachable"
    for secret in ("serviceaccount", "403", "minio.internal", "secret-bucket"):
        assert secret not in message
