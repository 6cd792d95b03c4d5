"""GET /v1/leases/:id/diagnostics (spec 4.2.6): a pre-signed URL of the lease's bundle.

Only the lease's owner gets one (anyone else: 404, as for every lease route), and only while
the bundle is kept: the record is the lease's `status.diagnostics` while the lease exists, and
its DiagnosticsBundle (written by the operator with the capture) once the lease is deleted, until
the pool's `diagnostics.retention` has passed since the capture; the bundle is the object (kept
by the bucket's lifecycle rule), and a HEAD of the object tells a bundle the bucket has expired
from one that is there. The URL is signed here with the credentials the pool named when the
bundle was captured, valid for that pool's `urlTtl`; signing needs no request to the store, the
HEAD does, and a store that does not answer is a 503 (retry), never a 404 that would say the
bundle is gone.
"""

from __future__ import annotations

import datetime

from pydantic import ValidationError

from lessor.apiserver.auth.authenticator import Principal
from lessor.apiserver.http.errors import HttpNotFoundError, UnavailableError
from lessor.apiserver.leases.cluster_leases import OBJECT_NAME, LeaseService
from lessor.apiserver.state.kube import Kube
from lessor.bucket import MAX_URL_TTL, Bucket, BucketError, Credentials, Location
from lessor.protocol.durations import parse_duration
from lessor.protocol.responses import DiagnosticsBundle as BundleAnswer
from lessor.protocol.timestamps import timestamp, utcnow
from lessor.resources.cluster import DiagnosticsRecord
from lessor.resources.diagnostics_bundle import DiagnosticsBundle

STORE_TIMEOUT = 5.0


class DiagnosticsService:
    def __init__(self, kube: Kube, leases: LeaseService) -> None:
        self.kube = kube
        self.leases = leases

    def bundle(self, principal: Principal, lease_id: str) -> BundleAnswer:
        namespace, record = self._record(principal, lease_id)
        if record.retained_until() <= utcnow():
            raise HttpNotFoundError(
                f"the diagnostics bundle of lease {lease_id} is no longer served: its retention"
                f" ({record.store.retention}) ended at {timestamp(record.retained_until())}"
            )
        store = record.store
        try:
            bucket = Bucket(
                Location(store.bucket, store.region, store.endpoint),
                self._credentials(namespace, record),
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
        return BundleAnswer(
            url=bucket.presigned_get(record.key, ttl),
            expires_at=timestamp(utcnow() + ttl - datetime.timedelta(seconds=1)),
            captured_at=timestamp(record.finished_at or record.started_at),
            size_bytes=record.size_bytes or 0,
            truncated=record.truncated,
        )

    def _record(self, principal: Principal, lease_id: str) -> tuple[str, DiagnosticsRecord]:
        """The namespace and record of the caller's bundle: the lease's own while the lease
        exists, its DiagnosticsBundle once it is gone (held to the same owner and grant)."""
        try:
            lease = self.leases.usable(principal, lease_id)
        except HttpNotFoundError:
            kept = self._kept(principal, lease_id)
            if kept is None:
                raise HttpNotFoundError(
                    f"no lease {lease_id[:80]}, and no diagnostics bundle kept for it (none was"
                    " captured, or its retention ended)"
                ) from None
            return kept
        record = lease.status.diagnostics if lease.status is not None else None
        if record is None or record.state != "Captured":
            raise HttpNotFoundError("no diagnostics bundle was captured for this lease")
        return lease.metadata.namespace or self.kube.namespace, record

    def _kept(self, principal: Principal, lease_id: str) -> tuple[str, DiagnosticsRecord] | None:
        if not OBJECT_NAME.match(lease_id):
            return None
        obj = self.kube.find(DiagnosticsBundle.crd.plural, lease_id)
        if obj is None:
            return None
        try:
            kept = DiagnosticsBundle.model_validate(obj)
        except ValidationError:  # not the operator's writing: served to nobody
            return None
        # Its spec names the pool as a lease's does: the same grant applies.
        if kept.spec.requester != principal.owner or not self.leases.granted(
            principal, kept.spec.pool
        ):
            return None
        return kept.metadata.namespace or "", kept.spec.record

    def _credentials(self, namespace: str, record: DiagnosticsRecord) -> Credentials | None:
        reference = record.store.credentials_secret_ref
        if reference is None:
            return None
        data = self.kube.secret_data(namespace, reference.name)
        if data is None:
            raise BucketError("CredentialsInvalid", "the credentials Secret is gone")
        return Credentials.from_secret_data(data)
