"""The Kubernetes API as the API server uses it: the official client, one per worker process.

Clients hold sockets and a thread pool, which must not cross a fork: gunicorn forks its workers
after loading the app, so the client is made lazily in the process that uses it, and remade if
the process id changed. Every call has a timeout, so a slow API server makes one request fail,
not a worker hang.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from typing import Any, TypeVar, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lessor.protocol.json_object import Json
from lessor.resources.base import GROUP, VERSION, Resource

TIMEOUT = 10
R = TypeVar("R", bound=Resource[Any, Any])


class Kube:
    def __init__(self, kubeconfig: str | None, namespace: str) -> None:
        self.namespace = namespace
        configuration = client.Configuration()
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        self.api_client = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.extensions = client.ApiextensionsV1Api(self.api_client)

    def crd(self, name: str) -> Json | None:
        """A CustomResourceDefinition as plain JSON, or None when it does not exist."""
        try:
            found = self.extensions.read_custom_resource_definition(name, _request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(Json, self.api_client.sanitize_for_serialization(found))  # type: ignore[no-untyped-call]

    # -- raw JSON ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | list[Json] | None = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float = TIMEOUT,
    ) -> Json:
        """One call on kube-apiserver, JSON in and out, through the client's connection pool
        and credentials. The typed methods validate every argument with pydantic and build
        model classes from the answer: on the paths a waiting client measures, that cost more
        CPU than the round trip (bench/results/profile-2026-11-25.md). Errors are the typed
        methods' ApiException, so callers read `error.status` either way."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*serialized, _request_timeout=timeout)
        raw = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return cast(Json, json.loads(raw)) if raw else {}

    def _path(self, plural: str, name: str = "") -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{plural}"
        return f"{path}/{name}" if name else path

    def names(self, path: str, label_selector: str) -> list[str]:
        """The names of the objects at `path` that match, from kube-apiserver's watch cache
        (resourceVersion 0: may lag a moment), as a server-side table of names only: a list of
        whole objects (their managedFields and all) cost most of a create's CPU to decode once
        a caller held a few hundred (bench/results/profile-2026-11-25.md)."""
        table = self.request(
            "GET",
            path,
            query={
                "labelSelector": label_selector,
                "resourceVersion": "0",
                "includeObject": "None",
            },
            accept="application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        return [str(row["cells"][0]) for row in table.get("rows") or []]

    def configmap_path(self, name: str = "") -> str:
        """The service namespace's ConfigMaps (reservations, nonces), or one of them."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        return f"{path}/{name}" if name else path

    # -- lessor resources in the service namespace ---------------------------------------

    def get(self, plural: str, name: str) -> Json:
        return self.request("GET", self._path(plural, name))

    def find(self, plural: str, name: str) -> Json | None:
        """The object, or None when it does not exist."""
        try:
            return self.get(plural, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def find_model(self, kind: type[R], name: str) -> R | None:
        """The object of a lessor kind, validated into its model, or None when it does not
        exist: what a service reads of lessor's own kinds, by attribute, not by camelCase key."""
        found = self.find(kind.crd.plural, name)
        return None if found is None else kind.model_validate(found)

    def list_models(
        self, kind: type[R], label_selector: str = "", *, cached: bool = False
    ) -> list[R]:
        """`list_objects` of a lessor kind, each object validated into its model."""
        listed = self.list_objects(kind.crd.plural, label_selector, cached=cached)
        return [kind.model_validate(obj) for obj in listed]

    def list_objects(
        self, plural: str, label_selector: str = "", *, cached: bool = False
    ) -> list[Json]:
        """`cached`: from the API server's watch cache as it is (resourceVersion "0"). A
        consistent list made right after a write waits for that cache to catch up with etcd,
        about 100 ms on kube-apiserver 1.35, which reads that may lag a moment do not need."""
        query = {"labelSelector": label_selector} if label_selector else {}
        if cached:
            query["resourceVersion"] = "0"
        return cast(
            list[Json], self.request("GET", self._path(plural), query=query).get("items", [])
        )

    def create(self, plural: str, body: Json, timeout: float = TIMEOUT) -> Json:
        return self.request("POST", self._path(plural), body=body, timeout=timeout)

    def json_patch(self, plural: str, name: str, operations: list[Json]) -> Json:
        """A JSON patch; lead with `test` operations on uid and resourceVersion to fence it."""
        return self.request(
            "PATCH",
            self._path(plural, name),
            body=operations,
            content_type="application/json-patch+json",
        )

    # -- core objects --------------------------------------------------------------------

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's `data` (base64 values), None when there is no such Secret."""
        try:
            secret = self.request("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {key: str(value) for key, value in (secret.get("data") or {}).items()}

    def secret_value_bytes(self, namespace: str, name: str, key: str) -> bytes | None:
        encoded = (self.secret_data(namespace, name) or {}).get(key)
        return base64.b64decode(encoded) if encoded else None

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        value = self.secret_value_bytes(namespace, name, key)
        return value.decode() if value is not None else None


_lock = threading.Lock()
_instance: tuple[int, Kube] | None = None


def kube(kubeconfig: str | None, namespace: str) -> Kube:
    """This process's client, created on first use after the fork."""
    global _instance  # noqa: PLW0603 - one client per process, by design
    with _lock:
        if _instance is None or _instance[0] != os.getpid():
            _instance = (os.getpid(), Kube(kubeconfig, namespace))
        return _instance[1]
