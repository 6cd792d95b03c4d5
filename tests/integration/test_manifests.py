"""What `kubectl apply -k manifests/overlays/...` installs, checked by the real API server:
every object of both overlays and every example passes a server-side dry run, and the API
server's ServiceAccount, bound as the manifests bind it, cannot write any status."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.controlplane.kubectl import Cluster
from tests.integration.kustomize import dry_run_apply, kustomize
from tests.integration.operator_harness import wait_for
from tests.integration.service_accounts import install_rbac

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NAMESPACE = "lessor-system"
SANDBOXES = "lessor-sandboxes"
APISERVER = f"system:serviceaccount:{NAMESPACE}:lessor-apiserver"
OPERATOR = f"system:serviceaccount:{NAMESPACE}:lessor-operator"


def render(cluster: Cluster, overlay: str) -> list[dict[str, Any]]:
    return kustomize(cluster, MANIFESTS / "overlays" / overlay)


@pytest.fixture(scope="module")
def installed_rbac(control_plane: Cluster) -> Cluster:
    """The CRDs, the namespace and the two components' RBAC, applied for real (can-i needs
    them); the Deployments are not, so nothing runs."""
    control_plane.kubectl("apply", "-k", str(ROOT / "crds"))
    objects = [
        document
        for document in render(control_plane, "dev")
        if document["kind"] in ("Namespace", "ServiceAccount", "Role", "RoleBinding")
    ]
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    return control_plane


@pytest.mark.parametrize("overlay", ["dev", "production-like"])
def test_every_object_of_an_overlay_passes_a_server_side_dry_run(
    installed_rbac: Cluster, overlay: str
) -> None:
    objects = render(installed_rbac, overlay)
    kinds = {document["kind"] for document in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Role"} <= kinds
    assert sum(document["kind"] == "CustomResourceDefinition" for document in objects) == 8
    dry_run_apply(installed_rbac, objects)
    for document in objects:
        if document["kind"] == "Deployment":
            pod = document["spec"]["template"]["spec"]  # type: ignore[index]
            [container] = pod["containers"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert "livenessProbe" in container and "readinessProbe" in container


@pytest.mark.parametrize("example", sorted(p.name for p in (MANIFESTS / "examples").glob("*.yaml")))
def test_every_example_passes_a_server_side_dry_run(installed_rbac: Cluster, example: str) -> None:
    result = installed_rbac.kubectl(
        "apply", "--dry-run=server", "-f", str(MANIFESTS / "examples" / example), check=False
    )
    assert result.returncode == 0, result.stderr


def can(
    cluster: Cluster,
    who: str,
    verb: str,
    resource: str,
    subresource: str = "",
    namespace: str = NAMESPACE,
    name: str = "",
) -> bool:
    """kube-apiserver's own answer (a SubjectAccessReview, which needs no installed resource
    type, unlike `kubectl auth can-i`) for a ServiceAccount, with the groups it would have."""
    plural, _, group = resource.partition(".")
    account_namespace = who.split(":")[2]
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": who,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}",
                       "system:authenticated"],
            "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group,
                                   "resource": plural, "subresource": subresource, "name": name},
        },
    }  # fmt: skip
    answer = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout
    return bool(json.loads(answer)["status"].get("allowed"))


def test_the_api_servers_account_cannot_write_any_status(installed_rbac: Cluster) -> None:
    crds = json.loads(installed_rbac.kubectl("get", "crd", "-o", "json").stdout)["items"]
    plurals = [
        f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        for crd in crds
        if crd["spec"]["group"] == "lessor.dev"
    ]
    assert len(plurals) == 8
    for resource in [*plurals, "pods", "deployments.apps", "namespaces"]:
        for verb in ("patch", "update", "create"):
            assert not can(installed_rbac, APISERVER, verb, resource, "status"), (verb, resource)
    listed = installed_rbac.kubectl(
        "auth", "can-i", "--list", f"--as={APISERVER}", "-n", NAMESPACE
    ).stdout
    assert "/status" not in listed
    # What it needs, it has; the operator owns the status it cannot touch.
    assert can(installed_rbac, APISERVER, "create", "clusterleases.lessor.dev")
    assert can(installed_rbac, APISERVER, "patch", "clusterleases.lessor.dev")
    assert not can(installed_rbac, APISERVER, "delete", "clusterleases.lessor.dev")
    assert not can(installed_rbac, APISERVER, "patch", "clusterpools.lessor.dev")
    assert not can(installed_rbac, APISERVER, "list", "secrets")
    # A diagnostics bundle's record is read once its lease is gone, and only the operator,
    # which writes it, deletes it.
    assert can(installed_rbac, APISERVER, "get", "diagnosticsbundles.lessor.dev")
    assert not can(installed_rbac, APISERVER, "delete", "diagnosticsbundles.lessor.dev")
    assert can(installed_rbac, OPERATOR, "delete", "diagnosticsbundles.lessor.dev")
    # Polls are served from its watches. It creates reservations and never edits one; the
    # operator deletes each once its lease no longer holds it.
    for watched in ("clusterleases", "clusterpools", "accesspolicies"):
        assert can(installed_rbac, APISERVER, "watch", f"{watched}.lessor.dev"), watched
    assert can(installed_rbac, APISERVER, "create", "configmaps")
    assert not can(installed_rbac, APISERVER, "patch", "configmaps")
    assert can(installed_rbac, OPERATOR, "watch", "configmaps")
    assert can(installed_rbac, OPERATOR, "delete", "configmaps")
    assert not can(installed_rbac, OPERATOR, "create", "configmaps")
    assert can(installed_rbac, OPERATOR, "patch", "clusterleases.lessor.dev", "status")
    assert can(installed_rbac, OPERATOR, "update", "leases.coordination.k8s.io")
    assert not can(installed_rbac, OPERATOR, "create", "clusterroles.rbac.authorization.k8s.io")
    # It reports whether each AccessPolicy is valid, and never edits one.
    assert can(installed_rbac, OPERATOR, "update", "accesspolicies.lessor.dev", "status")
    assert can(installed_rbac, OPERATOR, "watch", "accesspolicies.lessor.dev")
    assert not can(installed_rbac, OPERATOR, "update", "accesspolicies.lessor.dev")


def test_the_api_servers_account_cannot_mint_a_token_or_rewrite_the_configuration(
    control_plane: Cluster, tmp_path: Path
) -> None:
    """Review N8: RBAC lets the API server create Secrets and write ConfigMaps in its namespace.
    A Secret of type service-account-token naming lessor-operator would have Kubernetes mint the
    operator's token for it; lessor-config is read by both components at start. The shipped
    admission policy refuses both, as the API server's own ServiceAccount, and lets through
    what the API server makes: an execution's command, its session key, its records."""
    namespace = f"n8-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", namespace)
    api = str(install_rbac(control_plane, namespace, tmp_path)["lessor-apiserver"])

    def as_api(document: dict[str, object]) -> subprocess.CompletedProcess[str]:
        document["metadata"] = {"namespace": namespace, **document["metadata"]}  # type: ignore[dict-item]
        return control_plane.kubectl(
            "create", "-f", "-", "--kubeconfig", api, input=json.dumps(document), check=False
        )

    token = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "x-command",
                     "annotations": {"kubernetes.io/service-account.name": "lessor-operator"}},
    }  # fmt: skip

    def refusal() -> subprocess.CompletedProcess[str] | None:
        """The policy's refusal, once kube-apiserver applies the policy just installed (its
        admission informer takes a moment to see a changed policy)."""
        answer = as_api(token)
        if answer.returncode == 0:  # not yet: what was let through goes, and it is tried again
            control_plane.kubectl("delete", "secret", "x-command", "-n", namespace)
            return None
        return answer

    refused = wait_for("the admission policy in force", refusal, timeout=60)
    assert "lessor-apiserver-writes" in refused.stderr, refused
    gone = control_plane.kubectl("get", "secret", "x-command", "-n", namespace, check=False)
    assert gone.returncode != 0, "no token was minted"
    other = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen"}}
    assert as_api(other).returncode != 0
    for own in ("e1-command", "lessor-session-key"):
        made = as_api({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": own}})
        assert made.returncode == 0, made.stderr

    control_plane.kubectl(
        "create", "configmap", "lessor-config", "-n", namespace, "--from-literal=config.yaml={}"
    )
    rewrite = control_plane.kubectl(
        "patch", "configmap", "lessor-config", "-n", namespace, "--kubeconfig", api,
        "--type=merge", "-p", '{"data": {"config.yaml": "operator: {}"}}', check=False,
    )  # fmt: skip
    # Refused by RBAC since issue 45 (the API server patches no ConfigMap), and the admission
    # policy behind it would refuse it too.
    assert rewrite.returncode != 0 and "forbidden" in rewrite.stderr.lower(), rewrite.stderr
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}
    assert as_api(plain).returncode != 0
    record = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "r", "labels": {"lessor.dev/session": "true"}}}  # fmt: skip
    assert as_api(record).returncode == 0


