"""Kubernetes Events on lessor's objects, so `kubectl describe` tells a lease's story.

Written as events.k8s.io/v1 Events (the API that replaces core/v1 Events, and which core/v1
clients such as `kubectl describe` still read). Repeats of one (object, reason, note) are
folded into one Event with a series count instead of a new object each time. Recording never
fails a reconcile: an Event is information, not state.
"""

from __future__ import annotations

import logging
import secrets

from lessor.operator.runtime.client import ApiError, KubeClient, ResourceType
from lessor.protocol.json_object import Json
from lessor.protocol.timestamps import micro_timestamp, utcnow

log = logging.getLogger(__name__)

EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event")
REPORTING_CONTROLLER = "lessor.dev/operator"


class EventRecorder:
    def __init__(self, client: KubeClient, instance: str) -> None:
        self.client = client
        self.instance = instance
        self._series: dict[tuple[str, str, str], tuple[str, int]] = {}

    async def record(
        self, obj: Json, event_type: str, reason: str, note: str, action: str | None = None
    ) -> None:
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or "default"
        key = (metadata["uid"], reason, note)
        try:
            previous = self._series.get(key)
            if previous is not None:
                name, count = previous
                patch = {
                    "series": {"count": count + 1, "lastObservedTime": micro_timestamp(utcnow())}
                }
                await self.client.merge_patch(EVENTS.path(namespace, name), patch)
                self._series[key] = (name, count + 1)
                return
            name = f"{metadata['name']}.{secrets.token_hex(8)}"
            event = {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "eventTime": micro_timestamp(utcnow()),
                "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.instance[:128],
                "action": action or reason,
                "reason": reason,
                "type": event_type,
                "note": note[:1024],
                "regarding": {
                    "apiVersion": obj.get("apiVersion"),
                    "kind": obj.get("kind"),
                    "name": metadata["name"],
                    "namespace": metadata.get("namespace"),
                    "uid": metadata["uid"],
                    "resourceVersion": metadata.get("resourceVersion"),
                },
            }
            await self.client.create(EVENTS.path(namespace), event)
            if len(self._series) > 10_000:
                self._series.clear()
            self._series[key] = (name, 1)
        except ApiError as error:
            log.warning("event %s on %s not recorded: %s", reason, metadata.get("name"), error)
