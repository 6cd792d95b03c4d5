"""The Ready condition and observedGeneration every status is stamped with on its way out
(lessor.operator.core.readiness): what `kubectl wait` and GitOps health checks read."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import ValidationError

from lessor.operator.core.readiness import RULES, stamped
from lessor.operator.core.writes import status_json
from lessor.operator.tenancy.access_policies import invalid
from lessor.resources.access_policy import AccessPolicy, AccessPolicyStatus
from lessor.resources.base import StatusModel
from lessor.resources.catalog import RESOURCES
from lessor.resources.cluster import ClusterLeaseStatus, ClusterPoolStatus
from lessor.resources.diagnostics_bundle import DiagnosticsBundleStatus
from lessor.resources.sandbox import SandboxExecutionStatus
from tests.unit.test_status_writes import STORED


def _obj(generation: int) -> dict[str, Any]:
    return {"metadata": {"name": "x", "generation": generation}, "spec": {}}


def _condition(status: StatusModel, kind: str) -> dict[str, Any]:
    written = status_json(status)
    return next(c for c in written["conditions"] if c["type"] == kind)


def test_every_kind_has_a_ready_rule_or_a_reconciler_that_sets_it() -> None:
    """A new kind cannot be added without saying what Ready means for it."""
    statuses = {
        model
        for resource in RESOURCES
        for model in typing.get_args(resource.model_fields["status"].annotation)
        if model is not type(None)
    }
    # AccessPolicy's is decided by lessor.operator.tenancy.access_policies, which checks its
    # Secrets; a DiagnosticsBundle is a record written whole, with no state to be ready in.
    assert statuses == {*RULES, AccessPolicyStatus, DiagnosticsBundleStatus}
    assert not DiagnosticsBundleStatus.model_fields


@pytest.mark.parametrize(("model", "stored"), STORED)
def test_stamping_twice_writes_nothing_new(
    model: type[StatusModel], stored: dict[str, Any]
) -> None:
    """A reconcile that decides nothing new must write nothing: the derived conditions depend
    only on the status and the object, never on the moment."""
    obj = _obj(3)
    once = stamped(obj, model.model_validate(stored))
    again = stamped(obj, model.model_validate(status_json(once)))
    assert status_json(again) == status_json(once)
    assert status_json(once)["observedGeneration"] == 3
    assert _condition(once, "Ready")["observedGeneration"] == 3


def test_a_bound_lease_is_ready_and_a_released_one_is_not_since_its_release() -> None:
    bound = stamped(_obj(1), ClusterLeaseStatus(phase="Bound", cluster_name="p-1"))
    ready = _condition(bound, "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Bound")
    assert "p-1" in ready["message"]
    released = stamped(_obj(2), bound.model_copy(update={"phase": "Released"}))
    after = _condition(released, "Ready")
    assert (after["status"], after["reason"], after["observedGeneration"]) == (
        "False",
        "Released",
        2,
    )
    queued = stamped(_obj(1), ClusterLeaseStatus(phase="Pending", queue_position=3))
    assert "position 3" in _condition(queued, "Ready")["message"]


def test_a_pool_says_whether_it_is_healthy_and_whether_it_is_warm() -> None:
    warming = stamped(_obj(1), ClusterPoolStatus(phase="Healthy", ready=1, target=2))
    assert _condition(warming, "Ready")["status"] == "True"
    warm = _condition(warming, "Warm")
    assert (warm["status"], warm["reason"], warm["message"]) == ("False", "Warming", "1 of 2 ready")
    full = stamped(_obj(1), warming.model_copy(update={"ready": 2}))
    assert _condition(full, "Warm")["status"] == "True"


def test_an_execution_is_finished_whatever_its_outcome() -> None:
    running = stamped(_obj(1), SandboxExecutionStatus(state="Running"))
    assert _condition(running, "Ready")["status"] == "True"
    assert _condition(running, "Finished")["status"] == "False"
    failed = stamped(_obj(1), SandboxExecutionStatus(state="Failed", exit_code=2))
    assert (_condition(failed, "Ready")["status"], _condition(failed, "Finished")["reason"]) == (
        "False",
        "Failed",
    )


def test_an_invalid_policy_is_reported_by_field_never_with_its_content() -> None:
    """A policy stored under an older CRD (without the rule) that the API server's model refuses:
    the message names the field and the rule, not the value (a policy may carry claims)."""
    policy = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "p", "namespace": "lessor-system"},
        "spec": {
            "auth": {"sshKeys": [{"publicKey": "ssh-ed25519 AAAA", "claims": {"sub": "x"}}]},
            "identity": "{org}{secret-looking-sub}",
            "rules": [{"pools": ["*"]}],
        },
    }
    with pytest.raises(ValidationError) as refused:
        AccessPolicy.model_validate(policy)
    ok, reason, message = invalid(refused.value)
    assert (ok, reason) == (False, "Invalid")
    assert "spec.identity" in message and "separated" in message
    assert "secret-looking-sub" not in message
