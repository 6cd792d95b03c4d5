"""SSH nonces remembered by the whole service, not one worker: a replay sent to another worker
or another replica is refused as surely as one sent to the same process.

A nonce is taken by creating a ConfigMap named after it, an atomic create that only one request
can win. Records older than twice the clock-skew window can no longer matter (their timestamps
are refused anyway) and are swept from time to time by whichever request happens to do it.
"""

from __future__ import annotations

import hashlib
import random
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.ssh import MAX_SKEW_SECONDS, NonceCache
from lessor.apiserver.kube import TIMEOUT, Kube

LABEL = "lessor.dev/ssh-nonce"
EXPIRES = "lessor.dev/expires"
SWEEP_PROBABILITY = 0.01


class ClusterNonces(NonceCache):
    def __init__(self, kube: Kube) -> None:
        super().__init__()
        self.kube = kube

    def first_use(self, key_blob: bytes, nonce: str) -> bool:
        if not super().first_use(key_blob, nonce):
            return False  # seen by this process: no need to ask the cluster
        name = "lessor-nonce-" + hashlib.sha256(key_blob + b"\0" + nonce.encode()).hexdigest()[:40]
        expires = int(time.time()) + 2 * MAX_SKEW_SECONDS
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name, labels={LABEL: "true"}, annotations={EXPIRES: str(expires)}
            )
        )
        try:
            self.kube.core.create_namespaced_config_map(
                self.kube.namespace, body, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        if random.random() < SWEEP_PROBABILITY:  # noqa: S311 - load spreading, not security
            self.sweep()
        return True

    def sweep(self) -> None:
        now = time.time()
        found = self.kube.core.list_namespaced_config_map(
            self.kube.namespace, label_selector=f"{LABEL}=true", _request_timeout=TIMEOUT
        )
        for item in found.items:
            annotations = (item.metadata.annotations if item.metadata else None) or {}
            if float(annotations.get(EXPIRES, "0")) < now and item.metadata and item.metadata.name:
                try:
                    self.kube.core.delete_namespaced_config_map(
                        item.metadata.name, self.kube.namespace, _request_timeout=TIMEOUT
                    )
                except ApiException as error:
                    if error.status != 404:
                        raise
