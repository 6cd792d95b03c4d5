"""Finished ClusterLeases deleted once `--lease-retention` has passed since they ended (their
owner can read how a lease ended until then; listings do not grow with history).

Why a sweep of its own: the shared lease cache holds only the leases that are not finished
(kinds.CACHED), so a day of CI history (100,000 ended leases) costs no memory and no list at
start (issue 45). The sweep pages through the finished leases every `interval` as a server-side
Table of three columns (name, when it ended, whether it is being deleted), not as objects: one
row is about a hundred bytes where the object is kilobytes. Only a lease it acts on is read
whole.

Deleting a lease: its diagnostics record is kept (lessor.operator.diagnostics.records; made
already when the capture finished, this covers one captured by an older operator), its
finalizer is removed if a crash left it (the lease reconciler removes it when the lease
finishes), and it is deleted fenced by its uid. Each step reads what it changes and is
skipped when done, so a sweep replayed after a kill -9 does the rest. A lease someone else is
deleting (kubectl) is finished the same way.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from lessor.operator.core.kinds import LEASES
from lessor.operator.core.writes import delete_fenced, remove_finalizer
from lessor.operator.diagnostics import records as diagnostics_records
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Controller, Result
from lessor.operator.wiring.context import Context
from lessor.protocol.timestamps import utcnow
from lessor.resources.cluster import LEASE_FINALIZER, ClusterLease

log = logging.getLogger(__name__)

KEY = "lease-retention"
PAGE = 500
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


@dataclass(frozen=True)
class Row:
    name: str
    ended: datetime.datetime | None
    deleting: bool


def interval(retention: datetime.timedelta) -> float:
    """Seconds between sweeps: a tenth of the retention, between 1 s and 5 min (a lease is
    deleted at most that late)."""
    return min(max(retention.total_seconds() / 10, 1.0), 300.0)


def setup(context: Context) -> Controller:
    """One key, reconciled at start and every interval; the lease cache is watched only to be
    waited for."""
    sweep = RetentionSweep(
        context.client, context.settings.namespace, context.settings.lease_retention
    )
    controller = context.controller(KEY, sweep.reconcile).watch(
        context.informer(LEASES), lambda _: []
    )
    controller.enqueue(KEY)
    return controller


class RetentionSweep:
    def __init__(
        self, client: KubeClient, namespace: str, retention: datetime.timedelta | None
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.retention = retention
        self.selectable = True  # the CRD lets a list select the phase

    async def reconcile(self, _key: str) -> Result:
        """Delete every finished lease whose retention has passed, and finish the deletion of
        every finished lease being deleted."""
        deleted = 0
        now = utcnow()
        async for row in self.finished():
            expired = (
                self.retention is not None
                and row.ended is not None
                and row.ended + self.retention <= now
            )
            if row.deleting or expired:
                deleted += await self._delete(row.name)
        if deleted:
            log.info("%d ended leases deleted: their retention had passed", deleted)
        if self.retention is None:
            return Result(requeue_after=300.0)  # kept forever, but deletions still finish
        return Result(requeue_after=interval(self.retention))

    async def finished(self) -> AsyncIterator[Row]:
        """Every finished lease, a page at a time, as Table rows. A CRD from before the
        selectable field and the columns (an upgrade that kept the old CRDs) is read as whole
        objects and filtered here."""
        selectors = [f"status.phase={phase}" for phase in sorted(ClusterLease.phases.finished)]
        if not self.selectable:
            selectors = [""]
        for selector in selectors:
            try:
                async for values in self._rows(selector):
                    if values.get("Phase") in ClusterLease.phases.finished:
                        yield Row(
                            name=str(values["Name"]),
                            ended=_moment(values.get("Ended")),
                            deleting=_moment(values.get("Deleting")) is not None,
                        )
            except ApiError as error:
                if error.status != 400 or not self.selectable:
                    raise
                log.warning("the ClusterLease CRD selects no phase (re-apply this version's CRDs)")
                self.selectable = False
                async for row in self.finished():
                    yield row
                return

    async def _rows(self, selector: str) -> AsyncIterator[dict[str, object]]:
        """The leases `selector` selects, a page at a time, as the Table's columns by name;
        without a selector (an old CRD, without the columns either) from the whole objects."""
        path = LEASES.path(self.namespace)
        token = ""
        while True:
            params = {"limit": str(PAGE)}
            if selector:
                params.update(fieldSelector=selector, includeObject="None")
            if token:
                params["continue"] = token
            page = await self.client.request(
                "GET", path, params=params, accept=TABLE if selector else None
            )
            if selector:
                columns = [c["name"] for c in page.get("columnDefinitions", [])]
                for row in page.get("rows") or []:
                    yield dict(zip(columns, row["cells"], strict=False))
            else:
                # The same row from whole objects (no selectable field): a page of finished
                # leases, read for three fields, is not worth a model each.
                for obj in page.get("items") or []:
                    yield {"Name": obj["metadata"]["name"],
                           "Phase": obj.get("status", {}).get("phase"),
                           "Ended": obj.get("status", {}).get("endedAt"),
                           "Deleting": obj["metadata"].get("deletionTimestamp")}  # fmt: skip
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                return

    async def _delete(self, name: str) -> int:
        """Keep the record, drop a leftover finalizer, delete: 1 when this pass deleted it."""
        try:
            obj = await self.client.get(LEASES.path(self.namespace, name))
        except NotFoundError:
            return 0
        lease = ClusterLease.model_validate(obj)
        if lease.status is None or lease.status.phase not in ClusterLease.phases.finished:
            return 0  # not the lease the row showed (a new one of the same name)
        await diagnostics_records.keep(self.client, lease)
        if LEASE_FINALIZER in lease.metadata.finalizers:
            await remove_finalizer(self.client, LEASES, obj, LEASE_FINALIZER)
        if lease.metadata.deletion_timestamp is not None:
            return 0
        await delete_fenced(self.client, LEASES, obj)
        return 1


def _moment(text: object) -> datetime.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text)  # Python 3.11 reads the "Z"
    except ValueError:
        return None
