"""The resource models accept what a user would write and refuse mistakes with a clear message."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from pydantic import ValidationError

from lessor.resources.access_policy import AccessPolicy, AccessPolicySpec
from lessor.resources.cluster import ClusterLease, ClusterLeaseSpec, ClusterPool, ClusterPoolSpec
from lessor.resources.sandbox import ExecutionCommand, SandboxExecutionSpec, SandboxLeaseSpec


def policy(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "auth": {"oidc": {"issuer": "https://token.example", "audience": ["lessor"]}},
        "identity": "{repository_owner}/{repository}",
        "rules": [{"match": {"claim": "repository_owner", "value": "acme"}, "pools": ["ci-*"]}],
    }
    base.update(spec)
    return base


def test_a_policy_as_written_in_yaml_parses_with_defaults() -> None:
    parsed = AccessPolicySpec.model_validate(policy())
    assert parsed.auth.oidc is not None
    assert parsed.auth.oidc.algorithms == ["RS256"]
    assert parsed.rules[0].max_extensions == 2
    dumped = parsed.model_dump(exclude_none=True)
    assert dumped["auth"]["oidc"]["audience"] == ["lessor"]
    assert "maxExtensions" in dumped["rules"][0], "serialised with the CRD's camelCase names"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rules": [{"pools": ["*"], "maxTtl": "2days"}]}, "maxTtl"),
        ({"rules": [{"pools": ["*"], "maxTtl": "0s"}]}, "maxTtl"),
        ({"rules": [{"pools": ["*"], "maxConcurrentLeases": -1}]}, "maxConcurrentLeases"),
        ({"rules": [{"pools": []}]}, "pools"),
        ({"rules": [{"pools": ["*"], "colour": "blue"}]}, "colour"),
        (
            {"auth": {"oidc": {"issuer": "https://x", "audience": [], "algorithms": ["HS256"]}}},
            "algorithms",
        ),
        ({"auth": {}}, "auth"),
        ({"identity": "static-name"}, "identity"),
    ],
)
def test_mistakes_in_a_policy_are_refused_naming_the_field(
    change: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        AccessPolicySpec.model_validate(policy(**change))
    assert field in str(caught.value)


def test_a_policy_without_identity_is_refused() -> None:
    spec = policy()
    del spec["identity"]
    with pytest.raises(ValidationError, match="identity"):
        AccessPolicySpec.model_validate(spec)


def test_a_whole_object_round_trips_through_its_json_form() -> None:
    document = {
        "apiVersion": "lessor.dev/v1alpha1",
        "kind": "AccessPolicy",
        "metadata": {"name": "ci", "namespace": "lessor-system", "uid": "u-1"},
        "spec": policy(),
    }
    parsed = AccessPolicy.model_validate(document)
    assert parsed.metadata.name == "ci"
    again = AccessPolicy.model_validate(parsed.model_dump(exclude_none=True))
    assert again == parsed


def test_pool_defaults_and_bounds() -> None:
    pool = ClusterPoolSpec.model_validate({"backend": {"type": "vcluster"}})
    assert (pool.ttl, pool.warm_target, pool.backend.type, pool.policy.mode) == (
        "1h",
        1,
        "vcluster",
        "fixed",
    )
    for no_backend in ({}, {"backend": {}}):  # no default: `local` is for development only
        with pytest.raises(ValidationError, match="backend"):
            ClusterPoolSpec.model_validate(no_backend)
    with pytest.raises(ValidationError, match="backend"):
        ClusterPoolSpec.model_validate({"backend": {"type": "kubevirt"}})
    with pytest.raises(ValidationError, match="warmTarget"):
        ClusterPoolSpec.model_validate({"warmTarget": -1, "backend": {"type": "k3s"}})
    assert ClusterPool.crd.plural == "clusterpools"


@pytest.mark.parametrize("alias", ["UPPER", "-leading", "trailing-", "a" * 64, "under_score"])
def test_lease_alias_must_be_a_dns_label(alias: str) -> None:
    with pytest.raises(ValidationError, match="alias"):
        ClusterLease.model_validate(
            {"kind": "ClusterLease", "spec": {"pool": "ci", "alias": alias}}
        )


def test_idempotency_keys_are_bounded_in_bytes_not_characters() -> None:
    SandboxLeaseSpec.model_validate({"pool": "agents", "idempotencyKey": "k" * 253})
    with pytest.raises(ValidationError, match="253 bytes"):
        SandboxLeaseSpec.model_validate({"pool": "agents", "idempotencyKey": "é" * 127})


def test_an_execution_holds_the_digest_of_its_command_never_the_command() -> None:
    digest = ExecutionCommand(command=["true"]).digest()
    spec: dict[str, Any] = {"lease": {"name": "l", "uid": "u"}, "idempotencyKey": "k"}
    with pytest.raises(ValidationError, match="command"):
        SandboxExecutionSpec.model_validate({**spec, "command": ["true"], "commandDigest": digest})
    with pytest.raises(ValidationError, match="commandDigest"):
        SandboxExecutionSpec.model_validate({**spec, "commandDigest": "sha256"})
    with pytest.raises(ValidationError, match="idempotencyKey"):
        SandboxExecutionSpec.model_validate({**spec, "commandDigest": digest, "idempotencyKey": ""})
    made = SandboxExecutionSpec.model_validate({**spec, "commandDigest": digest})
    assert (made.timeout, made.detach) == ("60s", False)


@pytest.mark.parametrize(
    ("command", "cwd"),
    [(["true"], None), (["sh", "-c", "echo \x01\n"], "/tmp"), ([""], None), (["a", "", ""], "/")],
)
def test_a_command_comes_back_from_its_secret_exactly(command: list[str], cwd: str | None) -> None:
    sent = ExecutionCommand(command=command, cwd=cwd)
    assert ExecutionCommand.from_secret(sent.secret_data(), sent.digest()) == sent


@pytest.mark.parametrize(
    ("command", "cwd"),
    [(["true"], None), (["echo", "é"], "/tmp"), ([""], None), (["a", "", ""], "/")],
)
def test_a_commands_stored_bytes_are_what_its_secret_holds(
    command: list[str], cwd: str | None
) -> None:
    """What a lease's cap on command bytes counts is exactly what the Secret stores: a test
    that sums the decoded data of a lease's Secrets compares like with like."""
    sent = ExecutionCommand(command=command, cwd=cwd)
    held = sum(len(base64.b64decode(value)) for value in sent.secret_data().values())
    assert sent.stored_bytes() == held


