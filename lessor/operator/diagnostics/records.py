"""The DiagnosticsBundle records: written when a capture is stored, deleted when the pool's
`diagnostics.retention` has passed (lessor.resources.diagnostics_bundle says why they exist).

The record is written before the lease's `status.diagnostics` says Captured: after a kill -9
between the two, the capture runs again and writes the record again (the same name, the newer
capture's figures), so a Captured lease always has its record. A lease captured by an operator
that wrote none gets it when the lease object goes (deleted by retention or by hand), while
there is retention left. The sweep is a controller of its own: each record is requeued for its
`retainedUntil`, and its deletion is fenced by its uid.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter
from pydantic import ValidationError

from lessor.operator.context import Context
from lessor.operator.kinds import DIAGNOSTICS_BUNDLES
from lessor.operator.runtime.client import ConflictError, KubeClient
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.runtime.informer import Informer
from lessor.operator.writes import create_missing, delete_fenced
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


async def write(client: KubeClient, lease: ClusterLease, record: DiagnosticsRecord) -> None:
    """Create the lease's record, or replace the spec of the one a previous pass wrote."""
    body = manifest(lease, record)
    collection = DIAGNOSTICS_BUNDLES.path(lease.metadata.namespace)
    try:
        await client.create(collection, body)
    except ConflictError:
        path = DIAGNOSTICS_BUNDLES.path(lease.metadata.namespace, lease.metadata.name)
        await client.merge_patch(path, {"spec": body["spec"]})


async def keep(client: KubeClient, lease: ClusterLease) -> None:
    """Before an ended lease is deleted: the record of its captured bundle, unless it exists or
    the bundle's retention is over."""
    record = lease.status.diagnostics if lease.status else None
    if record is None or record.state != "Captured" or record.retained_until() <= utcnow():
        return
    collection = DIAGNOSTICS_BUNDLES.path(lease.metadata.namespace)
    await create_missing(client, collection, manifest(lease, record))


def setup(context: Context) -> Controller:
    records = context.informer(DIAGNOSTICS_BUNDLES)
    sweep = RecordSweep(context.client, records)
    return context.controller("diagnosticsbundle", sweep.reconcile).watch(records)


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
