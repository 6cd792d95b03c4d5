"""Kubeconfigs a cluster writes about itself, read back by the operator (k3s's sidecar publishes
one, vcluster's syncer writes one).

They are written from inside the tenant's cluster pod, so they are read as hostile: bounded in
size, parsed as data, required to name exactly one cluster. The operator hands one out only with
its server pointed where clients can reach it (lessor.operator.backends.exposure).
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from lessor.operator.backends.base import BackendError
from lessor.operator.runtime.client import KubeClient, NotFoundError

LIMIT = 64 * 1024

Kubeconfig = dict[str, Any]


async def read(client: KubeClient, namespace: str, secret: str, key: str) -> Kubeconfig | None:
    """The kubeconfig under `key` of the Secret, None until it is there; BackendError when what
    is there is not a one-cluster kubeconfig of bounded size."""
    try:
        found = await client.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}")
    except NotFoundError:
        return None
    encoded = found.get("data", {}).get(key, "")
    if not encoded:
        return None
    if len(encoded) > LIMIT:
        raise BackendError(f"the kubeconfig in {namespace}/{secret} is too large")
    try:
        document = yaml.safe_load(base64.b64decode(encoded))
    except (ValueError, yaml.YAMLError) as error:
        raise BackendError(f"the kubeconfig in {namespace}/{secret} is not YAML") from error
    if not isinstance(document, dict) or not cluster_entry(document):
        raise BackendError(f"the kubeconfig in {namespace}/{secret} names no cluster")
    return document


def cluster_entry(kubeconfig: Kubeconfig) -> dict[str, Any]:
    """The `cluster` entry of a one-cluster kubeconfig, {} if it has none (or several)."""
    return _sole_entry(kubeconfig, "clusters", "cluster")


def user_entry(kubeconfig: Kubeconfig) -> dict[str, Any]:
    """The `user` entry of a one-user kubeconfig, {} if it has none (or several)."""
    return _sole_entry(kubeconfig, "users", "user")


def _sole_entry(kubeconfig: Kubeconfig, plural: str, name: str) -> dict[str, Any]:
    items = kubeconfig.get(plural)
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        return {}
    entry = items[0].get(name)
    return entry if isinstance(entry, dict) else {}


def ca_pem(kubeconfig: Kubeconfig) -> str:
    data = str(cluster_entry(kubeconfig).get("certificate-authority-data", ""))
    return base64.b64decode(data).decode(errors="replace")


def pointed_at(kubeconfig: Kubeconfig, server: str, server_name: str | None) -> str:
    """The kubeconfig with its server replaced, and the name to verify the certificate against
    when the server's address is not one the certificate names."""
    cluster = cluster_entry(kubeconfig)
    cluster["server"] = server
    cluster.pop("tls-server-name", None)
    if server_name:
        cluster["tls-server-name"] = server_name
    return yaml.safe_dump(kubeconfig, sort_keys=False)
