"""DiagnosticsBundle: the record of one captured bundle, kept apart from its lease.

An ended ClusterLease is deleted after the operator's `--lease-retention` (a day by default), or
at once by `kubectl delete`; the bundle its capture stored is worth more than that (a Friday
failure read on Monday). The operator writes this record, named as the lease, before it marks
the capture done, and deletes it when the pool's `diagnostics.retention` has passed; the API
server serves the bundle from it to the lease's requester alone, whether or not the lease is
still there. Everything in it is written once, by the operator: the spec is its whole content.
"""

from __future__ import annotations

import datetime
from typing import ClassVar, Literal

from pydantic import Field

from lessor.resources.base import AGE, CrdInfo, PrinterColumn, Resource, SpecModel, StatusModel
from lessor.resources.cluster import DiagnosticsRecord, PoolName


class DiagnosticsBundleSpec(SpecModel):
    lease_uid: str = Field(min_length=1, max_length=64, description="The lease's uid.")
    pool: PoolName = Field(
        description="The lease's ClusterPool: the bundle is served only to its requester while"
        " their policy grants this pool."
    )
    requester: str = Field(
        default="",
        max_length=1024,
        description="The lease's owner; empty for a lease made without one (kubectl), whose"
        " bundle no API caller is served.",
    )
    record: DiagnosticsRecord = Field(description="The lease's status.diagnostics, as captured.")
    retained_until: datetime.datetime = Field(
        description="When the bundle stops being served and this record is deleted."
    )


class DiagnosticsBundleStatus(StatusModel):
    """Nothing yet: the record is written whole, once."""


class DiagnosticsBundle(Resource[DiagnosticsBundleSpec, DiagnosticsBundleStatus]):
    kind: Literal["DiagnosticsBundle"] = "DiagnosticsBundle"
    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="diagnosticsbundles",
        singular="diagnosticsbundle",
        short_names=("dbundle",),
        description="The record of a lease's diagnostics bundle, kept for the pool's"
        " diagnostics.retention after the capture, whether or not the lease still exists.",
        columns=(
            PrinterColumn("Pool", ".spec.pool"),
            PrinterColumn("Requester", ".spec.requester"),
            PrinterColumn("Size", ".spec.record.sizeBytes", "integer"),
            PrinterColumn("Truncated", ".spec.record.truncated", "boolean", priority=1),
            PrinterColumn("Retained-Until", ".spec.retainedUntil"),
            AGE,
        ),
    )
