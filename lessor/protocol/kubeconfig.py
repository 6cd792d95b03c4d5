"""The kubeconfig documents lessor writes: one cluster, one user, one context, self-contained
(certificates embedded), so a file works from any directory and on any machine. One builder for
the leases' kubeconfigs and the local control plane's own."""

from __future__ import annotations

import yaml


def kubeconfig(
    name: str,
    server: str,
    user: str,
    credentials: dict[str, str],
    *,
    ca_data: str | None = None,
    namespace: str | None = None,
    server_name: str | None = None,
) -> str:
    """`credentials` is the kubeconfig user entry (`token`, or `client-certificate-data` and
    `client-key-data`); `ca_data` is base64 PEM, absent when the server's certificate is
    trusted by the system; `server_name` is the name to check the server's certificate against
    when `server` is an address it was not issued for (a node's, in front of a NodePort)."""
    cluster: dict[str, str] = {"server": server}
    if ca_data:
        cluster["certificate-authority-data"] = ca_data
    if server_name:
        cluster["tls-server-name"] = server_name
    context = {"cluster": name, "user": user} | ({"namespace": namespace} if namespace else {})
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": name, "context": context}],
            "current-context": name,
        },
        sort_keys=False,
    )
