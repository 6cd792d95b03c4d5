"""List, then watch from the list's resourceVersion, forever: client-go's reflector.

- The list is paginated, so a large collection never arrives as one huge response.
- The watch asks for bookmarks, so the resourceVersion keeps advancing on quiet collections and
  a reconnect resumes from a recent point instead of replaying or failing with 410.
- Each watch carries a randomized server-side timeout, so reconnections of many informers spread
  out instead of arriving together, and a read timeout a little longer, so a half-open
  connection that silently stopped delivering is noticed and replaced.
- 410 Gone (the resourceVersion was compacted away) means relist; any other failure reconnects
  after a jittered exponential backoff.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random

from lessor.operator.runtime.client import ApiError, GoneError, KubeClient, ResourceType
from lessor.operator.runtime.store import Store
from lessor.protocol.backoff import Backoff

log = logging.getLogger(__name__)


# Watches that fail are retried after 0.4-0.8 s, doubling up to 15-30 s; a success resets it.
RETRY = Backoff(first=0.8, cap=30.0, jitter=0.5)


class Reflector:
    def __init__(
        self,
        client: KubeClient,
        resource: ResourceType,
        store: Store,
        *,
        namespace: str | None = None,
        page_size: int = 500,
        min_watch_timeout: float = 300.0,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.store = store
        self.namespace = namespace
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resource_version = ""
        self.relists = 0

    def _params(self, **extra: str) -> dict[str, str]:
        params = dict(extra)
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                await self.list()
                await self.watch()
                failures = 0
            except asyncio.CancelledError:
                raise
            except (ApiError, ValueError) as error:
                delay = RETRY.delay(failures)
                failures += 1
                log.warning(
                    "reflector %s: %s; retrying in %.1fs", self.resource.plural, error, delay
                )
                await asyncio.sleep(delay)

    async def list(self) -> None:
        items, token = [], ""
        path = self.resource.path(self.namespace)
        while True:
            params = self._params(limit=str(self.page_size))
            if token:
                params["continue"] = token
            try:
                page = await self.client.request("GET", path, params=params)
            except ApiError as error:
                if error.status != 400 or not self.field_selector or token:
                    raise
                # A CRD without the selectable field (an upgrade that kept the old CRDs):
                # everything is cached, as before the selector, rather than nothing.
                log.warning(
                    "reflector %s: the CRD refuses the field selector %r (re-apply this"
                    " version's CRDs); caching every object",
                    self.resource.plural,
                    self.field_selector,
                )
                self.field_selector = None
                continue
            kind = self.resource.kind
            for item in page.get("items", []):
                item.setdefault("apiVersion", self.resource.api_version)
                item.setdefault("kind", kind)
                items.append(item)
            token = page.get("metadata", {}).get("continue", "")
            if not token:
                self.resource_version = page["metadata"]["resourceVersion"]
                break
        self.relists += 1
        self.store.replace(items)

    async def watch(self) -> None:
        """Watch until the resourceVersion is too old (return to relist) or an error (raise)."""
        failures = 0
        while True:
            timeout = random.uniform(self.min_watch_timeout, 2 * self.min_watch_timeout)  # noqa: S311
            params = self._params(
                watch="1",
                resourceVersion=self.resource_version,
                allowWatchBookmarks="true",
                timeoutSeconds=str(int(timeout)),
            )
            try:
                async for line in self.client.stream_lines(
                    self.resource.path(self.namespace), params, read_timeout=timeout + 30
                ):
                    self._handle(json.loads(line))
                    failures = 0
            except GoneError:
                log.info("reflector %s: resourceVersion too old, relisting", self.resource.plural)
                return
            except ApiError as error:
                if isinstance(error, ApiError) and error.status not in (0, 429, 500, 503, 504):
                    raise
                delay = RETRY.delay(failures)
                failures += 1
                log.info(
                    "reflector %s: watch ended (%s); again in %.1fs",
                    self.resource.plural,
                    error,
                    delay,
                )
                await asyncio.sleep(delay)

    def _handle(self, event: dict[str, object]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without object: {event}")
        if kind == "ERROR":
            code = int(obj.get("code", 0))
            error_type = GoneError if code == 410 else ApiError
            raise error_type(code, str(obj.get("reason", "")), str(obj.get("message", "")))
        version = obj.get("metadata", {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = str(version)
            return
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        if kind in ("ADDED", "MODIFIED"):
            self.store.upsert(obj)
        elif kind == "DELETED":
            self.store.remove(obj)
        if version:
            self.resource_version = str(version)
