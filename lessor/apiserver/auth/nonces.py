"""SSH nonces remembered by the whole service, not one worker: a replay sent to another worker
or another replica is refused as surely as one sent to the same process.

A nonce is taken by creating a ConfigMap named after it, an atomic create that only one request
can win. Records older than twice the clock-skew window can no longer matter (their timestamps
are refused anyway), and are swept by their expiry bucket (lessor.apiserver.state.expiring_records).

Since every signed request leaves one object for ten minutes, a key's signed requests pass a
token bucket per key and replica (`apiserver.sshSignedRate`, `sshSignedBurst`) before their
nonce is recorded: a key's holder cannot fill etcd, only be told 429 with Retry-After. Clients
that send many requests log in once and use the session instead.
"""

from __future__ import annotations

import hashlib
import time

from kubernetes.client.exceptions import ApiException

from lessor.apiserver.auth.ssh import MAX_SKEW_SECONDS, NonceCache
from lessor.apiserver.http.errors import TooManyRequestsError
from lessor.apiserver.state.admission_limit import AdmissionLimiter
from lessor.apiserver.state.expiring_records import ExpiringRecords
from lessor.apiserver.state.kube import Kube

LABEL = "lessor.dev/ssh-nonce"
SWEPT_BUCKETS = 144  # a day: older buckets were swept by someone long ago


class ClusterNonces(NonceCache):
    def __init__(self, kube: Kube, limiter: AdmissionLimiter | None = None) -> None:
        super().__init__()
        self.kube = kube
        self.limiter = limiter
        self.records = ExpiringRecords(kube, LABEL, SWEPT_BUCKETS)

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
        body = {"metadata": {"name": name, "labels": self.records.labels(expires)}}
        try:
            self.kube.request(
                "POST", f"/api/v1/namespaces/{self.kube.namespace}/configmaps", body=body
            )
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        self.records.sweep_now_and_then()
        return True
