"""What the backend tests share: a namespace that enforces Pod Security `restricted` as
lessor-system does, a wait on an async probe, and a kubeconfig of the shape a cluster publishes."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Awaitable, Callable

import yaml

from lessor.controlplane.kubectl import Cluster
from lessor.controlplane.pki import CertificateAuthority


def restricted_namespace(cluster: Cluster, prefix: str) -> str:
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    return namespace


async def until(probe: Callable[[], Awaitable[bool]], what: str, timeout: float = 120.0) -> None:
    """Poll `probe`; the timeout is a hang guard, not a figure."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await probe():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


def published_kubeconfig() -> str:
    """A kubeconfig of the shape k3s and vcluster write: the server on loopback, a CA, a client
    certificate."""
    authority = CertificateAuthority("k3s-server-ca")
    client = authority.issue("system:admin", organization="system:masters", client=True)
    encode = lambda pem: base64.b64encode(pem).decode()  # noqa: E731
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "default", "cluster": {
            "server": "https://127.0.0.1:6443",
            "certificate-authority-data": encode(authority.cert_pem)}}],
        "users": [{"name": "default", "user": {
            "client-certificate-data": encode(client.cert_pem),
            "client-key-data": encode(client.key_pem)}}],
        "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}],
        "current-context": "default",
    })  # fmt: skip
