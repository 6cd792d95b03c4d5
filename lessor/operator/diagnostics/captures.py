"""Capturing a lease's diagnostics bundle before its cluster is torn down, without holding the
lease's reconcile or its teardown longer than the pool's `captureTimeout`.

The lease reconciler asks `Captures.before_teardown` whether teardown may go on. The first time,
the lease's `status.diagnostics` is written as Capturing with its start time and a copy of the
pool's settings (the anchor every later pass and every restarted operator reads), and the
capture runs as a task of its own; the reconcile returns and is requeued when the task ends or
the deadline passes. The result (Captured, or Failed with why) is written with the condition
DiagnosticsCaptured and an Event; a Captured lease gets its DiagnosticsBundle record (which
keeps the bundle reachable after the lease is deleted), and teardown goes on. After a kill -9
the task is gone: the next operator starts it again with what is left of the deadline (the
object name is the same, so a second upload replaces the first), or, past the deadline, records
it as Failed. Captures take turns (turns.py: a few at once, fewer of one owner's); waiting for
one counts against the deadline.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache
from prometheus_client import Counter

from lessor.bucket import Bucket, BucketError, Credentials, Location
from lessor.operator.core import lease_traces
from lessor.operator.core.conditions import with_condition
from lessor.operator.core.kinds import INSTANCES, LEASES, SECRETS
from lessor.operator.core.writes import write_status
from lessor.operator.diagnostics import records
from lessor.operator.diagnostics.bundle import BundleWriter
from lessor.operator.diagnostics.bundle_contents import capture_cluster, lease_record
from lessor.operator.diagnostics.cluster_reader import ClusterReader, ReadError
from lessor.operator.diagnostics.turns import Turns
from lessor.operator.runtime.client import ApiError, KubeClient, NotFoundError
from lessor.operator.runtime.controller import Result
from lessor.operator.runtime.events import EventRecorder
from lessor.protocol.durations import parse_duration
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import now_seconds, timestamp, utcnow
from lessor.resources.cluster import (
    DIAGNOSTICS_CAPTURED,
    ClusterInstance,
    ClusterLease,
    Diagnostics,
    DiagnosticsRecord,
)

log = logging.getLogger(__name__)

# Of the capture timeout, the share kept for the upload (at least UPLOAD_MIN, at most UPLOAD_MAX).
UPLOAD_SHARE = 0.3
UPLOAD_MIN = 2.0
UPLOAD_MAX = 60.0
BUNDLES = Counter(
    "lessor_diagnostics_bundles_total",
    "Diagnostics captures of ended leases, by result (captured, failed).",
    ["result"],
)


@dataclass(frozen=True)
class Outcome:
    captured: bool
    message: str
    size_bytes: int | None = None
    truncated: bool = False


def object_key(settings: Diagnostics, lease: ClusterLease) -> str:
    metadata = lease.metadata
    return f"{settings.prefix}{metadata.namespace}/{metadata.name}/{metadata.uid}.tar.gz"


async def bucket_for(client: KubeClient, namespace: str, settings: Diagnostics) -> Bucket:
    """The bucket of these settings, with the credentials of their Secret (in `namespace`)."""
    credentials = None
    if settings.credentials_secret_ref is not None:
        name = settings.credentials_secret_ref.name
        try:
            secret = await client.get(SECRETS.path(namespace, name))
        except NotFoundError:
            raise BucketError(
                "CredentialsInvalid", f"the credentials Secret {namespace}/{name} does not exist"
            ) from None
        credentials = Credentials.from_secret_data(secret.get("data") or {})
    location = Location(settings.bucket, settings.region, settings.endpoint)
    return Bucket(location, credentials)


class Captures:
    def __init__(
        self, client: KubeClient, events: EventRecorder, enqueue: Callable[[str], None]
    ) -> None:
        self.client = client
        self.events = events
        self._enqueue = enqueue
        self._running: dict[str, asyncio.Task[Outcome]] = {}
        # Outcomes not yet written, by lease uid; bounded, as a lease deleted mid-capture never
        # comes back for its own.
        self._outcomes: TTLCache[str, Outcome] = TTLCache(maxsize=4096, ttl=3600)
        self._turns = Turns()

    async def before_teardown(
        self, obj: Json, lease: ClusterLease, settings: Diagnostics | None
    ) -> tuple[Json, Result | None]:
        """The lease (as written) and a Result to return while a capture runs; None once
        teardown may go on (captured, failed, or no diagnostics for this pool)."""
        assert lease.status is not None
        record = lease.status.diagnostics
        if record is None:
            if settings is None:
                return obj, None
            store = Diagnostics.model_validate(settings.model_dump())  # every field, as set now
            record = DiagnosticsRecord(
                state="Capturing",
                started_at=now_seconds(),
                store=store,
                key=object_key(store, lease),
            )
            status = lease.status.model_copy(deep=True)
            status.diagnostics = record
            obj = await write_status(self.client, LEASES, obj, status)
            lease = ClusterLease.model_validate(obj)
        if record.state != "Capturing":
            await records.keep(self.client, lease)  # a read once it exists (records.py)
            return obj, None
        uid = lease.metadata.uid or ""
        deadline = record.started_at + parse_duration(record.store.capture_timeout)
        outcome = self._outcomes.get(uid)
        if outcome is not None:  # forgotten once written: a lost write race keeps it for the retry
            obj = await self._finish(obj, lease, record, outcome)
            self._outcomes.pop(uid, None)
            await records.keep(self.client, ClusterLease.model_validate(obj))
            return obj, None
        left = (deadline - utcnow()).total_seconds()
        if left <= 0:
            running = self._running.pop(uid, None)
            if running is not None:
                running.cancel()
            seconds = parse_duration(record.store.capture_timeout).total_seconds()
            outcome = Outcome(False, f"not captured within captureTimeout ({seconds:.0f}s)")
            return await self._finish(obj, lease, record, outcome), None
        if uid not in self._running:
            key = f"{lease.metadata.namespace}/{lease.metadata.name}"
            task = asyncio.create_task(self._run(obj, lease, record, deadline))
            self._running[uid] = task
            task.add_done_callback(lambda done: self._done(uid, key, done))
        return obj, Result(requeue_after=left + 0.5)

    def _done(self, uid: str, key: str, task: asyncio.Task[Outcome]) -> None:
        if self._running.get(uid) is task:
            del self._running[uid]
            self._outcomes[uid] = _outcome_of(task)
        self._enqueue(key)

    async def _finish(
        self, obj: Json, lease: ClusterLease, record: DiagnosticsRecord, outcome: Outcome
    ) -> Json:
        assert lease.status is not None
        done = record.model_copy(deep=True)
        done.state = "Captured" if outcome.captured else "Failed"
        done.finished_at, done.message = now_seconds(), outcome.message[:1000]
        done.size_bytes, done.truncated = outcome.size_bytes, outcome.truncated
        conditions = with_condition(
            lease.status.conditions,
            DIAGNOSTICS_CAPTURED,
            outcome.captured,
            "Captured" if outcome.captured else "CaptureFailed",
            outcome.message,
            generation=lease.metadata.generation,
        )
        status = lease.status.model_copy(deep=True)
        status.diagnostics, status.conditions = done, conditions
        obj = await write_status(self.client, LEASES, obj, status)
        result = "captured" if outcome.captured else "failed"
        BUNDLES.labels(result).inc()
        lease_traces.record(
            "lease.diagnostics", lease, record.started_at,
            attributes={"lessor.diagnostics.result": result},
        )  # fmt: skip
        if outcome.captured:
            await self.events.record(obj, "Normal", "DiagnosticsCaptured", outcome.message)
        else:
            await self.events.record(obj, "Warning", "DiagnosticsFailed", outcome.message)
        return obj

    async def _run(
        self, obj: Json, lease: ClusterLease, record: DiagnosticsRecord, deadline: datetime.datetime
    ) -> Outcome:
        settings = record.store
        total = parse_duration(settings.capture_timeout).total_seconds()
        upload = min(max(total * UPLOAD_SHARE, UPLOAD_MIN), UPLOAD_MAX)
        writer = BundleWriter(settings.max_bytes)
        try:
            async with asyncio.timeout_at(_loop_time(deadline)):
                async with self._turns.turn(lease.spec.requester or ""):
                    bucket = await bucket_for(self.client, lease.metadata.namespace or "", settings)
                    timed_out = await self._gather(
                        obj=obj,
                        lease=lease,
                        writer=writer,
                        settings=settings,
                        deadline=deadline,
                        upload=upload,
                    )
                    body = writer.finish(
                        {
                            "lease": f"{lease.metadata.namespace}/{lease.metadata.name}",
                            "startedAt": timestamp(record.started_at),
                            "finishedAt": timestamp(utcnow()),
                            "maxBytes": settings.max_bytes,
                            "timedOut": timed_out,
                        }
                    )
                    size = writer.size()
                    await asyncio.to_thread(
                        bucket.put,
                        record.key,
                        body,
                        encryption=settings.server_side_encryption,
                        kms_key_id=settings.kms_key_id,
                    )
        except TimeoutError:
            return Outcome(False, f"not captured and stored within captureTimeout ({total:.0f}s)")
        except BucketError as error:
            return Outcome(False, f"the bundle could not be stored: {error.message}")
        except (ReadError, ApiError) as error:
            return Outcome(False, f"the cluster could not be read: {error}")
        finally:
            writer.close()
        parts = [
            f"{len(writer.entries)} files, {size} bytes in s3://{settings.bucket}/{record.key}"
        ]
        if writer.truncated:
            parts.append(f"partial: {'; '.join(writer.cuts())} (capture.json lists what)")
        if timed_out:
            parts.append("the cluster's answers ran out of time: in part")
        return Outcome(True, "; ".join(parts), size, writer.truncated or timed_out)

    async def _gather(
        self,
        *,
        obj: Json,
        lease: ClusterLease,
        writer: BundleWriter,
        settings: Diagnostics,
        deadline: datetime.datetime,
        upload: float,
    ) -> bool:
        """Fill the bundle; True when the cluster's part ran out of time (kept in part)."""
        writer.add_json("lessor/lease.json", lease_record(obj))
        await self._lease_events(lease, writer)
        try:
            kubeconfig = await self._admin_kubeconfig(lease)
            reader = ClusterReader(kubeconfig, writer.budget)
        except (ApiError, KeyError, ValueError, ReadError) as error:
            writer.failed("cluster", f"no kubeconfig to read the cluster with: {error}")
            return False
        cluster_deadline = _loop_time(deadline) - upload
        try:
            async with asyncio.timeout_at(cluster_deadline):
                await capture_cluster(reader, writer, settings.log_lines)
        except TimeoutError:
            return True
        finally:
            await reader.close()
        return False

    async def _admin_kubeconfig(self, lease: ClusterLease) -> str:
        """The cluster's admin kubeconfig (its instance's Secret), not the lease's: a capture on
        expiry reads the cluster after the lease's own credential has expired with it
        (lessor.operator.backends.lease_credentials)."""
        bound = lease.status.instance if lease.status else None
        namespace = lease.metadata.namespace
        instance = ClusterInstance.model_validate(
            await self.client.get(INSTANCES.path(namespace, bound.name if bound else "-"))
        )
        if bound is None or instance.metadata.uid != bound.uid:
            raise KeyError("the lease's cluster instance is gone")
        secret = (instance.status.kubeconfig_secret if instance.status else None) or "-"
        found = await self.client.get(SECRETS.path(namespace, secret))
        return base64.b64decode(found["data"]["kubeconfig"]).decode()

    async def _lease_events(self, lease: ClusterLease, writer: BundleWriter) -> None:
        path = (
            f"/apis/events.k8s.io/v1/namespaces/{lease.metadata.namespace}/events"
            f"?fieldSelector=regarding.uid%3D{lease.metadata.uid}"
        )
        try:
            found = await self.client.get(path)
            writer.add_json("lessor/events.json", {"items": found.get("items", [])})
        except ApiError as error:
            writer.failed("lessor/events.json", str(error))


def _loop_time(moment: datetime.datetime) -> float:
    """`moment` on the event loop's clock (what asyncio.timeout_at takes)."""
    return asyncio.get_running_loop().time() + (moment - utcnow()).total_seconds()


def _outcome_of(task: asyncio.Task[Outcome]) -> Outcome:
    if task.cancelled():
        return Outcome(False, "the capture was cancelled")
    error = task.exception()
    if error is not None:
        log.warning("diagnostics capture failed unexpectedly", exc_info=error)
        return Outcome(False, f"the capture failed: {type(error).__name__}: {error}")
    return task.result()