def test_only_an_operator_of_local_pools_may_read_the_kube_system_namespace(
    installed_rbac: Cluster,
) -> None:
    """Issue 25: a `local` cluster's directory is named by its host, the uid of kube-system,
    which only the `local` backend needs to read; base grants no namespace read, and
    manifests/local-backend that one namespace and no other. (manifests/instance-namespaces,
    which the overlays install, lets the operator `get` a namespace by name, to verify the
    teardown of the ones it made, and `list` namespaces, to find those whose instance is gone:
    it reads every namespace's name and labels, never anything in them.
    tests/integration/test_instance_namespaces.py covers it.)"""
    for overlay in ("dev", "production-like"):
        bound = [
            d for d in render(installed_rbac, overlay)
            if d["kind"] == "ClusterRoleBinding" and "lessor-operator-host-identity" in str(d)
        ]  # fmt: skip
        assert not bound, overlay
    assert not can(installed_rbac, OPERATOR, "get", "namespaces", namespace="", name="kube-system")
    installed_rbac.kubectl("apply", "-k", str(MANIFESTS / "local-backend"))
    try:
        assert can(installed_rbac, OPERATOR, "get", "namespaces", namespace="", name="kube-system")
        assert not can(installed_rbac, OPERATOR, "get", "namespaces", namespace="", name="default")
        assert not can(installed_rbac, OPERATOR, "list", "namespaces", namespace="")
        assert not can(
            installed_rbac, APISERVER, "get", "namespaces", namespace="", name="kube-system"
        )
    finally:
        installed_rbac.kubectl("delete", "-k", str(MANIFESTS / "local-backend"))


