"""An HTTP client for one of lessor's clusters, from the admin kubeconfig its backend published.

The operator reaches into a cluster for two reasons: to read it for a diagnostics bundle
(lessor.operator.diagnostics.cluster_reader) and to prepare it before it is warm
(lessor.operator.addons). Both reach it where its users do (a node port, a load balancer, a
Gateway by SNI), with the kubeconfig's CA and credential, and nothing else of the kubeconfig
(no exec plugin, no proxy) is honoured: a kubeconfig is data here.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from lessor.operator.backends.published_kubeconfig import cluster_entry, user_entry


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used to reach its cluster."""


@dataclass
class ClusterHttp:
    client: httpx.AsyncClient
    # httpx's per-request extensions: the name to verify the server's certificate against.
    extensions: dict[str, Any]
    # The namespace a kubeconfig confined to one names (the `namespace` backend's), else None.
    namespace: str | None


def _context_namespace(kubeconfig: dict[str, Any]) -> str | None:
    contexts = kubeconfig.get("contexts")
    if not isinstance(contexts, list) or len(contexts) != 1 or not isinstance(contexts[0], dict):
        return None
    context = contexts[0].get("context")
    namespace = context.get("namespace") if isinstance(context, dict) else None
    return namespace if isinstance(namespace, str) and namespace else None


def _tls(cluster: dict[str, Any], user: dict[str, Any]) -> ssl.SSLContext:
    ca = cluster.get("certificate-authority-data")
    context = ssl.create_default_context(cadata=base64.b64decode(ca).decode() if ca else None)
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if cert and key:
        # ssl loads a key only from a file: one that lives for the call, readable by us alone.
        with tempfile.TemporaryDirectory(prefix="lessor-cluster-") as scratch:
            path = Path(scratch) / "client.pem"
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(cert) + b"\n" + base64.b64decode(key))
            context.load_cert_chain(str(path))
    return context


def connect(kubeconfig_text: str, *, headers: dict[str, str], timeout: float) -> ClusterHttp:
    """A client for the kubeconfig's one cluster and user; KubeconfigError if it names none or
    its TLS data is unusable."""
    try:
        document = yaml.safe_load(kubeconfig_text)
    except yaml.YAMLError as error:
        raise KubeconfigError(f"the cluster's kubeconfig is not YAML: {error}") from None
    cluster = cluster_entry(document) if isinstance(document, dict) else {}
    if not cluster.get("server"):
        raise KubeconfigError("the cluster's kubeconfig names no server")
    user = user_entry(document)
    headers = dict(headers)
    if user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    try:
        tls = _tls(cluster, user)
    except (ssl.SSLError, ValueError) as error:
        raise KubeconfigError(f"the cluster's kubeconfig has unusable TLS data: {error}") from None
    server_name = cluster.get("tls-server-name")
    client = httpx.AsyncClient(
        base_url=str(cluster["server"]),
        verify=tls,
        headers=headers,
        timeout=timeout,
        follow_redirects=False,
    )
    return ClusterHttp(
        client=client,
        extensions={"sni_hostname": server_name} if server_name else {},
        namespace=_context_namespace(document),
    )
