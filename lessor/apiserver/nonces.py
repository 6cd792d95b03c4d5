"""SSH nonces remembered by the whole service, not one worker: a replay sent to another worker
or another replica is refused as surely as one sent to the same process.

A nonce is taken by creating a ConfigMap named after it, an atomic create that only one request
can win. Records older than twice the clock-skew window can no longer matter (their timestamps
are refused anyway). Each carries its expiry as a ten-minute bucket label, so that one
delete-collection call by label removes every expired bucket of the last day; each process
sweeps at most once a minute. (Listing the nonces and deleting expired ones one by one inside
a request, as a first version did, put hundreds of calls on unlucky requests under load.)

Since every signed request leaves one object for ten minutes, a key's signed requests pass a
token bucket per key and replica (`apiserver.sshSignedRate`, `sshSignedBurst`) before their
nonce is recorded: a key's holder cannot fill etcd, only be told 429 with Retry-After. Clients
that send many requests log in once and use the session instead.
"""

from __future__ import annotations

import hashlib
import threading
import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from lessor.apiserver.admission_limit import AdmissionLimiter
from lessor.apiserver.auth.ssh import MAX_SKEW_SECONDS, NonceCache
from lessor.apiserver.errors import TooManyRequestsError
from lessor.apiserver.kube import TIMEOUT, Kube

LABEL = "lessor.dev/ssh-nonce"
BUCKET = "lessor.dev/expiry-bucket"
BUCKET_SECONDS = 600
SWEPT_BUCKETS = 144  # a day: older buckets were swept by someone long ago
SWEEP_EVERY_SECONDS = 60.0


class ClusterNonces(NonceCache):
    def __init__(self, kube: Kube, limiter: AdmissionLimiter | None = None) -> None:
        super().__init__()
        self.kube = kube
        self.limiter = limiter
        self._next_sweep = 0.0
        self._sweep_lock = threading.Lock()

    def first_use(self, key_blob: bytes, nonce: str) -> bool:
        if not super().first_use(key_blob, nonce):
            return False  # seen by this process: no need to ask the cluster
        if self.limiter is not None:
            decision = self.limiter.take("ssh-key:" + hashlib.sha256(key_blob).hexdigest())
            if not decision.allowed:
                raise TooManyRequestsError(
                    f"too many SSH-signed requests from this key; retry in"
                    f" {decision.retry_after}s, or `lessor login` once and use the session",
                    headers={"Retry-After": str(decision.retry_after)},
                )
        name = "lessor-nonce-" + hashlib.sha256(key_blob + b"\0" + nonce.encode()).hexdigest()[:40]
        expires = int(time.time()) + 2 * MAX_SKEW_SECONDS
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(
                name=name, labels={LABEL: "true", BUCKET: str(expires // BUCKET_SECONDS + 1)}
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
        self._maybe_sweep()
        return True

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        with self._sweep_lock:
            if now < self._next_sweep:
                return
            self._next_sweep = now + SWEEP_EVERY_SECONDS
        self.sweep()

    def sweep(self) -> None:
        """Delete every nonce whose bucket (the ten minutes its expiry falls before) is past."""
        current = int(time.time()) // BUCKET_SECONDS
        past = ",".join(str(b) for b in range(current - SWEPT_BUCKETS, current + 1))
        self.kube.core.delete_collection_namespaced_config_map(
            self.kube.namespace,
            label_selector=f"{LABEL}=true,{BUCKET} in ({past})",
            _request_timeout=TIMEOUT,
        )