def test_the_ingress_exposes_the_api_and_not_the_metrics(control_plane: Cluster) -> None:
    """Issue 18, item 8: what the production-like overlay puts behind its public Ingress is
    /v1/... and the probes' /healthz, never /metrics (which anyone could then read, and make
    series of)."""
    [ingress] = [d for d in render(control_plane, "production-like") if d["kind"] == "Ingress"]
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]  # type: ignore[index]
    exposed = {(p["path"], p["pathType"]) for p in paths}
    assert ("/", "Prefix") not in exposed and all(path != "/metrics" for path, _ in exposed)
    assert ("/v1", "Prefix") in exposed


def test_only_tenant_pods_are_within_the_api_servers_reach(installed_rbac: Cluster) -> None:
    """Issue 18, item 10: the API server reads logs of, execs into, attaches to and forwards
    ports of sandbox pods, which run in lessor-sandboxes; it can do none of it to a pod of
    lessor-system, the operator's included (an exec there would hand it the operator's rights).
    RBAC cannot narrow pod rights by label, only by namespace."""
    for subresource in ("exec", "attach", "portforward"):
        assert not can(installed_rbac, APISERVER, "create", "pods", subresource), subresource
        assert not can(installed_rbac, OPERATOR, "create", "pods", subresource), subresource
        assert can(installed_rbac, APISERVER, "create", "pods", subresource, SANDBOXES)
    assert can(installed_rbac, APISERVER, "get", "pods", "log", SANDBOXES)
    assert not can(installed_rbac, APISERVER, "get", "pods", "log")
    assert not can(installed_rbac, APISERVER, "get", "pods")
    # The operator places and verifies sandboxes there, and runs detached executions...
    claims = "sandboxclaims.extensions.agents.x-k8s.io"
    assert can(installed_rbac, OPERATOR, "create", claims, namespace=SANDBOXES)
    assert can(installed_rbac, OPERATOR, "create", "pods", "exec", SANDBOXES)
    assert not can(installed_rbac, OPERATOR, "create", claims)
    # ...but makes no pod there (agent-sandbox does), nor reads its Secrets.
    assert not can(installed_rbac, OPERATOR, "create", "pods", namespace=SANDBOXES)
    assert not can(installed_rbac, OPERATOR, "get", "secrets", namespace=SANDBOXES)
    assert not can(installed_rbac, APISERVER, "get", "secrets", namespace=SANDBOXES)


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are checked here"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


@pytest.mark.parametrize("overlay", ["dev", "production-like"])
def test_network_policies_let_no_sandbox_reach_lessors_pods(
    control_plane: Cluster, overlay: str
) -> None:
    """Issue 18, item 10: both namespaces accept no connection by default; in lessor-system
    the API server takes connections on its HTTP port (it is public by design), and no rule
    admitting anything to the operator admits the sandboxes' namespace. (Enforcing them takes a
    CNI that implements NetworkPolicy; the kind suite runs one.)"""
    objects = render(control_plane, overlay)
    policies = [d for d in objects if d["kind"] == "NetworkPolicy"]
    for namespace in (NAMESPACE, SANDBOXES):
        assert any(
            p["metadata"].get("namespace", NAMESPACE) == namespace
            and p["spec"]["podSelector"] == {}
            and p["spec"]["policyTypes"] == ["Ingress"]
            and not p["spec"].get("ingress")
            for p in policies
        ), f"no default deny in {namespace}"
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]  # type: ignore[index]
        for d in objects
        if d["kind"] == "Deployment"
    }
    operator_rules = [
        rule
        for p in policies
        if p["metadata"].get("namespace", NAMESPACE) == NAMESPACE
        and _selects(p, pods["lessor-operator"])
        for rule in p["spec"].get("ingress", [])
    ]
    assert operator_rules, "the operator's probes and metrics are reachable"
    for rule in operator_rules:
        assert rule.get("from"), "a rule admitting every namespace admits the sandboxes"
        for peer in rule["from"]:
            expressions = peer["namespaceSelector"]["matchExpressions"]
            assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                    "values": [SANDBOXES]} in expressions  # fmt: skip
    config = next(d for d in objects if d["kind"] == "ConfigMap")
    assert yaml.safe_load(config["data"]["config.yaml"])["agentSandbox"]["namespace"] == SANDBOXES  # type: ignore[index]
