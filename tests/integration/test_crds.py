"""The generated CRDs on a real API server: they install, they hold kubectl users to the models'
rules with messages naming the field, `kubectl explain` describes every field, and status is
writable only through its subresource, one condition of each type."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

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
    assert len(names) == 8
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


def refusal_of_pool(cluster: Cluster, **spec: object) -> str:
    """What the API server says when refusing the valid pool with `spec` fields replaced."""
    document = yaml.safe_load(VALID_POOL)
    document["metadata"]["name"] = "invalid"
    document["spec"].update(spec)
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(document), check=False)
    assert result.returncode != 0, "refused"
    return result.stderr


ROUTE = {"gateway": {"name": "clusters", "namespace": "gw"}, "domain": "clusters.example.com"}


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ({"type": "vcluster", "k3s": {}}, "backend.k3s is set but backend.type is not k3s"),
        (
            {"type": "vcluster", "vcluster": {"exposure": {"type": "TLSRoute"}}},
            "exposure.gateway and exposure.domain are set with, and only with, type TLSRoute",
        ),
        (
            {"type": "k3s", "k3s": {"exposure": {"type": "NodePort", **ROUTE}}},
            "exposure.gateway and exposure.domain are set with, and only with, type TLSRoute",
        ),
        (
            {"type": "apiserver", "apiserver": {"exposure": {"type": "TLSRoute", **ROUTE}}},
            "the apiserver backend is exposed by NodePort or LoadBalancer",
        ),
    ],
    ids=["foreign-block", "route-without-gateway", "gateway-without-route", "apiserver-route"],
)
def test_backend_settings_that_cannot_work_are_refused_with_a_reason(
    cluster: Cluster, backend: dict[str, object], message: str
) -> None:
    assert message in refusal_of_pool(cluster, backend=backend)


@pytest.mark.parametrize("backend", [None, {"placement": {"sharedNodes": True}}])
def test_a_pool_that_names_no_backend_is_refused_naming_the_backends(
    cluster: Cluster, backend: dict[str, object] | None
) -> None:
    """No default: `local`, the only one a default could be, cannot work in the shipped image."""
    document = yaml.safe_load(VALID_POOL)
    document["metadata"]["name"] = "no-backend"
    if backend is None:
        del document["spec"]["backend"]
    else:
        document["spec"]["backend"] = backend
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(document), check=False)
    assert result.returncode != 0, "refused"
    assert "spec.backend.type is required: apiserver, k3s or vcluster" in result.stderr
    assert "local" in result.stderr and "namespace" in result.stderr


@pytest.mark.parametrize(
    ("diagnostics", "message"),
    [
        ({"bucket": "b", "kmsKeyId": "k"}, "spec.diagnostics.bucket"),
        (
            {"bucket": "bundles", "serverSideEncryption": "AES256", "kmsKeyId": "k"},
            "kmsKeyId needs serverSideEncryption: aws:kms",
        ),
        ({"bucket": "bundles", "endpoint": "minio:9000"}, "spec.diagnostics.endpoint"),
        ({"bucket": "bundles", "maxBytes": 1024}, "spec.diagnostics.maxBytes"),
        ({"bucket": "bundles", "credentialsSecretRef": {"name": "s", "key": "k"}}, "key"),
    ],
    ids=["short-bucket", "kms-key-without-kms", "endpoint-without-scheme", "tiny-bundle", "key"],
)
def test_diagnostics_settings_that_cannot_work_are_refused(
    cluster: Cluster, diagnostics: dict[str, object], message: str
) -> None:
    assert message in refusal_of_pool(cluster, diagnostics=diagnostics)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"mode": "autoscale"}, "autoscale needs maxWarm, at least minWarm"),
        ({"mode": "autoscale", "minWarm": 3, "maxWarm": 2}, "autoscale needs maxWarm"),
        ({"mode": "autoscale", "maxWarm": 3, "window": "1s"}, "more than 1000 windows"),
        ({"maxSurge": 0}, "spec.policy.maxSurge"),
    ],
    ids=["no-max", "max-below-min", "too-many-windows", "no-surge"],
)
def test_pool_policies_the_operator_could_not_follow_are_refused(
    cluster: Cluster, policy: dict[str, object], message: str
) -> None:
    """Every rule of the operator's model is in the CRD: a pool the model refused would make
    its reconcile fail at every pass instead of being refused at the door."""
    assert message in refusal_of_pool(cluster, policy=policy)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"addons": [{"name": "a"}]}, "an addon has one of manifests, configMapRef or chart"),
        (
            {"addons": [{"name": "a", "manifests": "x", "configMapRef": {"name": "c"}}]},
            "an addon has one of manifests, configMapRef or chart",
        ),
        (
            {"addons": [{"name": "a", "manifests": "x"}, {"name": "a", "manifests": "y"}]},
            "Duplicate value",
        ),
        ({"readinessGates": {"deploymentsAvailable": ["web"]}}, "deploymentsAvailable[0]"),
        (
            {
                "addons": [
                    {"name": "a", "chart": {"repository": "https://c.example", "version": "1.0.0"}}
                ]
            },
            "chart.name is required for a chart repository",
        ),
        (
            {
                "addons": [
                    {
                        "name": "a",
                        "chart": {
                            "repository": "oci://r.example/c",
                            "name": "c",
                            "version": "1.0.0",
                        },
                    }
                ]
            },
            "refused for oci://",
        ),
        (
            {
                "addons": [
                    {"name": "a", "chart": {"repository": "oci://r.example/c", "version": "^1.0"}}
                ]
            },
            "spec.addons[0].chart.version",
        ),
    ],
    ids=[
        "no-source",
        "two-sources",
        "same-name",
        "deployment-without-namespace",
        "chart-without-name",
        "oci-with-name",
        "version-range",
    ],
)
def test_addons_and_gates_the_operator_could_not_follow_are_refused(
    cluster: Cluster, template: dict[str, object], message: str
) -> None:
    assert message in refusal_of_pool(cluster, **template)


def test_a_pool_exposed_through_a_gateway_is_accepted(cluster: Cluster) -> None:
    document = yaml.safe_load(VALID_POOL)
    document["metadata"]["name"] = "routed"
    document["spec"]["backend"] = {
        "type": "vcluster",
        "vcluster": {"exposure": {"type": "TLSRoute", **ROUTE, "port": 8443}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(document))
    stored = json.loads(
        cluster.kubectl("get", "clusterpool", "routed", "-n", NAMESPACE, "-o", "json").stdout
    )
    assert stored["spec"]["backend"]["vcluster"]["exposure"]["port"] == 8443


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


# `kubectl explain` lists each field as `  name<TAB><type>`, maybe an `  enum: ...` line, then
# its description indented by four, or `<no description>` when the schema has none.
FIELD = re.compile(r"^  (\S+)\t<[^>]*>")


def explained_fields(text: str) -> dict[str, str]:
    """Each field of the FIELDS section of `kubectl explain` and the description it printed."""
    fields: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.partition("\nFIELDS:\n")[2].splitlines():
        if match := FIELD.match(line):
            current = fields.setdefault(match.group(1), [])
        elif line.startswith("    "):
            current.append(line.strip())
    return {name: " ".join(lines) for name, lines in fields.items()}


def undescribed(fields: dict[str, str]) -> list[str]:
    return [name for name, text in fields.items() if text in ("", "<no description>")]


def properties_at(plural: str, path: tuple[str, ...]) -> set[str]:
    """The fields the generated CRD has at `path` (a list's at its items)."""
    crd = yaml.safe_load(render_all()[f"lessor.dev_{plural}.yaml"])
    node: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in path:
        node = node["properties"][name]
        node = node.get("items", node)
    return set(node["properties"])


@pytest.mark.parametrize(
    ("target", "plural", "path"),
    [
        ("clusterlease", "clusterleases", ()),
        ("clusterlease.spec", "clusterleases", ("spec",)),
        ("clusterpool.spec", "clusterpools", ("spec",)),
        ("clusterlease.status.conditions", "clusterleases", ("status", "conditions")),
    ],
)
def test_kubectl_explain_describes_every_field(
    cluster: Cluster, tmp_path: Path, target: str, plural: str, path: tuple[str, ...]
) -> None:
    """What a platform engineer reads: kube-apiserver publishes a CRD's schema a moment after
    the CRD is Established, so explain is asked again until it shows every field described (or
    a minute has passed). A discovery cache of the test's own keeps other runs' out of it."""
    wait_established(cluster, f"{plural}.lessor.dev")
    deadline = time.monotonic() + 60
    while True:
        result = cluster.kubectl(
            "explain", target, f"--cache-dir={tmp_path / 'cache'}", check=False
        )
        fields = explained_fields(result.stdout) if result.returncode == 0 else {}
        if (fields and not undescribed(fields)) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr
    assert set(fields) == properties_at(plural, path)
    assert undescribed(fields) == [], result.stdout


def condition(kind: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": "Checked",
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }


def write_conditions(
    cluster: Cluster, *conditions: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    patch = json.dumps({"status": {"conditions": list(conditions)}})
    return cluster.kubectl(
        "patch", "clusterpool", "conditions", "-n", NAMESPACE, "--subresource=status",
        "--type=merge", "-p", patch, check=False,
    )  # fmt: skip


def test_a_status_with_two_conditions_of_one_type_is_refused(cluster: Cluster) -> None:
    """`conditions` is a list keyed by type: kube-apiserver itself refuses a duplicate, so no
    writer (an older operator, a person with kubectl) can leave two Ready conditions for
    `kubectl wait` and GitOps health checks to choose between."""
    document = yaml.safe_load(VALID_POOL)
    document["metadata"]["name"] = "conditions"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(document))
    accepted = write_conditions(cluster, condition("Ready"), condition("Warm"))
    assert accepted.returncode == 0, accepted.stderr
    refused = write_conditions(cluster, condition("Ready"), condition("Ready"))
    assert refused.returncode != 0, "refused"
    assert "status.conditions[1]: Duplicate value" in refused.stderr
    stored = cluster.kubectl(
        "get", "clusterpool", "conditions", "-n", NAMESPACE,
        "-o", "jsonpath={.status.conditions[*].type}",
    )  # fmt: skip
    assert stored.stdout == "Ready Warm", "the refused write changed nothing"
