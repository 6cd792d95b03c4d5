"""GET /v1/leases/:id/diagnostics (spec 4.2.6): a pre-signed URL of the lease's bundle.

Only the lease's owner gets one (anyone else: 404, as for every lease route), and only while
the bundle exists: the record is the lease's `status.diagnostics` (kept with the ended lease for
the operator's retention), the bundle is the object (kept by the bucket's lifecycle rule), and a
HEAD of the object tells a bundle the bucket has expired from one that is there. The URL is
signed here with the credentials the pool named when the bundle was captured, valid for that
pool's `urlTtl`; signing needs no request to the store, the HEAD does, and a store that does not
answer is a 503 (retry), never a 404 that would say the bundle is gone.
"""

from __future__ import annotations

import datetime

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http.errors import HttpNotFoundError, UnavailableError
from lessor.apiserver.leases.cluster_leases import LeaseService
from lessor.apiserver.state.kube import Kube
from lessor.bucket import MAX_URL_TTL, Bucket, BucketError, Credentials, Location
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import timestamp, utcnow
from lessor.resources.cluster import DiagnosticsRecord

STORE_TIMEOUT = 5.0


class DiagnosticsService:
    def __init__(self, kube: Kube, leases: LeaseService) -> None:
        self.kube = kube
        self.leases = leases

    def bundle(self, principal: Principal, lease_id: str) -> Json:
        lease = self.leases.usable(principal, lease_id)
        found = lease.get("status", {}).get("diagnostics")
        if not found or found.get("state") != "Captured":
            raise HttpNotFoundError("no diagnostics bundle was captured for this lease")
        record = DiagnosticsRecord.model_validate(found)
        store = record.store
        try:
            bucket = Bucket(
                Location(store.bucket, store.region, store.endpoint),
                self._credentials(lease["metadata"]["namespace"], record),
                timeout=STORE_TIMEOUT,
            )
            if not bucket.exists(record.key):
                raise HttpNotFoundError(
                    "the diagnostics bundle of this lease is gone (the bucket no longer has it)"
                )
        except BucketError as error:
            raise UnavailableError(
                f"the diagnostics store cannot be used now ({error.reason}); try again later"
            ) from None
        ttl = min(parse_duration(store.url_ttl), MAX_URL_TTL)
        return {
            "url": bucket.presigned_get(record.key, ttl),
            "expires_at": timestamp(utcnow() + ttl - datetime.timedelta(seconds=1)),
            "captured_at": timestamp(record.finished_at or record.started_at),
            "size_bytes": record.size_bytes or 0,
            "truncated": record.truncated,
        }

    def _credentials(self, namespace: str, record: DiagnosticsRecord) -> Credentials | None:
        reference = record.store.credentials_secret_ref
        if reference is None:
            return None
        data = self.kube.secret_data(namespace, reference.name)
        if data is None:
            raise BucketError("CredentialsInvalid", "the credentials Secret is gone")
        return Credentials.from_secret_data(data)
