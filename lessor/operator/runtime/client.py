"""A small JSON client for kube-apiserver, with Kubernetes errors as exceptions.

kr8s gives us authentication from kubeconfigs and in-cluster service accounts (server, CA, client
certificate, token, exec plugins, re-authentication); the reflector, the leader elector and the
reconcilers need raw paths, preconditions and streaming, so they go through this thin layer rather
than kr8s's object model. The requests themselves go over aiohttp, not kr8s's httpx session: a
lease's life is about fifty operator requests, and httpx with its anyio layers spent 0.74 ms of
CPU on a GET alone and 1.14 ms with ten in flight against 0.20 and 0.12 ms for aiohttp (issue 19,
bench/results/profile-2026-11-25.md: the client was 55% of the operator's CPU). aiohttp is
declared in setup.cfg's `server` extra with the floor the probes need; the kubernetes client
(37 here) requires it too, so it costs the image nothing.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
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
    """One aiohttp session (keep-alive connections) with kr8s's credentials; a 401 makes kr8s
    authenticate again (a rotated service-account token, an expired exec credential) and the
    request is sent once more."""

    def __init__(self, api: kr8s.asyncio.Api) -> None:
        self.api = api
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> KubeClient:
        """From a kubeconfig path, else in-cluster service account or the default kubeconfig."""
        api = (
            await kr8s.asyncio.api(kubeconfig=kubeconfig)
            if kubeconfig
            else await kr8s.asyncio.api()
        )
        return cls(api)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def endpoint(self) -> tuple[str, bytes | None]:
        """The API server's URL and the PEM of the CA that verifies it (None: the system's trust
        store), so that another process can later ask whether this server still answers."""
        auth = self.api.auth
        ca_file = auth.server_ca_file
        ca = Path(ca_file).read_bytes() if ca_file else None
        return str(auth.server), ca

    async def _open(self, renew: bool = False) -> aiohttp.ClientSession:
        if renew:
            await self.api.auth.reauthenticate()
            await self.close()
        if self._session is None:
            auth = self.api.auth
            tls: ssl.SSLContext | bool = await auth.ssl_context()  # type: ignore[no-untyped-call]
            if self._session is None:  # not opened by another request during that await
                headers = {"User-Agent": "lessor-operator"}
                if auth.token:
                    headers["Authorization"] = f"Bearer {auth.token}"
                connector = aiohttp.TCPConnector(ssl=tls, limit=0)
                self._session = aiohttp.ClientSession(headers=headers, connector=connector)
        return self._session

    def _options(self, path: str, params: dict[str, str] | None) -> dict[str, Any]:
        auth = self.api.auth
        options: dict[str, Any] = {"url": str(auth.server).rstrip("/") + path}
        if params:
            options["params"] = params
        if auth.proxy:
            options["proxy"] = auth.proxy
        if auth.tls_server_name:
            options["server_hostname"] = auth.tls_server_name
        return options

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | list[Json] | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        accept: str | None = None,
    ) -> Json:
        """`accept`: another representation than the object's (a server-side Table)."""
        options = self._options(path, params)
        headers = {"Accept": accept} if accept else {}
        if body is not None:
            options["data"] = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if headers:
            options["headers"] = headers
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        try:
            session = await self._open()
            for attempt in (1, 2):
                async with session.request(method, timeout=timeout, **options) as response:
                    content = await response.read()
                    if response.status == 401 and attempt == 1:
                        session = await self._open(renew=True)
                        continue
                    if response.status >= 400:
                        raise error_from(response.status, content.decode(errors="replace"))
                    document: Json = json.loads(content) if content else {}
                    return document
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ApiError(0, "TransportError", str(error) or type(error).__name__) from error
        raise AssertionError("unreachable: the second attempt returns or raises")

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
        """Lines of a streaming response (a watch). A silence of `read_timeout` seconds, how a
        half-open connection is noticed, ends it as an ApiError of status 0, like any other
        transport failure."""
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=REQUEST_TIMEOUT, sock_read=read_timeout
        )
        try:
            session = await self._open()
            async with session.get(timeout=timeout, **self._options(path, params)) as response:
                if response.status >= 400:
                    content = await response.read()
                    if response.status == 401:
                        await self._open(renew=True)
                    raise error_from(response.status, content.decode(errors="replace"))
                pending = b""
                async for chunk in response.content.iter_any():
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        if line:
                            yield line
                if pending:
                    yield pending
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ApiError(0, "TransportError", str(error) or type(error).__name__) from error
