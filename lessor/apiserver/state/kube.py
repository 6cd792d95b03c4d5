"""The Kubernetes API as the API server uses it: the official client, one per worker process.

Clients hold sockets and a thread pool, which must not cross a fork: gunicorn forks its workers
after loading the app, so the client is made lazily in the process that uses it, and remade if
the process id changed. Every call has a timeout, so a slow API server makes one request fail,
not a worker hang.
"""

from __future__ import annotations

import base64
import os
import threading
from typing import cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from lessor.protocol.json_object import Json
from lessor.resources.base import GROUP, VERSION

TIMEOUT = 10


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

    # -- lessor resources in the service namespace ---------------------------------------

    def get(self, plural: str, name: str) -> Json:
        result = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, name, _request_timeout=TIMEOUT
        )
        return cast(Json, result)

    def find(self, plural: str, name: str) -> Json | None:
        """The object, or None when it does not exist."""
        try:
            return self.get(plural, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list_objects(
        self, plural: str, label_selector: str = "", *, cached: bool = False
    ) -> list[Json]:
        """`cached`: from the API server's watch cache as it is (resourceVersion "0"). A
        consistent list made right after a write waits for that cache to catch up with etcd,
        about 100 ms on kube-apiserver 1.35, which reads that may lag a moment do not need."""
        result = self.custom.list_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            plural,
            label_selector=label_selector,
            resource_version="0" if cached else None,
            _request_timeout=TIMEOUT,
        )
        return cast(list[Json], cast(Json, result).get("items", []))

    def create(self, plural: str, body: Json, timeout: float = TIMEOUT) -> Json:
        result = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, plural, body, _request_timeout=timeout
        )
        return cast(Json, result)

    def json_patch(self, plural: str, name: str, operations: list[Json]) -> Json:
        """A JSON patch; lead with `test` operations on uid and resourceVersion to fence it."""
        result = self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            plural,
            name,
            operations,
            _content_type="application/json-patch+json",
            _request_timeout=TIMEOUT,
        )
        return cast(Json, result)

    # -- core objects --------------------------------------------------------------------

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Secret's `data` (base64 values), None when there is no such Secret."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return {key: str(value) for key, value in (secret.data or {}).items()}

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
