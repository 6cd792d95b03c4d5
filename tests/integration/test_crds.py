"""The generated CRDs on a real API server: they install, they hold kubectl users to the models'
rules with messages naming the field, and status is writable only through its subresource."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from lessor.controlplane.kubectl import Cluster, wait_established
from lessor.resources.crdgen import render_all

pytestmark = pytest.mark.integration

CRDS = Path(__file__).resolve().parents[2] / "crds"
NAMESPACE = "crd-tests"

VALID_POLICY = textwrap.dedent(
    """
    apiVersion: lessor.dev/v1alpha1
    kind: AccessPolicy
    metadata: {name: ci, namespace: crd-tests}
    spec:
      auth:
        oidc:
          issuer: https://token.actions.example
          audience: [lessor]
          algorithms: [RS256, ES256]
        staticTokens:
        - secretRef: {name: lessor-tokens, key: ci}
          claims: {sub: ci-bot}
      identity: "{repository_owner}/{repository}"
      rules:
      - match: {claim: repository_owner, value: acme}
        pools: ["ci-*"]
        maxTtl: 1h30m
        maxConcurrentLeases: 3
    """
)
VALID_POOL = textwrap.dedent(
    """
    apiVersion: lessor.dev/v1alpha1
    kind: ClusterPool
    metadata: {name: ci-small, namespace: crd-tests}
    spec:
      ttl: 30m
      warmTarget: 2
      policy: {mode: fixed}
      backend: {type: local}
    """
)


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster) -> Cluster:
    control_plane.kubectl("apply", "-f", str(CRDS))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    return control_plane


def test_every_crd_becomes_established(cluster: Cluster) -> None:
    names = [
        yaml.safe_load(text)["metadata"]["name"]
        for file, text in render_all().items()
        if file.endswith(".yaml")
    ]
    assert len(names) == 7
    wait_established(cluster, *names)
    listed = cluster.kubectl("api-resources", "--api-group=lessor.dev", "-o", "name").stdout
    assert sorted(listed.split()) == sorted(f"{n.split('.')[0]}.lessor.dev" for n in names)


def test_valid_policy_and_pool_are_accepted(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", input=VALID_POLICY)
    cluster.kubectl("apply", "-f", "-", input=VALID_POOL)
    pools = cluster.kubectl("get", "clusterpools", "-n", NAMESPACE).stdout
    assert "ci-small" in pools and "WARM" in pools, "printer columns show"


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda p: p["spec"]["rules"][0].update(maxTtl="2days"), "spec.rules[0].maxTtl"),
        (
            lambda p: p["spec"]["auth"]["oidc"].update(algorithms=["HS256"]),
            "spec.auth.oidc.algorithms[0]",
        ),
        (lambda p: p["spec"].pop("identity"), "spec.identity"),
        (lambda p: p["spec"].update(auth={}), "auth needs at least one of"),
    ],
    ids=["bad-duration", "unknown-algorithm", "missing-identity", "no-auth-method"],
)
def test_invalid_policies_are_refused_naming_the_field(
    cluster: Cluster, edit: object, field: str
) -> None:
    document = yaml.safe_load(VALID_POLICY)
    document["metadata"]["name"] = "invalid"
    edit(document)  # type: ignore[operator]
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(document), check=False)
    assert result.returncode != 0
    assert field in result.stderr


def test_status_is_written_only_through_the_status_subresource(cluster: Cluster) -> None:
    cluster.kubectl("apply", "-f", "-", input=VALID_POOL)
    patch = json.dumps({"status": {"ready": 5}})
    cluster.kubectl(
        "patch", "clusterpool", "ci-small", "-n", NAMESPACE, "--type=merge", "-p", patch
    )
    ready = ["get", "clusterpool", "ci-small", "-n", NAMESPACE, "-o", "jsonpath={.status.ready}"]
    assert cluster.kubectl(*ready).stdout == "", "the main resource ignores status"
    cluster.kubectl(
        "patch",
        "clusterpool",
        "ci-small",
        "-n",
        NAMESPACE,
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    )
    assert cluster.kubectl(*ready).stdout == "5"
