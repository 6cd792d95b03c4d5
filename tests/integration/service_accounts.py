"""The manifests' RBAC for the operator and the API server, installed into a test namespace,
and kubeconfigs with tokens of their ServiceAccounts: a component run with one can do exactly
what its manifests allow, so a missing permission fails the test as it would fail in a cluster."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from lessor.controlplane.kubectl import Cluster

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
RBAC_KINDS = {
    "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}  # fmt: skip


def install_rbac(
    cluster: Cluster,
    namespace: str,
    work: Path,
    sandboxes: str | None = None,
    *,
    local_backend: bool = False,
    instance_namespaces: bool = False,
) -> dict[str, Path]:
    """{"lessor-operator": kubeconfig, "lessor-apiserver": kubeconfig}; with `sandboxes` (an
    existing namespace standing for lessor-sandboxes), also the rights there; with
    `local_backend`, manifests/local-backend; with `instance_namespaces`,
    manifests/instance-namespaces (its admission policy included). The API server's admission
    policy (manifests/apiserver-admission), which both overlays install, is always there."""
    directories = [MANIFESTS / "base", MANIFESTS / "apiserver-admission"]
    directories += [MANIFESTS / "sandboxes"] if sandboxes else []
    directories += [MANIFESTS / "local-backend"] if local_backend else []
    directories += [MANIFESTS / "instance-namespaces"] if instance_namespaces else []
    documents = []
    for directory in directories:
        rendered = cluster.kubectl("kustomize", str(directory)).stdout
        for document in yaml.safe_load_all(rendered):
            if not document or document["kind"] not in RBAC_KINDS:
                continue
            owned = document["metadata"].get("namespace") in (
                None,
                "lessor-system",
                "lessor-sandboxes",
            )
            if document["kind"] == "ClusterRoleBinding" or (
                document["kind"] == "RoleBinding" and not owned
            ):
                # One per test namespace: the binding of an installed lessor (kind's) stays,
                # cluster-wide and in namespaces not its own (`default`'s, of the host API's
                # addresses), where the same name would take its subject away.
                document["metadata"]["name"] += f"-{namespace}"
            text = json.dumps(document).replace('"lessor-sandboxes"', json.dumps(sandboxes))
            documents.append(json.loads(text.replace('"lessor-system"', json.dumps(namespace))))
    listed = {"apiVersion": "v1", "kind": "List", "items": documents}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(listed))  # one call: a second each
    kubeconfigs = {}
    for account in ("lessor-operator", "lessor-apiserver"):
        token = cluster.kubectl(
            "create", "token", account, "-n", namespace, "--duration=6h"
        ).stdout.strip()
        kubeconfigs[account] = write_token_kubeconfig(
            cluster, work / f"{account}.kubeconfig", account, token
        )
    return kubeconfigs


def write_token_kubeconfig(cluster: Cluster, path: Path, user: str, token: str) -> Path:
    """A kubeconfig at `path` for `cluster` that authenticates with the bearer `token`."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    [entry] = admin["clusters"]
    server = entry["cluster"]["server"]
    ca = entry["cluster"].get("certificate-authority-data")
    if ca is None:  # the local control plane's names a file
        named = cluster.kubeconfig.parent / entry["cluster"]["certificate-authority"]
        ca = base64.b64encode(named.read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": user}}],
        "current-context": "c",
    }))  # fmt: skip
    return path
