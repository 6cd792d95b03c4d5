"""What the operator writes as a status: a status read through its model and written back
unchanged is the JSON it was (so a reconcile that decides nothing new writes nothing), and a
change adds only the fields it sets, never the model's defaults."""

from __future__ import annotations

from typing import Any

import pytest

from lessor.operator.core.writes import status_json, without
from lessor.resources.base import StatusModel
from lessor.resources.cluster import ClusterInstanceStatus, ClusterLeaseStatus, ClusterPoolStatus
from lessor.resources.sandbox import SandboxExecutionStatus, SandboxLeaseStatus, SandboxPoolStatus

STORED: list[tuple[type[StatusModel], dict[str, Any]]] = [
    (ClusterPoolStatus, {"phase": "Healthy", "ready": 1, "queueDepth": 0, "observedGeneration": 2}),
    (
        ClusterInstanceStatus,
        {
            "phase": "Recycling",
            "backendDetails": {"namespace": "lessor-ns-a"},
            "readyAt": "2026-11-23T19:31:41Z",
            "teardown": {
                "verified": False,
                "evidence": ["namespace x still exists (Terminating)"],
                "checkedAt": "2026-11-23T19:32:00Z",
                "startedAt": "2026-11-23T19:31:59Z",
            },
        },
    ),
    (
        ClusterLeaseStatus,
        {
            "phase": "Bound",
            "instance": {"name": "p-abc", "uid": "u1"},
            "boundAt": "2026-11-23T19:31:41Z",
            "expiresAt": "2026-11-23T20:31:41Z",
            "effectiveTtl": "1h",
            "extensions": 0,
            "message": "",
        },
    ),
    (
        SandboxPoolStatus,
        {
            "phase": "Unavailable",
            "leased": 0,
            "quarantined": 0,
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "AgentSandboxCompatible",
                    "status": "False",
                    "reason": "Incompatible",
                    "message": "no CRDs",
                    "lastTransitionTime": "2026-11-23T19:31:41Z",
                    "observedGeneration": 1,
                }
            ],
        },
    ),
    (
        SandboxLeaseStatus,
        {
            "phase": "Ready",
            "claim": {"name": "l", "uid": "u", "namespace": "s"},
            "provisioningDeadline": "2026-11-23T19:36:41Z",
            "readyAt": "2026-11-23T19:31:41Z",
            "extensionsCount": 0,
        },
    ),
    (SandboxExecutionStatus, {"state": "Running", "startedAt": "2026-11-23T19:31:41Z"}),
]


@pytest.mark.parametrize(("model", "stored"), STORED)
def test_a_status_read_and_written_back_is_unchanged(
    model: type[StatusModel], stored: dict[str, Any]
) -> None:
    assert status_json(model.model_validate(stored)) == stored


def test_a_change_writes_what_it_sets_and_no_defaults() -> None:
    status = ClusterLeaseStatus.model_validate({"phase": "Pending", "queuePosition": 2})
    status.queue_position, status.message = None, ""
    assert status_json(status) == {"phase": "Pending", "message": ""}
    assert status_json(ClusterPoolStatus()) == {}


def test_without_omits_a_field_with_a_default() -> None:
    status = SandboxLeaseStatus.model_validate({"phase": "Releasing", "evidence": ["pod p"]})
    assert status_json(without(status, "evidence")) == {"phase": "Releasing"}
