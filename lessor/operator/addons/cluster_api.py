"""The few calls preparing a cluster makes to its API: discovery (which resource a kind is),
server-side apply, and GETs of what the gates look at.

Every answer is read up to a limit and every call has a timeout: the cluster is lessor's own and
no tenant has held it yet, but a cluster that misbehaves must cost a bounded wait, never a
reconciler's worker.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from lessor.operator.addons.manifests import Manifest
from lessor.operator.backends.cluster_http import ClusterHttp, connect

FIELD_MANAGER = "lessor"
ANSWER_LIMIT = 4 * 1024 * 1024
MESSAGE_LIMIT = 1024


class ClusterApiError(Exception):
    """A call failed: refused (`status`, the API's message) or not answered (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _group_path(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class ClusterApi:
    def __init__(self, kubeconfig: str, *, timeout: float = 10.0) -> None:
        self._http: ClusterHttp = connect(
            kubeconfig,
            headers={"Accept": "application/json", "Accept-Encoding": "identity"},
            timeout=timeout,
        )
        # apiVersion -> its resources, as served now (discovery is read once per preparation:
        # a kind a CRD adds shows at the next one).
        self._resources: dict[str, list[dict[str, Any]]] = {}

    @property
    def default_namespace(self) -> str:
        return self._http.namespace or "default"

    async def close(self) -> None:
        await self._http.client.aclose()

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at `path`, None if there is none."""
        try:
            return await self._call("GET", path)
        except ClusterApiError as error:
            if error.status == httpx.codes.NOT_FOUND:
                return None
            raise

    async def apply(self, manifest: Manifest, namespace: str | None = None) -> None:
        """Server-side apply of one object, lessor's field manager forcing its fields: the
        cluster is new, and what lessor applied is lessor's. A namespaced object that names no
        namespace goes to `namespace` (a chart's release namespace), else the default one."""
        resource = await self._resource(manifest["apiVersion"], manifest["kind"])
        name = manifest["metadata"]["name"]
        path = _group_path(manifest["apiVersion"])
        if resource.get("namespaced"):
            where = manifest["metadata"].get("namespace") or namespace or self.default_namespace
            path += f"/namespaces/{where}"
        await self._call(
            "PATCH",
            f"{path}/{resource['name']}/{name}",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            content=json.dumps(manifest).encode(),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )

    async def _resource(self, api_version: str, kind: str) -> dict[str, Any]:
        if api_version not in self._resources:
            served = await self.get(_group_path(api_version))
            self._resources[api_version] = list((served or {}).get("resources", []))
        for resource in self._resources[api_version]:
            if resource.get("kind") == kind and "/" not in str(resource.get("name", "/")):
                return resource
        raise ClusterApiError(f"{api_version} {kind} is not served (yet)", httpx.codes.NOT_FOUND)

    async def _call(self, method: str, path: str, **arguments: Any) -> dict[str, Any]:
        client, extensions = self._http.client, self._http.extensions
        try:
            request = client.build_request(method, path, extensions=extensions, **arguments)
            response = await client.send(request, stream=True)
            try:
                body = await _bounded(response)
            finally:
                await response.aclose()
        except httpx.HTTPError as error:
            raise ClusterApiError(f"{method} {path}: {type(error).__name__} {error}") from None
        if response.status_code >= httpx.codes.BAD_REQUEST:
            raise ClusterApiError(_message(body, response.status_code), response.status_code)
        try:
            answer = json.loads(body)
        except ValueError:
            raise ClusterApiError(f"{method} {path}: the answer is not JSON") from None
        return answer if isinstance(answer, dict) else {}


async def _bounded(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > ANSWER_LIMIT:
            raise httpx.DecodingError(f"an answer of more than {ANSWER_LIMIT} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _message(body: bytes, status: int) -> str:
    """The API's own message (a Status), cut short."""
    try:
        message = str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        message = body.decode(errors="replace")
    return (message or f"HTTP {status}")[:MESSAGE_LIMIT]
