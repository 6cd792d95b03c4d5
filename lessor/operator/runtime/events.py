"""Kubernetes Events on lessor's objects, so `kubectl describe` tells a lease's story.

Written as events.k8s.io/v1 Events (the API that replaces core/v1 Events, and which core/v1
clients such as `kubectl describe` still read). Repeats of one (object, reason, note) are
folded into one Event with a series count instead of a new object each time. Recording never
fails a reconcile: an Event is information, not state. Nor does it delay one: `record` queues
the Event and a few background writers send it, as client-go's broadcaster does (a bind used
to wait for its Event's round trip before its worker was free; issue 19). A full backlog drops
Events with a log line rather than grow without bound; `drain` waits for the backlog at
shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import secrets
from dataclasses import dataclass

from lessor.operator.runtime.client import ApiError, KubeClient, ResourceType
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import micro_timestamp, utcnow

log = logging.getLogger(__name__)

EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event")
REPORTING_CONTROLLER = "lessor.dev/operator"


@dataclass(frozen=True)
class _Pending:
    regarding: Json
    event_type: str
    reason: str
    note: str
    action: str
    at: datetime.datetime  # when it happened, not when it was written


class EventRecorder:
    def __init__(
        self, client: KubeClient, instance: str, *, writers: int = 4, backlog: int = 2000
    ) -> None:
        self.client = client
        self.instance = instance
        self.writers = writers
        self.backlog = backlog
        self._series: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._queues: list[asyncio.Queue[_Pending]] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def record(
        self, obj: Json, event_type: str, reason: str, note: str, action: str | None = None
    ) -> None:
        """Queue an Event about `obj` (as it is now: its resourceVersion is the one named)."""
        metadata = obj["metadata"]
        regarding = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": metadata["name"],
            "namespace": metadata.get("namespace"),
            "uid": metadata["uid"],
            "resourceVersion": metadata.get("resourceVersion"),
        }
        # One object's Events go through one writer, in order: a repeat is folded into the
        # Event its first occurrence created, never raced ahead of it.
        queue = self._started()[hash(metadata["uid"]) % self.writers]
        if queue.full():
            log.warning("event %s on %s dropped: backlog full", reason, metadata["name"])
            return
        queue.put_nowait(_Pending(regarding, event_type, reason, note, action or reason, utcnow()))

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait (at most `timeout` seconds) until every queued Event is written."""
        joined = asyncio.gather(*(queue.join() for queue in self._queues))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(joined, timeout)

    def _started(self) -> list[asyncio.Queue[_Pending]]:
        if not self._queues:
            self._queues = [
                asyncio.Queue(self.backlog // self.writers) for _ in range(self.writers)
            ]
            self._tasks = [
                asyncio.create_task(self._write_forever(queue), name=f"events-{n}")
                for n, queue in enumerate(self._queues)
            ]
        return self._queues

    async def _write_forever(self, queue: asyncio.Queue[_Pending]) -> None:
        while True:
            pending = await queue.get()
            try:
                await self._write(pending)
            except Exception:
                log.exception("event %s not recorded", pending.reason)
            finally:
                queue.task_done()

    async def _write(self, pending: _Pending) -> None:
        regarding = pending.regarding
        namespace = regarding.get("namespace") or "default"
        key = (regarding["uid"], pending.reason, pending.note)
        try:
            previous = self._series.get(key)
            if previous is not None:
                name, count = previous
                patch = {
                    "series": {"count": count + 1, "lastObservedTime": micro_timestamp(pending.at)}
                }
                await self.client.merge_patch(EVENTS.path(namespace, name), patch)
                self._series[key] = (name, count + 1)
                return
            name = f"{regarding['name']}.{secrets.token_hex(8)}"
            event = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": micro_timestamp(pending.at),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.instance[:128],
                "action": pending.action,
                "reason": pending.reason,
                "type": pending.event_type,
                "note": pending.note[:1024],
                "regarding": regarding,
            }
            await self.client.create(EVENTS.path(namespace), event)
            if len(self._series) > 10_000:
                self._series.clear()
            self._series[key] = (name, 1)
        except ApiError as error:
            log.warning("event %s on %s not recorded: %s", pending.reason, regarding["name"], error)
