"""Requests to a leased cluster's own API, with its admin kubeconfig: what issuing a lease's
credential takes there (a ClusterRoleBinding, a CertificateSigningRequest and its approval).

The cluster is its tenant's, who is administrator inside it: its answers are read bounded in size
and time, and their text is cut short before it reaches an error message. TLS is verified with
the kubeconfig's CA and, where it names one, its `tls-server-name` (the name the cluster's
certificate was issued for, when the server is a node's address). The admin's key is written to
a file only for the moment `ssl` needs one to load it, readable by the operator alone.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from lessor.operator.backends.base import BackendError
from lessor.operator.backends.published_kubeconfig import Kubeconfig, cluster_entry, user_entry
from lessor.protocol.json_object import Json

LIMIT = 256 * 1024
TIMEOUT = 10.0
_REASON = 200


def _tls(cluster: dict[str, Any], user: dict[str, Any]) -> ssl.SSLContext:
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if not cert or not key:
        raise BackendError("the cluster's admin kubeconfig holds no client certificate")
    try:
        ca = base64.b64decode(cluster.get("certificate-authority-data", "")).decode()
        context = ssl.create_default_context(cadata=ca or None)
        with tempfile.TemporaryDirectory(prefix="lessor-issue-") as scratch:
            path = Path(scratch) / "client.pem"
            path.touch(mode=0o600)
            path.write_bytes(base64.b64decode(cert) + b"\n" + base64.b64decode(key))
            context.load_cert_chain(str(path))
    except (ssl.SSLError, ValueError) as error:
        raise BackendError(f"the cluster's admin kubeconfig has unusable TLS: {error}") from None
    return context


class TenantApi:
    """JSON requests to one cluster, as its administrator; use as `async with`."""

    def __init__(self, admin: Kubeconfig) -> None:
        """`admin`: the cluster's admin kubeconfig, parsed."""
        cluster = cluster_entry(admin)
        if not cluster.get("server"):
            raise BackendError("the cluster's admin kubeconfig names no server")
        server_name = cluster.get("tls-server-name")
        self._extensions = {"sni_hostname": server_name} if server_name else {}
        self._client = httpx.AsyncClient(
            base_url=str(cluster["server"]),
            verify=_tls(cluster, user_entry(admin)),
            headers={"Accept": "application/json", "Accept-Encoding": "identity"},
            timeout=TIMEOUT,
            follow_redirects=False,
        )

    async def __aenter__(self) -> TenantApi:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._client.aclose()

    async def create(self, path: str, body: Json) -> Json | None:
        """The object created; None when one of its name exists already (a 409)."""
        status, answer = await self._request("POST", path, body)
        if status == httpx.codes.CONFLICT:
            return None
        return self._checked("POST", path, status, answer)

    async def get(self, path: str) -> Json:
        status, answer = await self._request("GET", path)
        return self._checked("GET", path, status, answer)

    async def replace(self, path: str, body: Json) -> Json:
        status, answer = await self._request("PUT", path, body)
        return self._checked("PUT", path, status, answer)

    async def _request(self, method: str, path: str, body: Json | None = None) -> tuple[int, bytes]:
        try:
            async with self._client.stream(
                method, path, json=body, extensions=self._extensions
            ) as response:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if size > LIMIT:
                        raise BackendError(f"{method} {path}: an answer over {LIMIT} bytes")
                    chunks.append(chunk)
                return response.status_code, b"".join(chunks)
        except httpx.HTTPError as error:
            raise BackendError(f"{method} {path}: {type(error).__name__} {error}") from None

    @staticmethod
    def _checked(method: str, path: str, status: int, answer: bytes) -> Json:
        if not httpx.codes.is_success(status):
            reason = answer[:_REASON].decode(errors="replace")
            raise BackendError(f"{method} {path}: {status} {reason}")
        try:
            document = json.loads(answer)
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise BackendError(f"{method} {path}: the answer is not a JSON object")
        return document
