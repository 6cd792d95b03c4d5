"""Reads a leased cluster's API for a diagnostics bundle, as hostile data.

The cluster belongs to its tenant until teardown: its API server may answer slowly, endlessly or
with gigabytes. Every read here is streamed, charged to the bundle's budget chunk by chunk as it
arrives (an error's body too), and cut at a byte limit and at what is left of the budget; the
caller bounds the time and decides what to decode (lessor.operator.diagnostics.capture). The
kubeconfig is the cluster's admin one the backend published (its instance's Secret): it reaches
the cluster where its users do (a node port, a load balancer, a Gateway by SNI), and it still
works after the lease's own credential expired with the lease.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml

from lessor.operator.backends.published_kubeconfig import cluster_entry, user_entry
from lessor.operator.diagnostics.bundle import Budget

ERROR_BODY_LIMIT = 512


class ReadError(Exception):
    """One read failed (refused, an error status, no answer); the capture goes on without it."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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
        with tempfile.TemporaryDirectory(prefix="lessor-capture-") as scratch:
            path = Path(scratch) / "client.pem"
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(cert) + b"\n" + base64.b64decode(key))
            context.load_cert_chain(str(path))
    return context


class ClusterReader:
    """GETs against one cluster with a kubeconfig's server, CA and credentials, each charged to
    `budget`."""

    def __init__(self, kubeconfig_text: str, budget: Budget, *, timeout: float = 10.0) -> None:
        self.budget = budget
        document = yaml.safe_load(kubeconfig_text)
        cluster = cluster_entry(document) if isinstance(document, dict) else {}
        if not cluster.get("server"):
            raise ReadError("the cluster's kubeconfig names no server")
        user = user_entry(document)
        # identity: the raw bytes are what is counted, so no compressed answer can inflate past
        # the limit in memory (a gzip bomb)
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if user.get("token"):
            headers["Authorization"] = f"Bearer {user['token']}"
        self.server = str(cluster["server"])
        # A kubeconfig confined to one namespace (the `namespace` backend's) names it here: what
        # cannot be listed cluster-wide is listed there.
        self.namespace = _context_namespace(document)
        server_name = cluster.get("tls-server-name")
        self._extensions = {"sni_hostname": server_name} if server_name else {}
        try:
            tls = _tls(cluster, user)
        except (ssl.SSLError, ValueError) as error:
            raise ReadError(f"the cluster's kubeconfig has unusable TLS data: {error}") from None
        self._client = httpx.AsyncClient(
            base_url=self.server,
            verify=tls,
            headers=headers,
            timeout=timeout,
            follow_redirects=False,
        )

    async def get(
        self, path: str, limit: int, params: dict[str, str | int] | None = None
    ) -> tuple[bytes, bool]:
        """The body of GET `path`, at most `limit` bytes and what is left of the budget, and
        whether it was cut there."""
        try:
            async with self._client.stream(
                "GET", path, params=params, extensions=self._extensions
            ) as response:
                if response.status_code != httpx.codes.OK:
                    body, _ = await self._bounded(response, ERROR_BODY_LIMIT)
                    text = body.decode(errors="replace")
                    raise ReadError(
                        f"GET {path}: {response.status_code} {text}", response.status_code
                    )
                return await self._bounded(response, limit)
        except httpx.HTTPError as error:
            raise ReadError(f"GET {path}: {type(error).__name__} {error}") from None

    async def close(self) -> None:
        await self._client.aclose()

    async def _bounded(self, response: httpx.Response, limit: int) -> tuple[bytes, bool]:
        limit = min(limit, self.budget.left)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            kept = chunk[: limit - size]
            chunks.append(kept)
            size += len(kept)
            self.budget.spend(len(kept))
            if len(kept) < len(chunk):
                return b"".join(chunks), True
        return b"".join(chunks), False
