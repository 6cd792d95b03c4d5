"""A small JSON client over kr8s's raw API call, with Kubernetes errors as exceptions.

kr8s gives us authentication from kubeconfigs and in-cluster service accounts, and an HTTP
session; the reflector, the leader elector and the reconcilers need raw paths, preconditions and
streaming, so they go through this thin layer rather than kr8s's object model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import kr8s.asyncio

from lessor.protocol.json_object import Json

REQUEST_TIMEOUT = 30.0


class ApiError(Exception):
    """A Kubernetes API error response."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ConflictError(ApiError):
    """409: a lost optimistic-concurrency race or an existing name; the caller requeues."""


class NotFoundError(ApiError):
    """404: the object (or its namespace) does not exist."""


class GoneError(ApiError):
    """410: the resourceVersion is too old to watch from; the reflector relists."""


_ERRORS: dict[int, type[ApiError]] = {404: NotFoundError, 409: ConflictError, 410: GoneError}


def error_from(status: int, body: str) -> ApiError:
    try:
        document = json.loads(body)
        reason, message = str(document.get("reason", "")), str(document.get("message", body))
    except ValueError:
        reason, message = "", body[:500]
    return _ERRORS.get(status, ApiError)(status, reason, message)


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        parts = ["/apis", self.group, self.version] if self.group else ["/api", self.version]
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


class KubeClient:
    def __init__(self, api: kr8s.asyncio.Api) -> None:
        self.api = api

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> KubeClient:
        """From a kubeconfig path, else in-cluster service account or the default kubeconfig."""
        api = (
            await kr8s.asyncio.api(kubeconfig=kubeconfig)
            if kubeconfig
            else await kr8s.asyncio.api()
        )
        return cls(api)

    def endpoint(self) -> tuple[str, bytes | None]:
        """The API server's URL and the PEM of the CA that verifies it (None: the system's trust
        store), so that another process can later ask whether this server still answers."""
        auth = self.api.auth
        ca_file = auth.server_ca_file
        ca = Path(ca_file).read_bytes() if ca_file else None
        return str(auth.server), ca

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | list[Json] | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        # kr8s joins base, version and url with "/"; an absolute path goes in as base + last part.
        base, _, last = path.rpartition("/")
        extra: dict[str, Any] = {"timeout": REQUEST_TIMEOUT}
        if body is not None:
            extra["content"] = json.dumps(body)
            extra["headers"] = {"Content-Type": content_type}
        try:
            async with self.api.call_api(
                method,
                base=base,
                version="",
                url=last,
                params=params,
                raise_for_status=False,
                **extra,
            ) as response:
                if response.is_error:
                    raise error_from(response.status_code, response.text)
                document: Json = response.json() if response.content else {}
                return document
        except httpx.TransportError as error:
            raise ApiError(0, "TransportError", str(error)) from error

    async def get(self, path: str) -> Json:
        return await self.request("GET", path)

    async def create(self, path: str, body: Json) -> Json:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: Json) -> Json:
        """PUT: carries metadata.resourceVersion, so a concurrent change makes it a 409."""
        return await self.request("PUT", path, body=body)

    async def merge_patch(self, path: str, patch: Json) -> Json:
        return await self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )

    async def json_patch(self, path: str, operations: list[Json]) -> Json:
        """RFC 6902 patch; a leading `test` operation on /metadata/resourceVersion or uid makes it
        conditional, which is how writes are fenced without sending the whole object."""
        return await self.request(
            "PATCH",
            path,
            body=operations,
            content_type="application/json-patch+json",
        )

    async def delete(self, path: str, preconditions: Json | None = None) -> Json:
        body: Json = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request("DELETE", path, body=body)

    async def stream_lines(
        self, path: str, params: dict[str, str], read_timeout: float
    ) -> AsyncIterator[bytes]:
        """Lines of a streaming response (a watch); a silence of `read_timeout` seconds raises
        httpx.ReadTimeout, which is how a half-open connection is noticed."""
        base, _, last = path.rpartition("/")
        timeout = httpx.Timeout(REQUEST_TIMEOUT, read=read_timeout)
        async with self.api.call_api(
            "GET",
            base=base,
            version="",
            url=last,
            params=params,
            stream=True,
            raise_for_status=False,
            timeout=timeout,
        ) as response:
            if response.is_error:
                await response.aread()
                raise error_from(response.status_code, response.text)
            async for line in response.aiter_lines():
                if line:
                    yield line.encode()
