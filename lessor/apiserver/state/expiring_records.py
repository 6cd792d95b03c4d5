"""ConfigMaps that are records with an expiry (SSH nonces, sessions), swept by expiry bucket.

Each record carries its expiry as a ten-minute bucket label, so that one delete-collection call
by label removes every expired bucket of the sweep window; each process sweeps at most once a
minute. (Listing the records and deleting expired ones one by one inside a request, as a first
version of the nonces did, put hundreds of calls on unlucky requests under load.)
"""

from __future__ import annotations

import threading
import time

from lessor.apiserver.state.kube import TIMEOUT, Kube

BUCKET = "lessor.dev/expiry-bucket"
BUCKET_SECONDS = 600
SWEEP_EVERY_SECONDS = 60.0


class ExpiringRecords:
    """The records labelled `label=true`; `window_buckets` is how far back a sweep looks (older
    buckets were swept by some replica long ago)."""

    def __init__(self, kube: Kube, label: str, window_buckets: int) -> None:
        self.kube = kube
        self.label = label
        self.window_buckets = window_buckets
        self._next_sweep = 0.0
        self._lock = threading.Lock()

    def labels(self, expires: int) -> dict[str, str]:
        """The labels of a record expiring at `expires` (Unix seconds): swept once it is past."""
        return {self.label: "true", BUCKET: str(expires // BUCKET_SECONDS + 1)}

    def sweep_now_and_then(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next_sweep:
                return
            self._next_sweep = now + SWEEP_EVERY_SECONDS
        self.sweep()

    def sweep(self) -> None:
        """Delete every record whose bucket (the ten minutes its expiry falls before) is past."""
        current = int(time.time()) // BUCKET_SECONDS
        past = ",".join(str(b) for b in range(current - self.window_buckets, current + 1))
        self.kube.core.delete_collection_namespaced_config_map(
            self.kube.namespace,
            label_selector=f"{self.label}=true,{BUCKET} in ({past})",
            _request_timeout=TIMEOUT,
        )