def test_a_secret_without_the_reserved_command_is_refused() -> None:
    """A Secret changed (or replaced) after the reservation never yields a command to run."""
    reserved = ExecutionCommand(command=["echo", "hi"], cwd="/tmp")
    for other in (ExecutionCommand(command=["echo", "hi"]),
                  ExecutionCommand(command=["echo", "hi", ""], cwd="/tmp"),
                  ExecutionCommand(command=["echo hi"], cwd="/tmp")):  # fmt: skip
        assert other.digest() != reserved.digest()
        with pytest.raises(ValueError, match="commandDigest"):
            ExecutionCommand.from_secret(other.secret_data(), reserved.digest())
    garbled = {"argv": base64.b64encode(b"\xff").decode()}
    for data in (None, {}, {"argv": "not base64!"}, garbled):
        with pytest.raises(ValueError):
            ExecutionCommand.from_secret(data, reserved.digest())


def test_the_digest_is_of_the_canonical_json_of_command_and_cwd() -> None:
    """A fixed spelling: an execution reserved by one release is compared with, and its Secret
    checked by, the next."""
    digest = ExecutionCommand(command=["echo", "é"], cwd="/tmp").digest()
    assert digest == hashlib.sha256(b'{"command":["echo","\\u00e9"],"cwd":"/tmp"}').hexdigest()


def test_an_argument_with_nul_is_refused() -> None:
    """NUL separates the arguments in the Secret, so none may hold one."""
    with pytest.raises(ValidationError, match="command"):
        ExecutionCommand(command=["a\x00b"])


def test_backend_settings_keep_their_crd_spelling_when_copied_to_an_instance() -> None:
    from lessor.resources.cluster import Backend  # noqa: PLC0415

    backend = Backend.model_validate({"type": "k3s", "k3s": {"storageSize": "2Gi", "cpu": "1"}})
    copied = backend.model_dump(by_alias=True, exclude_none=True)
    assert copied["k3s"]["storageSize"] == "2Gi" and copied["k3s"]["cpu"] == "1"
    assert Backend.model_validate(copied) == backend


def test_a_lease_from_a_newer_lessor_is_read_and_a_misspelt_one_is_never_made() -> None:
    """During a rolling upgrade the CRDs are newer than some replicas: a lease a newer API server
    made, with a field this one does not know, is read (the field ignored), not refused with a
    500 at every GET. What this lessor builds is still checked: a misspelt field is an error."""
    stored = {
        "metadata": {"name": "pr-1", "namespace": "ci", "uid": "u", "resourceVersion": "7"},
        "spec": {"pool": "ci", "priority": "high", "extensions": [{"ttl": "1h", "by": "x"}]},
        "status": {"phase": "Bound", "shard": 3},
    }
    lease = ClusterLease.model_validate(stored)
    assert (lease.spec.pool, lease.spec.extensions[0].ttl) == ("ci", "1h")
    assert lease.status is not None and lease.status.phase == "Bound"
    with pytest.raises(ValidationError):
        ClusterLeaseSpec(pool="ci", tll="1h")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        ClusterLeaseSpec.model_validate({"pool": "ci", "tll": "1h"})
