"""Reads a leased cluster's API for a diagnostics bundle, as hostile data.

The cluster belongs to its tenant until teardown: its API server may answer slowly, endlessly or
with gigabytes. Every read here is streamed, charged to the bundle's budget chunk by chunk as it
arrives (an error's body too), and cut at a byte limit and at what is left of the budget; the
caller bounds the time and decides what to decode (lessor.operator.diagnostics.bundle_contents). The
kubeconfig is the cluster's admin one the backend published (its instance's Secret): it reaches
the cluster where its users do (a node port, a load balancer, a Gateway by SNI), and it still
works after the lease's own credential expired with the lease.
"""

from __future__ import annotations

import httpx

from lessor.operator.backends.cluster_http import KubeconfigError, connect
from lessor.operator.diagnostics.bundle import Budget

ERROR_BODY_LIMIT = 512


class ReadError(Exception):
    """One read failed (refused, an error status, no answer); the capture goes on without it."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClusterReader:
    """GETs against one cluster with a kubeconfig's server, CA and credentials, each charged to
    `budget`."""

    def __init__(self, kubeconfig_text: str, budget: Budget, *, timeout: float = 10.0) -> None:
        self.budget = budget
        # identity: the raw bytes are what is counted, so no compressed answer can inflate past
        # the limit in memory (a gzip bomb)
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        try:
            connection = connect(kubeconfig_text, headers=headers, timeout=timeout)
        except KubeconfigError as error:
            raise ReadError(str(error)) from None
        self._client = connection.client
        self._extensions = connection.extensions
        # A kubeconfig confined to one namespace (the `namespace` backend's) names it: what
        # cannot be listed cluster-wide is listed there.
        self.namespace = connection.namespace

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
