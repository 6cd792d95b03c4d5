"""The DiagnosticsBundle records: written when a capture is stored, deleted when the pool's
`diagnostics.retention` has passed (lessor.resources.diagnostics_bundle says why they exist).

The record is made from the lease's `status.diagnostics` once that says Captured, with the
capture's final figures: by the pass of the lease's teardown that finds it Captured, and again
before the lease object is deleted (by retention or by hand), which also gives one to a lease
captured by an operator that wrote none. Each is a read first, and a create only when the record
is missing: a pass replayed after a kill -9 finds the record it made and writes nothing, so a
crash at that write cannot recur at the next pass (unlike a create-or-update, which would write
at every pass). A record is never worth a teardown or a deletion held forever: a refusal no
retry can change (the kind not installed, a right missing, an object the schema refuses) is
logged, and the lease goes on without it; anything else is retried. The sweep is a controller of
its own: each record is requeued for its `retainedUntil`, and its deletion is fenced by its uid.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter
from pydantic import ValidationError

from lessor.operator.core.kinds import DIAGNOSTICS_BUNDLES
from lessor.operator.core.writes import create_missing, delete_fenced
from lessor.operator.runtime.client import ApiError, KubeClient
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.wiring.context import Context
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import utcnow
from lessor.resources.base import API_VERSION
from lessor.resources.cluster import ClusterLease, DiagnosticsRecord
from lessor.resources.diagnostics_bundle import DiagnosticsBundle, DiagnosticsBundleSpec

log = logging.getLogger(__name__)

RECORDS_EXPIRED = Counter(
    "lessor_diagnostics_records_expired_total",
    "DiagnosticsBundle records deleted because their retention had passed.",
)


def manifest(lease: ClusterLease, record: DiagnosticsRecord) -> Json:
    spec = DiagnosticsBundleSpec(
        lease_uid=lease.metadata.uid or "",
        pool=lease.spec.pool,
        requester=lease.spec.requester or "",
        record=record,
        retained_until=record.retained_until(),
    )
    return {
        "apiVersion": API_VERSION,
        "kind": DiagnosticsBundle.kind_name(),
        "metadata": {"name": lease.metadata.name, "namespace": lease.metadata.namespace},
        "spec": spec.model_dump(mode="json", exclude_none=True),
    }


# Refusals no retry changes: the kind is not installed (404), a right is missing (403), the
# object is refused by the schema (422).
FINAL = (403, 404, 422)


async def keep(client: KubeClient, lease: ClusterLease) -> None:
    """The record of the lease's captured bundle, unless it exists or the bundle's retention is
    over."""
    record = lease.status.diagnostics if lease.status else None
    if record is None or record.state != "Captured" or record.retained_until() <= utcnow():
        return
    collection = DIAGNOSTICS_BUNDLES.path(lease.metadata.namespace)
    try:
        await create_missing(client, collection, manifest(lease, record))
    except ApiError as error:
        _unless_final(lease, error)


def _unless_final(lease: ClusterLease, error: ApiError) -> None:
    if error.status not in FINAL:
        raise error
    log.warning(
        "lease %s/%s: its diagnostics record cannot be written (%s); the bundle is served only"
        " while the lease exists",
        lease.metadata.namespace,
        lease.metadata.name,
        error,
    )


def setup(context: Context) -> Controller:
    records = context.informer(DIAGNOSTICS_BUNDLES)
    # An upgrade that kept the old CRDs or Role has no such kind to list: the records wait for
    # it, and the rest of the operator serves (bundles are then served while leases exist).
    records.optional = True
    sweep = RecordSweep(context.client, records)
    return context.controller(DiagnosticsBundle, sweep.reconcile).watch(records)


class RecordSweep:
    def __init__(self, client: KubeClient, records: Informer) -> None:
        self.client = client
        self.records = records

    async def reconcile(self, key: str) -> Result:
        obj = self.records.store.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return Result()
        try:
            spec = DiagnosticsBundleSpec.model_validate(obj.get("spec") or {})
        except ValidationError:  # not the operator's writing: left for a person to look at
            log.warning("diagnostics record %s is not one this operator reads; kept", key)
            return Result()
        left = (spec.retained_until - utcnow()).total_seconds()
        if left > 0:
            return Result(requeue_after=left)
        await delete_fenced(self.client, DIAGNOSTICS_BUNDLES, obj)
        RECORDS_EXPIRED.inc()
        log.info("diagnostics record %s deleted: its retention ended", key)
        return Result()
